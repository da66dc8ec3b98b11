"""`moeforge diagnose RUN`: its parser and run are compiler/diagnose/cli.py's (diagnose's own command
line); this is its entry in the registry."""
from __future__ import annotations

from moeforge.compiler.diagnose.cli import main

REST = "RUN and diagnose's own options"


def forward(argv: list[str]) -> int:
    """Hand diagnose's argv to its own parser: compiler/cli.py forwards everything after the command name."""
    return main(argv)
