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
