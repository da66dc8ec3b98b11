"""Hostile launch scripts through `moeforge import` (issue 46 items 1 and 4, issue 48 item 6): what an import writes
is data YAML cannot read as structure, what it prints is escaped for a terminal and a CI log, and what it says of
the platform and of its own verdict is true."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from moeforge.compiler.cli import main
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.recipe.compose import RECIPES
from moeforge.compiler.targets.plan import build

BASE = ("python pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 "
        "--num-experts 4 --seq-length 32 --max-position-embeddings 32 --bf16")
# the issue's payload: a flag import cannot map, whose value ends the comment it is written into
INJECTION = BASE + " \\\n  --my-team-flag $'x\\ncheckpoint: {save: /tmp/evil, interval: 1} #'\n"
BREAKS = ["\n", "\r", "\x85", "\u2028", "\u2029", "\r\n"]


@pytest.fixture
def root(tmp_path):
    top = tmp_path / "recipes"
    shutil.copytree(RECIPES / "platforms", top / "platforms")
    (top / "models").mkdir()
    return top


def _import(root: Path, tmp_path: Path, text: str, *extra: str, capsys) -> tuple[int, str, Path]:
    src = tmp_path / "launch.sh"
    src.write_text(text, encoding="utf-8")
    rc = main(["import", str(src), "--root", str(root), "--name", "hostile", "--force", *extra])
    out = capsys.readouterr()
    return rc, out.out + out.err, root / "imported" / "hostile.yaml"


def _plan(path: Path, root: Path) -> dict:
    return build(resolve(load(path, (), root)))


def _terminal_safe(text: str) -> None:
    assert not any((ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) < 0xa0 or c in "\u2028\u2029" for c in text), \
        repr(text)
    assert not any(line.lstrip().startswith("::") for line in text.splitlines()), text


def test_the_issues_launch_imports_into_a_recipe_without_a_checkpoint(root, tmp_path, capsys):
    rc, out, path = _import(root, tmp_path, INJECTION, "--platform", "h100", capsys=capsys)
    assert rc == 0, out
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert "checkpoint" not in doc or "save" not in doc["checkpoint"], doc
    plan = _plan(path, root)
    assert "/tmp/evil" not in json.dumps(plan)
    assert plan["checkpoint"]["save"] is None
    # the flag is still listed, as one escaped comment line, and printed escaped
    assert "#   --my-team-flag x\\ncheckpoint: {save: /tmp/evil, interval: 1} #  -- " in path.read_text()
    assert "not imported: --my-team-flag x\\ncheckpoint:" in out
    _terminal_safe(out)


@pytest.mark.parametrize("brk", BREAKS, ids=["LF", "CR", "NEL", "LS", "PS", "CRLF"])
def test_no_line_break_in_a_flag_value_starts_yaml(root, tmp_path, capsys, brk):
    """YAML 1.1 (PyYAML) ends a comment at NEL, LS and PS as well as at CR and LF."""
    payload = f"x{brk}checkpoint: {{save: /tmp/evil}} #"
    text = BASE + " --my-team-flag '" + payload + "' --other-flag \"$(printf '\\033]0;owned\\007')\"\n"
    rc, out, path = _import(root, tmp_path, text, "--platform", "h100", capsys=capsys)
    assert rc == 0, out
    raw = path.read_text(encoding="utf-8")
    assert yaml.safe_load(raw).get("checkpoint") is None
    assert "/tmp/evil" not in json.dumps(_plan(path, root))
    _terminal_safe(out)


def test_not_imported_lines_and_notes_are_escaped_on_the_terminal(root, tmp_path, capsys):
    esc = "x\x1b]0;owned\x07\n::error file=a.yaml,line=1::forged"
    text = BASE + " --my-team-flag $'" + esc.replace("\x1b", "\\e").replace("\x07", "\\a").replace("\n", "\\n") + "'\n"
    rc, out, _ = _import(root, tmp_path, text, "--platform", "h100", capsys=capsys)
    assert rc == 0
    assert "not imported: --my-team-flag x\\x1b]0;owned\\x07\\n::error file=a.yaml" in out, out
    _terminal_safe(out)


def test_a_platform_only_a_comment_names_is_said_to_come_from_the_comment(root, tmp_path, capsys):
    """issue 48 item 6: `# ... of H100` was reported as "the launch names H100"."""
    rc, out, path = _import(root, tmp_path, "#!/bin/bash\n# trained on 8 x H100\n" + BASE + "\n", capsys=capsys)
    assert rc == 0, out
    assert "platform h100 (a comment on line 2 names H100 (no command or variable does; pass --platform" in out
    assert "the launch names" not in out
    assert "a comment on line 2 names H100" in path.read_text()
    rc, out, _ = _import(root, tmp_path, "#!/bin/bash\nGPU=B200  # not an H100\n" + BASE + "\n", capsys=capsys)
    assert "platform b200 (the launch names B200)" in out, out


def test_an_import_whose_recipe_does_not_compile_exits_1(root, tmp_path, capsys):
    """issue 48 item 6: it printed `compile: refused` and exited 0; the files stay, for editing, and the hint says
    to edit them rather than to compile what is refused."""
    text = BASE.replace("--vocab-size 128 ", "") + " --tokenizer-type HuggingFaceTokenizer --tokenizer-model x/y\n"
    rc, out, path = _import(root, tmp_path, text, "--platform", "h100", capsys=capsys)
    assert rc == 1 and "compile: refused (1 error(s))" in out, out
    assert path.is_file() and f"next: edit {path}" in out


def test_an_args_file_note_nested_past_any_limit_is_skipped(root, tmp_path, capsys):
    """moeforge's args files carry `# not written: NAME=JSON: why` notes; one nested 100000 levels was read by
    json.loads into a RecursionError. It is read through the bounded reader: an unreadable note is skipped."""
    args = tmp_path / "x.args"
    args.write_text("# not written: x=" + "[" * 100000 + ": why\n--num-layers 2\n--hidden-size 64\n"
                    "--num-attention-heads 4\n--vocab-size 128\n--num-experts 4\n--seq-length 32\n"
                    "--max-position-embeddings 32\n")
    rc = main(["import", str(args), "--root", str(root), "--platform", "h100", "--name", "a"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "internal error" not in out.out + out.err
