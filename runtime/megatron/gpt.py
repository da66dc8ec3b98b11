"""The GPT pieces of Megatron-LM's pretrain_gpt.py that its wheel does not ship.

Why: megatron-core >= 0.17 wheels carry ``megatron/training`` (pretrain(), checkpoints, data
samplers, schedules, logging) but not the repository's ``pretrain_gpt.py``, whose batch, loss
and dataset functions pretrain() is handed.  These follow Megatron-LM core_v0.19.0's
pretrain_gpt.py for plain (non-SFT, non-FIM) pretraining, so the data path, the per-token loss
report and the EP-overlap ``return_schedule_plan`` hook are the ones Megatron-LM runs.
"""

from __future__ import annotations

import inspect
from functools import partial

import torch

BATCH_KEYS = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")


def _mtp_on_this_rank(config, vp_stage) -> bool:
    """Whether this (virtual) pipeline stage holds MTP layers, which embed the tokens themselves
    (pretrain_gpt.py get_batch); megatron-core 0.17 asks for the config, 0.19 for its layout and depth."""
    if not getattr(config, "mtp_num_layers", None):
        return False
    from megatron.core.transformer.multi_token_prediction import mtp_on_this_rank

    if "config" in inspect.signature(mtp_on_this_rank).parameters:
        return mtp_on_this_rank(config, ignore_virtual=False, vp_stage=vp_stage)
    return mtp_on_this_rank(layout=config.pipeline_model_parallel_layout, mtp_num_layers=config.mtp_num_layers,
                            ignore_virtual=False, vp_stage=vp_stage)


def get_batch(data_iterator, vp_stage=None, config=None):
    """This rank's micro-batch: read on TP rank 0, broadcast over TP, sliced for CP.  With PP > 1 only
    the first and last stages and a stage holding MTP layers read one (``config``: the model chunk's)."""
    from megatron.core import mpu
    from megatron.core.utils import get_batch_on_this_cp_rank, get_batch_on_this_tp_rank
    from megatron.training import get_args
    from megatron.training.utils import is_first_or_last_pipeline_stage

    args = get_args()
    mtp_here = _mtp_on_this_rank(config, vp_stage)
    if not is_first_or_last_pipeline_stage(vp_stage) and not mtp_here:
        return {key: None for key in BATCH_KEYS}
    tp_rank = mpu.get_tensor_model_parallel_rank()
    batch = {}
    if tp_rank == 0:
        batch = next(data_iterator)
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
        batch = {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v)
                 for k, v in batch.items()}
        for key in BATCH_KEYS:
            batch.setdefault(key, None)
    batch = get_batch_on_this_tp_rank(
        batch, has_cu_seqlens=False, is_hybrid_cp=False,
        create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
        broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
        broadcast_group=mpu.get_tensor_model_parallel_group(),
        cp_size=args.context_parallel_size, tp_rank=tp_rank,
        micro_batch_size=args.micro_batch_size, seq_length=args.seq_length,
        mtp_on_this_rank=mtp_here,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
        is_pipeline_last_stage=mpu.is_pipeline_last_stage())
    if args.context_parallel_size > 1:
        batch = get_batch_on_this_cp_rank(batch, is_hybrid_cp=False,
                                          cp_group=mpu.get_context_parallel_group())
    return batch


def forward_step(data_iterator, model, return_schedule_plan: bool = False, loss_func=None):
    """pretrain()'s forward_step_func; the combined-1F1B EP-overlap schedule asks for a plan."""
    from megatron.core.utils import get_attr_wrapped_model

    batch = get_batch(data_iterator, get_attr_wrapped_model(model, "vp_stage"), get_attr_wrapped_model(model, "config"))
    args = (batch["tokens"], batch["position_ids"], batch["attention_mask"])
    kwargs = {"labels": batch["labels"], "loss_mask": batch["loss_mask"]}
    if return_schedule_plan:
        return model.build_schedule_plan(*args, **kwargs), partial(loss_func, batch["loss_mask"])
    return model(*args, **kwargs), partial(loss_func, batch["loss_mask"])
