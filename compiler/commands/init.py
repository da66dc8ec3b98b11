"""`moeforge init [DIR]`: make a directory a moeforge project (compiler/commands/scaffold.py writes it)."""
from __future__ import annotations

from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.commands.scaffold import init
from moeforge.compiler.diagnostics import printable


def arguments(c) -> None:
    """init's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("dir", nargs="?", default=None, help="the directory (default: --root, else the current one)")


def run(args) -> int:
    """Make the project (never overwriting a file) and print what was written and what to do next."""
    root = Path(args.dir).absolute() if args.dir else project.root()
    for name in init(root):
        print(printable(f"wrote {name}"))
    print(printable(f"moeforge project at {root}: add platforms with `moeforge new platform NAME`, recipes with "
                    "`moeforge new recipe MODEL PLATFORM` (or `extends: builtin:<id>`), then `moeforge check`"))
    return 0
