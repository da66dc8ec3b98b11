"""Which kind of file `moeforge import` and `lint-config` were given: one small table, first match wins.

Why a table: each kind is one entry (its name, what it is in a user's words, how it is recognised), so a new
input kind is one more row, and a file that is none of them gets one line naming every kind that was expected
(`expected()`), never a traceback.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from moeforge.compiler.bounded import Unreadable, parse_json

LAUNCHES = ("functional-test", "bridge", "args", "launch")  # what lint-config reads as a launch
# entry points: the script a command runs says what it is (Megatron-LM's own names)
TRAINING_ENTRY = re.compile(r"(?:^|/)pretrain_(?:gpt|mamba|hybrid)\.py$")
INFERENCE_ENTRY = re.compile(r"(?:^|/)\w*(?:inference|text_generation|generate)\w*\.py$")
_BRIDGE_LINE = re.compile(r"^\+{0,2}[A-Za-z_][\w]*(\.[\w]+)+=")
_ENTRY_TEXT = re.compile(r"\w*(?:pretrain_(?:gpt|mamba|hybrid)|inference|text_generation|generate)\w*\.py\b")


def entry_point(word: str) -> str | None:
    """'training' or 'inference' for a Megatron-LM entry point script, else None."""
    if TRAINING_ENTRY.search(word):
        return "training"
    if INFERENCE_ENTRY.search(word):
        return "inference"
    return None


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _yaml(text: str):
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):  # not YAML, a 5000-digit integer, a nest 3000 deep
        return None


def _functional_test(text: str, name: str) -> bool:
    lines = _lines(text)
    if not (name.endswith((".yaml", ".yml")) or any(ln.startswith("MODEL_ARGS") for ln in lines[:40])):
        return False
    data = _yaml(text)
    return isinstance(data, dict) and isinstance(data.get("MODEL_ARGS"), dict)


def _bridge(text: str, name: str) -> bool:
    lines = _lines(text)
    return bool(lines) and all(_BRIDGE_LINE.match(ln) or re.match(r"^[A-Za-z_]\w*=null$", ln) for ln in lines)


def _args(text: str, name: str) -> bool:
    lines = _lines(text)
    return bool(lines) and all(ln.startswith("--") or ln.startswith("'") for ln in lines)


def _launch(text: str, name: str) -> bool:
    return _ENTRY_TEXT.search(text) is not None


# A Hugging Face config.json (compiler/importer/hf reads it): the keys that say so
HF_KEYS = ("model_type", "architectures", "text_config", "auto_map")


def hf_config_path(source: str) -> Path | None:
    """The config.json a source names: itself, or the one in a model directory."""
    p = Path(source)
    if source != "-" and p.is_dir() and (p / "config.json").is_file():
        return p / "config.json"
    return None


def is_hf_config(source: str, text: str | None) -> bool:
    """A Hugging Face config: a model directory, a JSON object with a model_type / architectures / text_config /
    auto_map, or a .json file (so that broken JSON is reported as JSON, not read as a shell script)."""
    if hf_config_path(source) is not None:
        return True
    if source.endswith(".json"):
        return True
    stripped = (text or "").lstrip()
    if not stripped.startswith("{"):
        return False
    try:
        data = parse_json(stripped)
    except Unreadable:
        return True  # starts like JSON: report it as JSON
    return isinstance(data, dict) and any(k in data for k in HF_KEYS)


def _hf_config(text: str, name: str) -> bool:
    return is_hf_config(name, text)


@dataclass(frozen=True)
class Kind:
    name: str
    what: str                              # in a user's words, for the line naming what was expected
    matches: Callable[[str, str], bool]    # (text, file name) -> is it one


KINDS: tuple[Kind, ...] = (
    Kind("hf-config", "a Hugging Face config.json (or a model directory holding one)", _hf_config),
    Kind("functional-test", "a Megatron-LM functional-test model_config.yaml (MODEL_ARGS:)", _functional_test),
    Kind("bridge", "a Megatron-Bridge override list (model.x=1 lines)", _bridge),
    Kind("args", "an args file (one --flag per line)", _args),
    Kind("launch", "a launch script or command line running pretrain_gpt.py (or an inference entry point)",
         _launch),
)


def detect(text: str, name: str = "") -> str | None:
    """The first kind that matches, else None."""
    return next((k.name for k in KINDS if k.matches(text, name)), None)


def expected() -> str:
    """The kinds import accepts, in one phrase, for the error on a file that is none of them."""
    return "expected " + ", ".join(k.what for k in KINDS[:-1]) + " or " + KINDS[-1].what


def what_it_is(text: str, name: str = "") -> str:
    """A few words on a file that is none of the KINDS, for the one-line refusal."""
    if not text.strip():
        return "the file is empty"
    try:
        return f"it is JSON ({_shape(parse_json(text))})"
    except ValueError:  # bounded.Unreadable: not JSON, or past its bounds
        pass
    hint = fragment_hint(text, name)
    if hint:
        return "no command in it runs pretrain_gpt.py" + hint
    data = _yaml(text)
    if isinstance(data, dict):
        return f"it is a YAML mapping without MODEL_ARGS (keys: {', '.join(map(str, list(data)[:4]))})"
    if isinstance(data, list):
        return "it is a YAML list"
    return "no command in it runs pretrain_gpt.py"


def fragment_hint(text: str, name: str = "") -> str:
    """'(MODEL_ARGS holds Megatron-LM flags: ...)' when the script keeps flags in variables but runs nothing."""
    from moeforge.compiler.launch_reader.shell import read_script  # lazy: tree-sitter, only for a file that looks like a script

    try:
        script = read_script(text, None)
    except (ValueError, RecursionError):
        return ""
    holders = [n for n, v in script.vars.items() if re.search(r"(^|\s)--[a-z]", v)]
    holders += [n for n, v in script.arrays.items() if any(re.match(r"--[a-z]", w) for w in v)]
    if not holders:
        return ""
    return (f" ({', '.join(holders[:3])} {'holds' if len(holders) == 1 else 'hold'} Megatron-LM flags: a fragment "
            "that another script sources? import the script that runs pretrain_gpt.py)")


def _shape(data) -> str:
    if isinstance(data, dict):
        return f"an object with keys {', '.join(map(str, list(data)[:4]))}"
    return f"a {type(data).__name__}"
