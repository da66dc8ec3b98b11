"""``python -m moeforge.runtime.train PLAN.json``: moeforge's light harness (under torchrun or srun).

``cli`` (the arguments and the order: plan, env, preflight, gate), ``setup`` (process group, seeds, the
model wrapped in DDP with its optimizer) and ``loop`` (synthetic micro-batches through megatron-core's
schedule, the report). Importing this package loads no part of megatron-core.
"""

from .cli import main

__all__ = ["main"]
