"""The training loss both entry points hand megatron-core's schedules.

Why: one loss, so moeforge's loop and Megatron-LM's pretrain() report the same number for the same
batch: Megatron-LM's 3-tuple form (sum of token losses, token count, values to log), which the
schedules average per token across micro-batches and data-parallel ranks.
"""

from __future__ import annotations

import torch


def loss_func(loss_mask, output_tensor):
    """Megatron-LM's 3-tuple form: (sum of token losses, token count, values to log)."""
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    total = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    return total, num_tokens, {"lm loss": torch.stack([total.detach(), mask.sum().detach()])}
