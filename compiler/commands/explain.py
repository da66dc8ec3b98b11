"""`moeforge explain RECIPE`: every decision and why, with the planner's estimate."""
from __future__ import annotations

import sys

from moeforge.compiler import driver
from moeforge.compiler.commands.options import recipe_arguments
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.estimate import summary
from moeforge.compiler.estimate.calibration import CalibrationError
from moeforge.compiler.targets.explain import explain


def arguments(c) -> None:
    """explain's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    recipe_arguments(c)
    c.add_argument("--changed", action="store_true", help="only the values that differ from megatron-core's defaults")
    c.add_argument("--calibration", metavar="FILE|none", help="estimate with this calibration (default: the one "
                                                               "beside the platform, if any; none: fixed constants)")


def run(args) -> int:
    """Print every decision with its reason and the estimate; a bad calibration document is exit 1."""
    fmt = "json" if args.format == "json" else "text"
    compiled = driver.compile(args.recipe, args.overrides, strict=args.strict)
    try:  # the planner's estimate, with the calibration beside the platform (or the one chosen; "none": none)
        estimated = summary.of_plan(compiled.plan, args.calibration, compiled.composed.files.get("platform"))
    except CalibrationError as exc:
        print("\n".join(printable(f"moeforge explain: error: {line}") for line in str(exc).split("\n")),
              file=sys.stderr)
        return 1
    out = explain(compiled.resolved, fmt, args.changed, estimated)
    print(out if fmt == "json" else "\n".join(printable(line) for line in out.split("\n")))  # values are documents'
    return 0
