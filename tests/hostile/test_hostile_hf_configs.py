"""Hostile Hugging Face config.json files through `moeforge import` (issue 46, items 3, 4 and 7): sizes past any
model are refused by range at once (num_hidden_layers 10**12 ran 36 s, then exhausted memory); a key or a value
holding a terminal escape is one located error (it was PyYAML's ReaderError as an internal error); whatever an
import writes or prints holds text from config.json only as escaped data."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from moeforge.compiler.cli import main
from moeforge.compiler.recipe.compose import RECIPES

REPO = Path(__file__).resolve().parents[2]
QWEN = json.loads((REPO / "tests/fidelity/hf_configs/qwen3-30b-a3b.json").read_text(encoding="utf-8"))
ESC = "x\x1b]0;owned\x07\n::error file=a.yaml,line=1::forged"


@pytest.fixture
def root(tmp_path):
    top = tmp_path / "recipes"
    shutil.copytree(RECIPES / "platforms", top / "platforms")
    (top / "models").mkdir()
    return top


def _import(root: Path, tmp_path: Path, config: dict, *extra: str, capsys) -> tuple[int, str, str]:
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps(config), encoding="utf-8")
    rc = main(["import", str(src), "--root", str(root), "--name", "hostile", *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _clean(text: str) -> None:
    """No control character, and no line a GitHub runner would obey, in what reached the terminal."""
    assert not any(ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) < 0xa0 for c in text), repr(text)
    assert not any(line.lstrip().startswith("::") for line in text.splitlines()), text
    assert "internal error" not in text and "Traceback" not in text


@pytest.mark.parametrize("key,value,expect", [
    ("num_hidden_layers", 10 ** 12, "num_hidden_layers: expected an integer from 1 to 4096, got 1000000000000"),
    ("hidden_size", 10 ** 12, "hidden_size: expected an integer from 1 to 16777216"),
    ("num_experts", 10 ** 9, "num_experts: expected an integer from 1 to 65536"),
    ("vocab_size", 2 ** 40, "vocab_size: expected an integer from 1 to 16777216"),
    ("max_position_embeddings", 10 ** 15, "max_position_embeddings: expected an integer from 1 to 1073741824"),
    ("rope_theta", 1e300, "rope_theta: expected a finite number of magnitude at most 1e+12"),
    ("num_hidden_layers", 10 ** 4000, "num_hidden_layers: expected an integer from 1 to 4096"),
], ids=["layers", "hidden", "experts", "vocab", "positions", "rope_theta", "4000-digit"])
def test_sizes_past_any_model_are_refused_by_range(root, tmp_path, capsys, key, value, expect):
    rc, out, err = _import(root, tmp_path, {**QWEN, key: value}, capsys=capsys)
    assert rc == 2 and expect in err and err.count("\n") == 1, err
    assert not (root / "models" / "hostile.yaml").exists()


@pytest.mark.parametrize("where", ["key", "value", "nested key", "architectures"])
def test_a_control_character_in_config_json_is_a_located_error(root, tmp_path, capsys, where):
    config = dict(QWEN)
    if where == "key":
        config[ESC] = 1
    elif where == "value":
        config["_name_or_path"] = ESC
    elif where == "nested key":
        config["rope_scaling"] = {ESC: 2.0}
    else:
        config["architectures"] = [ESC]
    rc, out, err = _import(root, tmp_path, config, capsys=capsys)
    assert rc == 2 and "control character" in err and err.count("\n") == 1, err
    assert {"key": '"x\\u001b]0;owned\\u0007', "value": "_name_or_path:", "nested key": 'rope_scaling.x\\u001b',
            "architectures": "architectures[0]:"}[where] in err, err
    _clean(out + err)


def test_a_lone_surrogate_is_a_located_error_not_an_encoding_crash(root, tmp_path, capsys):
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps(QWEN)[:-1] + ', "model_name": "a\\ud800b"}', encoding="utf-8")
    rc = main(["import", str(src), "--root", str(root), "--name", "hostile"])
    err = capsys.readouterr().err
    assert rc == 2 and "model_name" in err and "control character" in err, err


def test_unread_keys_and_notes_are_comments_that_stay_comments(root, tmp_path, capsys):
    """A key config.json holds that no field reads is listed in a comment: a newline or a NEL in it (they are
    refused as control characters; a U+0085 in a printable key too) cannot start YAML."""
    config = {**QWEN, "odd key: {x: 1} #": "y", "n\u00e9": "caf\u00e9"}
    rc, out, err = _import(root, tmp_path, config, "--platform", "h100", capsys=capsys)
    assert rc == 0, err
    doc = yaml.safe_load((root / "models" / "hostile.yaml").read_text(encoding="utf-8"))
    assert "odd key" not in doc and set(doc) >= {"architecture", "moe"}
    _clean(out + err)


def test_the_hint_after_a_model_only_import_works(root, tmp_path, capsys):
    """issue 48 item 6: the hint `moeforge import ... --platform PLATFORM` failed because the model file it had
    just written exists; the hint runs as printed."""
    rc, out, err = _import(root, tmp_path, QWEN, capsys=capsys)
    assert rc == 0, err
    hint = next(line for line in out.splitlines() if line.startswith("next:"))
    args = hint.split(" or moeforge ", 1)[1].split(" to write", 1)[0].replace("PLATFORM", "h100").split()
    assert "--force" in args
    assert main([*args, "--root", str(root)]) == 0, capsys.readouterr().err
    assert (root / "imported" / "hostile.yaml").is_file()
