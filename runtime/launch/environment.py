"""What both entry points set up in a rank's process environment before anything initialises.

Why: the plan's ``env`` (e.g. CUDA_DEVICE_MAX_CONNECTIONS) only takes effect when exported before
CUDA, Transformer Engine or NCCL start, and a launcher's own value must show in the report rather
than be overwritten silently; the rendezvous port must never be a fixed one two runs collide on.
"""

from __future__ import annotations

import os
import socket

from ..errors import PlanError


def env_int(name: str, default: int | None = None) -> int:
    """An integer the launcher sets (RANK, WORLD_SIZE, ...); unset without a default is a launch error."""
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise PlanError(f"environment variable {name} is not set: launch with torchrun or srun")
        return default
    return int(value)


def apply_env(plan) -> dict:
    """Export the plan's ``env`` before CUDA, TE or NCCL initialise; a value the launcher already
    set wins and is reported (``source: launcher (differs)``), not hidden."""
    effective = {}
    for name, spec in (plan.section("env") or {}).items():
        wanted = str(spec.get("value") if isinstance(spec, dict) else spec)
        current = os.environ.setdefault(name, wanted)
        effective[name] = {"plan": wanted, "effective": current,
                           "source": "plan" if current == wanted else "launcher (differs)"}
    return effective


def free_port() -> int:
    """A port the OS reports free on 127.0.0.1 (never a fixed one: two runs would collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendezvous(world: int) -> None:
    """MASTER_ADDR/MASTER_PORT: a multi-rank run needs the launcher's port (every rank must agree on
    it); a single process picks a free one."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        if world > 1:
            raise PlanError("environment variable MASTER_PORT is not set: launch with torchrun or srun "
                            "(torchrun.sh and launch.sbatch set it)")
        os.environ["MASTER_PORT"] = str(free_port())
