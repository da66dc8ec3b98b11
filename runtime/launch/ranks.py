"""Rank identity from the launcher: torchrun sets RANK/LOCAL_RANK/WORLD_SIZE, srun sets SLURM_*.

Why: launch.sbatch starts one task per rank with srun (no torchrun in between, so a forwarded
SIGUSR1 reaches every rank and nothing kills them while they save), and both entry points
read the same three variables whichever launcher started them. On several nodes the report says
where each rank ran (`placement`), so a launch that put ranks or EP groups on the wrong nodes shows.
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


def node_rank(environ=None) -> int | None:
    """This process's node among the job's: srun's SLURM_NODEID, torchrun's GROUP_RANK."""
    env = os.environ if environ is None else environ
    for name in ("SLURM_NODEID", "GROUP_RANK"):
        value = env.get(name)
        if value is not None and value.isdigit():
            return int(value)
    return None


def placement() -> dict:
    """Where each rank ran, gathered from every rank (a collective: all ranks call it): its host,
    node and local rank by global rank, and the expert-parallel groups megatron-core built from the
    rank order. A multi-node launch shows here which host each EP group spans."""
    import socket

    import torch
    from megatron.core import parallel_state

    ep_group = torch.distributed.get_process_group_ranks(parallel_state.get_expert_model_parallel_group())
    mine = {"host": socket.gethostname(), "node_rank": node_rank(),
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "ep_group": sorted(ep_group)}
    everyone: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, mine)
    return {"hosts": [r["host"] for r in everyone], "node_ranks": [r["node_rank"] for r in everyone],
            "local_ranks": [r["local_rank"] for r in everyone],
            "expert_parallel_groups": [list(g) for g in sorted({tuple(r["ep_group"]) for r in everyone})]}


def rank_line(environ=None) -> str:
    """The line each rank prints at start (RANK etc. set): in a job's per-node logs, which ranks ran where."""
    import socket

    env = os.environ if environ is None else environ
    node = node_rank(env)
    return (f"rank {env.get('RANK', '0')}/{env.get('WORLD_SIZE', '1')} on {socket.gethostname()}"
            + (f", node {node}" if node is not None else "") + f", local rank {env.get('LOCAL_RANK', '0')}")
