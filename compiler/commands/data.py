"""`moeforge data prepare ...`: training data tools, run by the runtime in a subprocess (compiler/commands/runtime.py).
prepare's options, --help included, are moeforge.runtime's, so everything after `prepare` is handed on as it is."""
from __future__ import annotations

import argparse

from moeforge.compiler.commands.runtime import cmd_data_prepare

REST = "prepare and its own options"


def parser() -> argparse.ArgumentParser:
    """The data tools listed for `moeforge data --help`; each tool parses its own options in the runtime."""
    p = argparse.ArgumentParser(prog="moeforge data", description="Training data tools. They run in the runtime's "
                                "Python (megatron-core): `make setup`, then .venv/bin/python -m moeforge.compiler data ...")
    data = p.add_subparsers(dest="data_command", required=True, metavar="{prepare}", help="data command")
    data.add_parser("prepare", add_help=False, help="tokenize a JSONL corpus into a Megatron indexed dataset "
                                                    "PREFIX.bin/.idx/.json (see moeforge data prepare --help)")
    return p


def forward(argv: list[str]) -> int:
    """Hand `data prepare` to the runtime; with no tool named, print the usage (exit 0 on --help, else 2)."""
    if argv[:1] == ["prepare"]:
        return cmd_data_prepare(argv[1:])
    try:  # no tool named: the usage, or --help
        parser().parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    return cmd_data_prepare([])
