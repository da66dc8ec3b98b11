"""`moeforge results DIR`: a sweep's results (the run is compiler/commands/sweep.py's cmd_results)."""
from __future__ import annotations

from moeforge.compiler.commands.sweep import cmd_results


def arguments(c) -> None:
    """results' flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("dir", help="the sweep's build directory (build/sweeps/NAME) or the sweep's name")
    c.add_argument("--format", choices=("table", "csv", "json"), default="table", help="what to print (default table)")
    c.add_argument("--baseline", metavar="POINT", help="show every point relative to this one (e.g. p00)")
    c.add_argument("--out", metavar="DIR", help="where to write results.{json,csv,png,html} (default: DIR itself)")
    c.add_argument("--no-plot", action="store_true", help="skip results.png and results.html")


def run(args) -> int:
    """Collect and print a sweep's results (compiler/commands/sweep.py holds the run)."""
    return cmd_results(args)
