"""``python -m moeforge.runtime.megatron PLAN.json``: real training in Megatron-LM's own loop.

``cli`` (arguments; plan, env, preflight, gate), ``args`` (the plan's megatron-lm.args), ``validate``
(what Megatron-LM parsed, against the plan), ``checkpoint`` (a resume that fits the plan), ``hooks``
(the model provider and per-step record pretrain() calls), ``gpt`` (pretrain_gpt.py's batch and forward)
and ``pretrain`` (the run and its report). Importing this package loads no part of megatron.
"""

from .cli import main

__all__ = ["main"]
