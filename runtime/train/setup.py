"""Set up one rank of moeforge's loop: torch.distributed, seeds, then the model wrapped for training.

Why: the order is what Megatron-LM's training.py does (process group, parallel state, seed per
pipeline rank, model, realised check, DDP with its bucket hooks, distributed optimizer), so the
light harness measures what real training would run; the realised configuration is checked before
a single step.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import random

import torch

from ..errors import PlanError
from ..launch.environment import env_int, rendezvous
from ..model import build as model, cpu_support, realised
from ..report import measure


def init_distributed(plan) -> tuple[int, int]:
    """torch.distributed from RANK/WORLD_SIZE/LOCAL_RANK; the world must match the plan."""
    rank, world, local = env_int("RANK", 0), env_int("WORLD_SIZE", 1), env_int("LOCAL_RANK", 0)
    if world != plan.layout["world_size"]:
        raise PlanError(f"the plan's layout.world_size is {plan.layout['world_size']} but "
                        f"WORLD_SIZE is {world}")
    rendezvous(world)
    if rank == 0:
        measure.echo(f"rendezvous {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, "
                     f"{world} rank(s)")
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(local)
    torch.distributed.init_process_group(
        "nccl" if on_gpu else "gloo", rank=rank, world_size=world,
        timeout=datetime.timedelta(minutes=10))
    return rank, world


def seed_everything(seed: int) -> None:
    """Megatron-LM's recipe: seed + 100*pp_rank, then the model-parallel RNG tracker."""
    from megatron.core import parallel_state, tensor_parallel

    seed = seed + 100 * parallel_state.get_pipeline_model_parallel_rank()
    random.seed(seed)
    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)


def build(plan):
    """(config, raw chunks, DDP chunks, optimizer, realised comparison, ignored plan keys)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    overrides = {} if torch.cuda.is_available() else {"use_cpu_initialization": True}
    cfg, ignored = model.build_config(plan, overrides)
    with cpu_support.device_scope():  # construction calls .cuda() in places (e.g. MTP embedding)
        chunks = model.build_model(plan, cfg)
    checked = realised.compare(plan, cfg, chunks)  # raises RealisedMismatch before training
    if torch.cuda.is_available():
        chunks = [c.cuda(torch.cuda.current_device()) for c in chunks]

    ddp_known = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    ddp_kwargs, ddp_ignored = model.split_known(plan.section("ddp_config"), ddp_known, "ddp_config")
    model.check_integers(ddp_kwargs, DistributedDataParallelConfig, "ddp_config")
    ddp_cfg = DistributedDataParallelConfig(**ddp_kwargs)
    wrapped = [DistributedDataParallel(config=cfg, ddp_config=ddp_cfg, module=c,
                                       disable_bucketing=i > 0) for i, c in enumerate(chunks)]

    opt_known = {f.name for f in dataclasses.fields(OptimizerConfig)}
    opt_values = {k: model.DTYPES[v] if k.endswith("_dtype") and isinstance(v, str) else v
                  for k, v in plan.section("optimizer").items()}
    opt_values.update(bf16=cfg.bf16, fp16=cfg.fp16, params_dtype=cfg.params_dtype)
    opt_kwargs, opt_ignored = model.split_known(opt_values, opt_known, "optimizer")
    model.check_integers(opt_kwargs, OptimizerConfig, "optimizer")
    with cpu_support.device_scope():
        optimizer = get_megatron_optimizer(OptimizerConfig(**opt_kwargs), wrapped)

    # Hooks as Megatron-LM's training.py installs them (schedules call them per model chunk).
    one = (lambda fns: fns[0]) if len(wrapped) == 1 else (lambda fns: fns)
    if ddp_cfg.overlap_grad_reduce:
        cfg.no_sync_func = one([m.no_sync for m in wrapped])
        cfg.grad_sync_func = one([m.start_grad_sync for m in wrapped])
    if ddp_cfg.overlap_param_gather and getattr(ddp_cfg, "align_param_gather", False):
        cfg.param_sync_func = one([m.start_param_sync for m in wrapped])
    cfg.finalize_model_grads_func = finalize_model_grads
    cfg.grad_scale_func = optimizer.scale_loss
    ignored = {"transformer_config": ignored, "ddp_config": ddp_ignored, "optimizer": opt_ignored}
    return cfg, chunks, wrapped, optimizer, checked, ignored
