"""`moeforge migrate FILE...`: rewrite documents to the current schema version, comments kept."""
from __future__ import annotations

from pathlib import Path

from moeforge.compiler.bounded import Unreadable
from moeforge.compiler.diagnostics import CompileError, Position, error, printable
from moeforge.compiler.recipe.load import load_file
from moeforge.compiler.recipe.migrate import migrate_file


def arguments(c) -> None:
    """migrate's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("files", nargs="+", help="recipe, platform or model YAML files")
    c.add_argument("--check", action="store_true",
                   help="change nothing: list the files that would change and exit 1 if there are any")


def run(args) -> int:
    """Migrate each file (or with --check, list what would change); a file that cannot be rewritten stays unchanged."""
    diags, stale = [], []
    for name in args.files:
        try:
            load_file(Path(name), name)  # the safe loader first: located errors for bad files
            changed = migrate_file(Path(name), write=not args.check)
        except CompileError as exc:
            diags += exc.diagnostics
            continue
        except (OSError, Unreadable) as exc:  # a full disk, a read-only directory: the file is as it was
            diags.append(error("E_IO", f"cannot rewrite it: {getattr(exc, 'strerror', None) or exc} (the file is "
                               "unchanged)", Position(name)))
            continue
        if args.check:
            if changed:
                stale.append(name)
                print(printable(f"{name}: would be migrated"))
        else:
            print(printable(f"{name}: {'migrated' if changed else 'already current'}"))
    if diags:
        raise CompileError(diags)
    if args.check:
        print(printable(f"{len(stale)} of {len(args.files)} file(s) would change" if stale
                        else f"{len(args.files)} file(s) already current"))
        return 1 if stale else 0
    return 0
