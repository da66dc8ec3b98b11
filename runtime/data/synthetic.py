"""Synthetic micro-batches: seeded, reproducible, and the same wherever they must be.

Why: the runtime measures configurations, not datasets, and the EP-overlap correctness check
compares per-micro-batch losses bit for bit between two runs, so every micro-batch must be a
pure function of (seed, step, micro-batch index, data-parallel rank).  Ranks that share a
data-parallel rank (TP, PP stages, the CP group before slicing) get identical tokens; EP ranks
are data-parallel for the dense part and get different tokens, as in real training.

The kind is the plan's ``data.kind`` (plan.v1.json):
"synthetic": uniform random tokens, next-token labels (loss stays near log(vocab)).
"learnable": random inputs with label = (token + 1) mod vocab, a task a tiny model learns in a
few steps, so a falling loss shows that gradients, optimizer and schedule are wired correctly.
"mock" and "indexed" are Megatron-LM's data (``python -m moeforge.runtime.megatron``), never generated here.
"""

from __future__ import annotations

import torch

from ..errors import PlanError

KINDS = ("synthetic", "learnable")


def micro_batch(kind: str, seed: int, step: int, index: int, dp_rank: int,
                micro_batch_size: int, seq_length: int, vocab_size: int) -> dict:
    """One micro-batch (CPU tensors) of tokens/labels/loss_mask/position_ids."""
    gen = torch.Generator()
    gen.manual_seed(((seed * 1_000_003 + step) * 10_007 + index) * 1_009 + dp_rank)
    raw = torch.randint(0, vocab_size, (micro_batch_size, seq_length + 1), generator=gen)
    tokens = raw[:, :-1].contiguous()
    if kind == "learnable":
        labels = (tokens + 1) % vocab_size
    else:
        labels = raw[:, 1:].contiguous()
    position_ids = torch.arange(seq_length).unsqueeze(0).expand(micro_batch_size, -1).contiguous()
    return {
        "tokens": tokens,
        "labels": labels,
        "loss_mask": torch.ones(micro_batch_size, seq_length, dtype=torch.float32),
        "position_ids": position_ids,
    }


def step_batches(plan_training: dict, vocab_size: int, step: int, dp_rank: int,
                 device, cp_slice=None, kind: str = "synthetic") -> list[dict]:
    """All micro-batches of one step for this rank, moved to ``device`` (and CP-sliced); ``kind`` is the
    plan's data.kind."""
    if kind not in KINDS:
        raise PlanError(f"data.kind {kind!r} is read by Megatron-LM: run the plan with python -m moeforge.runtime.megatron "
                        f"(runtime.entrypoint: megatron-lm); moeforge.runtime.train generates {' or '.join(KINDS)} tokens")
    out = []
    for i in range(plan_training["num_microbatches"]):
        mb = micro_batch(kind, plan_training["seed"], step, i,
                         dp_rank, plan_training["micro_batch_size"],
                         plan_training["seq_length"], vocab_size)
        mb = {k: v.to(device) for k, v in mb.items()}
        out.append(cp_slice(mb) if cp_slice else mb)
    return out
