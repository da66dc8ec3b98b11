"""`moeforge lint-config FILE`: its parser and run are compiler/lint/config_lint.py's (the lint layer's
own command line); this is its entry in the registry."""
from __future__ import annotations

from moeforge.compiler.lint.config_lint import main_lint_config

REST = "FILE and lint-config's own options"


def forward(argv: list[str]) -> int:
    """Hand lint-config's argv to its own parser: compiler/cli.py forwards everything after the command name."""
    return main_lint_config(argv)
