"""`moeforge plan-layout MODEL --platform P --gpus N`: its parser and run are compiler/planner/cli.py's
(the planner's own command line); this is its entry in the registry."""
from __future__ import annotations

from moeforge.compiler.planner.cli import main

REST = "MODEL --platform P --gpus N and plan-layout's own options"


def forward(argv: list[str]) -> int:
    """Hand plan-layout's argv to its own parser: compiler/cli.py forwards everything after the command name."""
    return main(argv)
