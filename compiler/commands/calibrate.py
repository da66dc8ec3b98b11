"""`moeforge calibrate RUN...`: its parser and run are compiler/calibrate/cli.py's (calibrate's own
command line); this is its entry in the registry."""
from __future__ import annotations

from moeforge.compiler.calibrate.cli import main

REST = "RUN... and calibrate's own options"


def forward(argv: list[str]) -> int:
    """Hand calibrate's argv to its own parser: compiler/cli.py forwards everything after the command name."""
    return main(argv)
