"""Rank identity from the launcher: torchrun sets RANK/LOCAL_RANK/WORLD_SIZE, srun sets SLURM_*.

Why: launch.sbatch starts one task per rank with srun (no torchrun in between, so a forwarded
SIGUSR1 reaches every rank and nothing kills them while they save), and both entry points
read the same three variables whichever launcher started them.
"""

from __future__ import annotations

import os

SLURM_NAMES = {"RANK": "SLURM_PROCID", "LOCAL_RANK": "SLURM_LOCALID", "WORLD_SIZE": "SLURM_NTASKS"}


def rank_environment(environ=None) -> dict:
    """Set RANK/LOCAL_RANK/WORLD_SIZE from Slurm's variables when RANK is unset; return them."""
    env = os.environ if environ is None else environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        for ours, slurm in SLURM_NAMES.items():
            if slurm in env:
                env[ours] = env[slurm]
    return {name: env.get(name) for name in SLURM_NAMES}


# Set by `moeforge` (compiler/runtime_commands.py) to its own pid for the runtime it starts.
PARENT_ENV = "MOEFORGE_PARENT_PID"


def die_with_parent(parent: int | None = None, signum: int | None = None) -> bool:
    """Ask the kernel to send ``signum`` (SIGTERM: the run cleans up) when ``parent`` exits (default: the pid
    in $MOEFORGE_PARENT_PID; nothing when unset). Linux's prctl(PR_SET_PDEATHSIG); where it is missing this
    is a no-op (False). A parent that is already gone sends the signal at once."""
    import signal

    if parent is None:
        parent = int(os.environ.get(PARENT_ENV) or 0) or None
    if parent is None:
        return False
    signum = signal.SIGTERM if signum is None else signum
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signum), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # it died before the request: nobody would send the signal now
        os.kill(os.getpid(), signum)
    return True
