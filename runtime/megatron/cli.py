"""``python -m moeforge.runtime.megatron PLAN.json [--out DIR] [--strict] [--profile STEPS] [--preflight MODE]
[-- MEGATRON-LM ARGS...]``: the arguments and the order of real training.

Load the plan, check that this Python has megatron.training, export the plan's env, run the preflight
(before any process group), gate the backends (before megatron is imported), then pretrain. Exit codes
are runtime/errors.py's; 75 (EXIT_SAVED_ON_SIGNAL) means "saved a checkpoint after SIGUSR1 and stopped".
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import preflight
from ..errors import EXIT_SAVED_ON_SIGNAL, RuntimeFailure, internal, report_and_exit
from ..launch import ranks as launch_env
from ..launch.environment import apply_env, rendezvous
from ..plan import document as plan_mod, gate
from ..report import measure as report
from ..report.profile import ProfileError, parse_steps
from .args import require_megatron_training


def main(argv=None) -> int:
    """Run the entry point (``--`` passes the rest to Megatron-LM's parser); exit codes: runtime/errors.py."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="python -m moeforge.runtime.megatron", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", help="build/<recipe>/plan.json (megatron-lm.args is read next to it)")
    parser.add_argument("--out", help="directory for report.json (default: the plan's directory)")
    parser.add_argument("--strict", action="store_true",
                        help="exit non-zero when Megatron-LM rewrites a value the plan states")
    parser.add_argument("--profile", metavar="STEPS", help="write a torch.profiler trace of iteration N or "
                                                           "iterations A-B (profile/rank<R>.trace.json beside report.json)")
    preflight.add_argument(parser)
    opts = parser.parse_args(argv)
    launch_env.rank_environment()
    report.echo(launch_env.rank_line())
    prog = f"moeforge.runtime.megatron[rank {os.environ.get('RANK', '0')}]"
    try:
        plan = plan_mod.load(opts.plan)
        require_megatron_training()  # exit 3 says what this Python lacks before any version is compared
        try:
            profile = parse_steps(opts.profile, plan.training["train_iters"])
        except ProfileError as exc:
            parser.error(str(exc))
        env = apply_env(plan)
        checked = preflight.run(plan, opts.preflight, prog)  # before torch.distributed and NCCL
        gate.check(plan)
        rendezvous(int(os.environ.get("WORLD_SIZE", "1")))
        from .pretrain import train  # lazy: torch and megatron load only after the preflight and the gate

        result = train(plan, Path(opts.out) if opts.out else plan.path.parent, extra, opts.strict, env, profile,
                       checked)
    except RuntimeFailure as err:
        report_and_exit(err, prog=prog)
    except Exception as exc:  # noqa: BLE001 - one line, exit 7
        internal(exc, prog=prog)
    return EXIT_SAVED_ON_SIGNAL if result["status"] == "preempted" else 0
