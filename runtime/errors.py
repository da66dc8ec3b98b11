"""Failure kinds of the runtime, each with its own exit code.

Why: a launcher (or a test) must tell "the plan is malformed" from "this node lacks a backend"
from "megatron-core built something other than the plan" without parsing prose, and none of
them may surface as a Python traceback.
"""

from __future__ import annotations

import sys

EXIT_BAD_PLAN = 2
EXIT_BACKEND_MISSING = 3
EXIT_CONFIG_REJECTED = 4
EXIT_REALISED_MISMATCH = 5
EXIT_SCHEDULE_MISMATCH = 6
EXIT_INTERNAL = 7
EXIT_CHECKPOINT_MISMATCH = 8
# Not a failure: runtime.megatron saved a checkpoint after SIGUSR1 (Megatron-LM's exit-signal handler)
# and stopped; launch.sbatch requeues the job on this code (75 = EX_TEMPFAIL, "try again").
EXIT_SAVED_ON_SIGNAL = 75


class RuntimeFailure(Exception):
    """An expected failure: printed as one clear message, exits with ``exit_code``."""

    exit_code = EXIT_INTERNAL
    kind = "error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class PlanError(RuntimeFailure):
    exit_code = EXIT_BAD_PLAN
    kind = "bad plan"


class BackendMissing(RuntimeFailure):
    exit_code = EXIT_BACKEND_MISSING
    kind = "backend unavailable"


class ConfigRejected(RuntimeFailure):
    exit_code = EXIT_CONFIG_REJECTED
    kind = "megatron-core rejected the plan"


class RealisedMismatch(RuntimeFailure):
    exit_code = EXIT_REALISED_MISMATCH
    kind = "realised configuration differs from the plan"


class CheckpointMismatch(RuntimeFailure):
    exit_code = EXIT_CHECKPOINT_MISMATCH
    kind = "checkpoint does not fit the plan"


class ScheduleMismatch(RuntimeFailure):
    exit_code = EXIT_SCHEDULE_MISMATCH
    kind = "schedule differs from the plan"


def report_and_exit(err: RuntimeFailure, prog: str = "moeforge-runtime") -> None:
    """Print ``err`` on stderr as ``prog: <kind>: <message>`` and exit with its code."""
    print(f"{prog}: {err.kind}: {err.message}", file=sys.stderr, flush=True)
    raise SystemExit(err.exit_code)
