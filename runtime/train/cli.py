"""``python -m moeforge.runtime.train PLAN.json [--out DIR] [--profile STEPS] [--preflight MODE]``.

Order matters and is the point of this entry point: load and check the plan, export its env, run the
preflight (installed versions, GPU and environment against the plan's platform: before any process
group exists), gate the backends (before megatron-core is even imported), then train (``loop``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .. import preflight
from ..errors import RuntimeFailure, internal, report_and_exit
from ..launch import ranks as launch_env
from ..launch.environment import apply_env
from ..plan import document as plan_mod, gate
from ..report import measure as report
from ..report.profile import ProfileError, parse_steps


def main(argv=None) -> int:
    """Run the entry point; the exit codes are runtime/errors.py's (README: runtime)."""
    launch_env.rank_environment()  # srun starts one task per rank: RANK/LOCAL_RANK/WORLD_SIZE from SLURM_* when unset
    parser = argparse.ArgumentParser(prog="python -m moeforge.runtime.train", description=__doc__)
    parser.add_argument("plan", help="build/<recipe>/plan.json")
    parser.add_argument("--out", help="directory for report.json (default: the plan's directory)")
    parser.add_argument("--profile", metavar="STEPS", help="write a torch.profiler trace of step N or steps A-B "
                                                           "(profile/rank<R>.trace.json beside report.json)")
    preflight.add_argument(parser)
    args = parser.parse_args(argv)
    report.echo(launch_env.rank_line())
    prog = f"moeforge.runtime.train[rank {os.environ.get('RANK', '0')}]"
    try:
        plan = plan_mod.load(args.plan)
        try:
            profile = parse_steps(args.profile, plan.training["train_iters"])
        except ProfileError as exc:
            parser.error(str(exc))
        env = apply_env(plan)
        checked = preflight.run(plan, args.preflight, prog)  # before torch.distributed and NCCL
        gate.check(plan)  # before megatron-core is imported or any model is built
        from .loop import train  # lazy: torch and megatron-core load only after the preflight and the gate

        train(plan, Path(args.out) if args.out else plan.path.parent, env, profile, checked)
    except RuntimeFailure as err:
        report_and_exit(err, prog=prog)
    except Exception as exc:  # noqa: BLE001 - one line, exit 7
        internal(exc, prog=prog)
    return 0
