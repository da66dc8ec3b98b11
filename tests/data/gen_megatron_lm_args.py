"""Write compiler/data/megatron_lm_args.json: Megatron-LM's own argument parser, as data.

Run in .venv312 (the megatron-core 0.19.2 wheel ships megatron/training):
    .venv312/bin/python tests/data/gen_megatron_lm_args.py
For every option: its destination, action kind, default, nargs and choices, so the compiler can
emit a plan value through the flag Megatron-LM really reads, and knows Megatron-LM's default
without importing it. tests/fidelity checks that the stored file equals what the installed
release produces.
"""
from __future__ import annotations

import argparse
import enum
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "compiler" / "data" / "megatron_lm_args.json"


def _plain(value):
    if isinstance(value, enum.Enum):
        return value.name  # e.g. --attention-backend's AttnBackend.auto: what a plan writes
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def _kind(action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "boolean_optional"  # split per flag below: --x is store_true, --no-x store_false
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._StoreFalseAction):
        return "store_false"
    if isinstance(action, argparse._StoreConstAction):
        return "store_const"
    return "list" if action.nargs in ("+", "*") else "value"


def table() -> dict:
    from megatron.core import package_info
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    options = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        entry = {"dest": action.dest, "kind": _kind(action), "default": _plain(action.default)}
        if action.choices is not None:
            entry["choices"] = _plain(list(action.choices))
        if _kind(action) == "store_const":
            entry["const"] = _plain(action.const)
        for flag in action.option_strings:
            if flag.startswith("--") and entry["kind"] == "boolean_optional":
                # argparse.BooleanOptionalAction: the bare flag sets True, its --no- form False (neither takes a
                # value; a functional-test model_config.yaml writes `--flag: true`)
                negated = flag.startswith("--no-") and "--" + flag[5:] in action.option_strings
                options[flag] = {**entry, "kind": "store_false" if negated else "store_true"}
            elif flag.startswith("--"):
                options[flag] = entry
    return {"release": package_info.__version__.split("+")[0], "options": dict(sorted(options.items()))}


if __name__ == "__main__":
    data = table()
    if "--check" in sys.argv:
        same = json.loads(OUT.read_text()) == data
        print("up to date" if same else f"{OUT} differs from megatron-core {data['release']}")
        sys.exit(0 if same else 1)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}: {len(data['options'])} options of Megatron-LM {data['release']}")
