"""`moeforge dryrun PLAN...`: one rank's shard built on the meta device, by the runtime in a subprocess
(compiler/commands/runtime.py)."""
from __future__ import annotations

from moeforge.compiler.commands.runtime import cmd_dryrun

DESCRIPTION = ("Run python -m moeforge.runtime.dryrun in this interpreter (it needs torch and megatron-core; the "
               "compiler never imports them).")


def arguments(c) -> None:
    """dryrun's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("plan", nargs="+", help="plan.json or build/<recipe> directory (several: each in turn)")
    c.add_argument("--rank", default="0", help="global rank, or a comma-separated list; negative counts from "
                                               "the last rank, e.g. 0,-1 (default 0)")
    c.add_argument("--local-spec", action="store_true",
                   help="map what only Transformer Engine/DeepEP/HybridEP/APEX builds onto the local spec (listed)")
    c.add_argument("--out", help="also write the JSON report to this file")
    c.add_argument("--calibration", metavar="FILE|none", help="the memory estimate's calibration (default: the one "
                                                               "beside the platform, if any; none: fixed terms)")


def run(args) -> int:
    """Build the ranks' shards in the runtime's Python (a subprocess): the compiler imports no torch."""
    return cmd_dryrun(args)
