"""Failure kinds of the runtime, each with its own exit code.

Why: a launcher (or a test) must tell "the plan is malformed" from "this node lacks a backend"
from "megatron-core built something other than the plan" without parsing prose, and none of
them may surface as a Python traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

EXIT_BAD_PLAN = 2
EXIT_BACKEND_MISSING = 3
EXIT_CONFIG_REJECTED = 4
EXIT_REALISED_MISMATCH = 5
EXIT_SCHEDULE_MISMATCH = 6
EXIT_INTERNAL = 7
EXIT_CHECKPOINT_MISMATCH = 8
EXIT_OUT_OF_MEMORY = 9
EXIT_PEER_LOST = 10
# The node differs from the plan's platform (versions, GPU, env) or meets a hazard's versions: found by
# the preflight before torch.distributed starts (runtime/preflight/; MOEFORGE_PREFLIGHT=warn runs anyway).
EXIT_PREFLIGHT = 11
# Not a failure: moeforge.runtime.megatron saved a checkpoint after SIGUSR1 (Megatron-LM's exit-signal handler)
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


class Stopped(ConfigRejected):
    """megatron-core raised where the runtime has no check of its own (see ``stopped``)."""


class OutOfMemory(RuntimeFailure):
    exit_code = EXIT_OUT_OF_MEMORY
    kind = "out of memory"


class PeerLost(RuntimeFailure):
    """Another rank went away mid-collective (its process or its node died, or the network between)."""

    exit_code = EXIT_PEER_LOST
    kind = "lost another rank"


# What torch's communication backends say when the rank at the other end is gone: gloo's TCP pairs
# (a plain RuntimeError naming gloo/transport), NCCL's remote-exit and abort messages, c10d's store.
PEER_LOST_SIGNS = ("gloo/transport", "Connection reset by peer", "Connection closed by peer", "Broken pipe",
                   "remote process exited", "NCCL communicator was aborted", "Connection refused")


def _peer_lost(exc: BaseException) -> bool:
    return type(exc).__name__ == "DistNetworkError" or any(sign in str(exc) for sign in PEER_LOST_SIGNS)


class CheckpointMismatch(RuntimeFailure):
    exit_code = EXIT_CHECKPOINT_MISMATCH
    kind = "checkpoint does not fit the plan"


class PreflightFailed(RuntimeFailure):
    """The node is not the platform the plan was compiled for (one finding per line of the message)."""

    exit_code = EXIT_PREFLIGHT
    kind = "preflight"


class ScheduleMismatch(RuntimeFailure):
    exit_code = EXIT_SCHEDULE_MISMATCH
    kind = "schedule differs from the plan"


def report_and_exit(err: RuntimeFailure, prog: str = "moeforge-runtime") -> None:
    """Print ``err`` on stderr as ``prog: <kind>: <message>`` (one such line per line of the message:
    a preflight's findings) and exit with its code."""
    for line in err.message.splitlines() or [""]:
        print(f"{prog}: {err.kind}: {line}", file=sys.stderr, flush=True)
    raise SystemExit(err.exit_code)


def raised_at(exc: BaseException) -> str:
    """``Type: message (file:line)``: the line a traceback ends with and where it was raised; a bare
    ``assert`` has no message of its own, so then the source line itself."""
    tb = traceback.extract_tb(exc.__traceback__)
    text = " ".join(str(exc).split())
    if len(text) > 400:
        text = text[:400] + " ..."
    if not tb:
        return f"{type(exc).__name__}: {text or '(no message)'}"
    frame = tb[-1]
    where = f"{Path(frame.filename).name}:{frame.lineno}"
    return f"{type(exc).__name__}: {text} ({where})" if text else f"{type(exc).__name__} at {where}: {frame.line}"


def stopped(exc: BaseException, during: str) -> RuntimeFailure:
    """What megatron-core (or torch) raised ``during`` a stage, as one clear failure.

    The compiler's catalogue should have refused anything megatron-core refuses; a plan that gets
    here was written by hand or met a check the catalogue does not know yet, so the message names
    the stage and the source line, and ``MOEFORGE_TRACEBACK=1`` prints the traceback too.
    """
    if os.environ.get("MOEFORGE_TRACEBACK"):
        traceback.print_exception(exc)
    hint = "; MOEFORGE_TRACEBACK=1 prints the traceback"
    if type(exc).__name__ in ("OutOfMemoryError", "MemoryError"):  # torch's (CUDA) and Python's (host)
        return OutOfMemory(f"{during}: {raised_at(exc)}; lower training.micro_batch_size, turn on recompute "
                           f"(the recipe's recompute) or shard further (moeforge plan-layout --evaluate "
                           f"RECIPE prints the estimate per rank){hint}")
    if isinstance(exc, OSError):  # a full disk or an unreadable path: not megatron-core refusing the plan
        return RuntimeFailure(f"{during}: {raised_at(exc)}{hint}")
    if _peer_lost(exc):  # a rank or node lost: not megatron-core refusing the plan either
        return PeerLost(f"{during}: {raised_at(exc)}: a rank this one talks to stopped or became unreachable "
                        f"(its node was lost, or it failed first: see the other ranks' logs){hint}")
    return Stopped(f"{during}: {raised_at(exc)}{hint}")


def internal(exc: BaseException, prog: str) -> None:
    """The last net of an entry point: what nothing else caught is one line and exit 7 (a bug of the
    runtime, or an input no check knows yet), never a traceback unless MOEFORGE_TRACEBACK=1 asks."""
    if os.environ.get("MOEFORGE_TRACEBACK"):
        traceback.print_exception(exc)
    report_and_exit(RuntimeFailure(f"{raised_at(exc)}; MOEFORGE_TRACEBACK=1 prints the traceback"), prog)


@contextmanager
def stage(during: str):
    """Run a stage of building or training; anything but a RuntimeFailure leaves as ``stopped``."""
    try:
        yield
    except RuntimeFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - becomes one clear message, never a traceback
        raise stopped(exc, during) from None
