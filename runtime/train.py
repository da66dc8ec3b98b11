"""``python -m moeforge.runtime.train PLAN.json [--out DIR]`` under torchrun/srun: train as planned.

Order matters and is the point of this module: load and check the plan, gate the backends
(before megatron-core is even imported), initialise torch.distributed (NCCL on GPUs, gloo on
CPU) and megatron-core's parallel state, build the MoE GPTModel chunks, verify the realised
configuration, wrap in megatron-core DDP with the distributed optimizer, then run the steps
through ``get_forward_backward_func()`` and write report.json on rank 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import random
import socket
import time
from functools import partial
from pathlib import Path

import torch

from . import cpu_support, gate, launch_env, model, realised, report, synthetic_batches
from .profile import ProfileError, StepProfiler, parse_steps
from . import plan as plan_mod
from .errors import PlanError, RuntimeFailure, ScheduleMismatch, internal, report_and_exit, stage
from .schedule_probe import ScheduleProbe


def env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise PlanError(f"environment variable {name} is not set: launch with torchrun or srun")
        return default
    return int(value)


def apply_env(plan) -> dict:
    """Export the plan's ``env`` (e.g. CUDA_DEVICE_MAX_CONNECTIONS) before CUDA, TE or NCCL
    initialise; a value the launcher already set wins and is reported, not hidden."""
    effective = {}
    for name, spec in (plan.section("env") or {}).items():
        wanted = str(spec.get("value") if isinstance(spec, dict) else spec)
        current = os.environ.setdefault(name, wanted)
        effective[name] = {"plan": wanted, "effective": current,
                           "source": "plan" if current == wanted else "launcher (differs)"}
    return effective


def init_distributed(plan) -> tuple[int, int]:
    """torch.distributed from RANK/WORLD_SIZE/LOCAL_RANK; the world must match the plan."""
    rank, world, local = env_int("RANK", 0), env_int("WORLD_SIZE", 1), env_int("LOCAL_RANK", 0)
    if world != plan.layout["world_size"]:
        raise PlanError(f"the plan's layout.world_size is {plan.layout['world_size']} but "
                        f"WORLD_SIZE is {world}")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        if world > 1:
            raise PlanError("environment variable MASTER_PORT is not set: launch with torchrun or srun "
                            "(torchrun.sh and launch.sbatch set it)")
        os.environ["MASTER_PORT"] = str(free_port())  # one process: nobody else needs to agree on it
    if rank == 0:
        report.echo(f"rendezvous {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, "
                    f"{world} rank(s)")
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(local)
    torch.distributed.init_process_group(
        "nccl" if on_gpu else "gloo", rank=rank, world_size=world,
        timeout=datetime.timedelta(minutes=10))
    return rank, world


def free_port() -> int:
    """A port the OS reports free on 127.0.0.1 (never a fixed one: two runs would collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def loss_func(loss_mask, output_tensor):
    """Megatron-LM's 3-tuple form: (sum of token losses, token count, values to log)."""
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    total = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    return total, num_tokens, {"lm loss": torch.stack([total.detach(), mask.sum().detach()])}


def forward_step(data_iterator, gpt, return_schedule_plan: bool = False):
    """forward_step_func for megatron-core schedules; the combined-1F1B path asks for a plan."""
    batch = next(data_iterator)
    args = (batch["tokens"], batch["position_ids"], None)
    if return_schedule_plan:
        sched = gpt.build_schedule_plan(*args, labels=batch["labels"], loss_mask=batch["loss_mask"])
        return sched, partial(loss_func, batch["loss_mask"])
    output = gpt(*args, labels=batch["labels"], loss_mask=batch["loss_mask"])  # MTP reads it
    return output, partial(loss_func, batch["loss_mask"])


def micro_batch_losses(losses_reduced: list, num_mb: int, device) -> list[float]:
    """Per-micro-batch loss averaged over data-parallel ranks, known on every rank.

    Only the last pipeline stage (TP rank 0) has losses; a world all-reduce of
    (sum, count) pairs brings them to rank 0 whatever the layout.
    """
    from megatron.core import parallel_state

    buf = torch.zeros(num_mb, 2, dtype=torch.float64, device=device)
    if parallel_state.is_pipeline_last_stage(ignore_virtual=True) and \
            parallel_state.get_tensor_model_parallel_rank() == 0 and losses_reduced:
        for i, item in enumerate(losses_reduced):
            buf[i] = item["lm loss"].to(torch.float64)
    torch.distributed.all_reduce(buf)
    return (buf[:, 0] / buf[:, 1].clamp(min=1)).tolist()


def train(plan, out_dir: Path, env: dict | None = None, profile: tuple[int, int] | None = None) -> dict:
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    cpu_support.install()
    rank, world = init_distributed(plan)
    model.init_parallel(plan)
    where = launch_env.placement()
    seed_everything(plan.training["seed"])
    probe = ScheduleProbe()
    probe.install()
    with stage("building the model"):
        cfg, chunks, wrapped, optimizer, checked, ignored = build(plan)

    tr = plan.training
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
        else torch.device("cpu")
    dp_rank = parallel_state.get_data_parallel_rank()
    cp_slice = None
    if plan.layout["cp"] > 1:
        from megatron.core.utils import get_batch_on_this_cp_rank
        cp_slice = get_batch_on_this_cp_rank
    fwd_bwd = get_forward_backward_func()
    probe.note_function(fwd_bwd)
    tokens_per_step = tr["global_batch_size"] * tr["seq_length"]
    steps, step_times = [], []
    profiler = StepProfiler(profile, out_dir, rank)
    for step in range(1, tr["train_iters"] + 1):
        batches = synthetic_batches.step_batches(tr, plan.model["vocab_size"], step, dp_rank, device, cp_slice,
                                    plan.section("data")["kind"])
        iters = [iter(batches) for _ in wrapped] if len(wrapped) > 1 else iter(batches)
        for m in wrapped:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        t0 = time.perf_counter()
        with cpu_support.device_scope(), stage(f"training step {step}"), profiler.step(step):
            losses_reduced = fwd_bwd(
                forward_step_func=forward_step, data_iterator=iters,
                model=wrapped if len(wrapped) > 1 else wrapped[0],
                num_microbatches=tr["num_microbatches"], seq_length=tr["seq_length"],
                micro_batch_size=tr["micro_batch_size"], forward_only=False)
            ok, grad_norm, _ = optimizer.step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        mb_losses = micro_batch_losses(losses_reduced, tr["num_microbatches"], device)
        step_loss = sum(mb_losses) / len(mb_losses)
        step_times.append(seconds)
        steps.append({"step": step, "loss": step_loss, "micro_batch_losses": mb_losses,
                      "time_s": seconds, "grad_norm": _float(grad_norm),
                      "update_successful": bool(ok), **({"profiled": True} if profiler.wanted(step) else {})})
        if step == 1 and probe.schedule_taken() != plan.runtime["schedule"]:
            raise ScheduleMismatch(
                f"the plan expects schedule {plan.runtime['schedule']!r} but megatron-core ran "
                f"{probe.schedule_taken()!r} ({probe.summary()})")
        if rank == 0:
            report.echo(report.step_line(step, tr["train_iters"], step_loss, seconds,
                                         tokens_per_step, _float(grad_norm)))

    peaks, peak_how = report.peak_memory_per_rank(device)
    steady = report.steady_state(step_times, tr.get("report_window", [1, tr["train_iters"]]),
                                 skip=profile)
    result = {
        "status": "ok",
        "plan": str(plan.path), "recipe": plan.raw.get("recipe"),
        "world_size": world, "layout": plan.layout, "placement": where,
        "ep": parallel_state.get_expert_model_parallel_world_size(),
        "dp": parallel_state.get_data_parallel_world_size(),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "cpu_stand_ins": cpu_support.active(),
        **probe.summary(),
        "schedule_planned": plan.runtime["schedule"],
        "steps": steps,
        "steady_state": steady,
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / steady["mean_s"],
        "peak_memory_bytes_rank0": peaks[0], "peak_memory_bytes_max": max(peaks),
        "peak_memory_bytes_per_rank": peaks, "peak_memory_source": peak_how,
        "realised": checked, "ignored_plan_fields": ignored, "env": env or {},
        **({"profile": profiler.summary(world)} if profile else {}),
        "versions": report.versions(),
    }
    if rank == 0:
        path = report.write(out_dir, result)
        report.echo(f"steady state (steps {steady['window'][0]}-{steady['window'][1]}): "
                    f"{steady['mean_s'] * 1e3:.1f} ms/step, {result['tokens_per_s']:.1f} tok/s; "
                    f"schedule {result['schedule_taken']}; report: {path}")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return result


def _float(value):
    if value is None:
        return None
    return float(value.item() if torch.is_tensor(value) else value)


def main(argv=None) -> int:
    launch_env.rank_environment()  # srun starts one task per rank: RANK/LOCAL_RANK/WORLD_SIZE from SLURM_* when unset
    parser = argparse.ArgumentParser(prog="python -m moeforge.runtime.train", description=__doc__)
    parser.add_argument("plan", help="build/<recipe>/plan.json")
    parser.add_argument("--out", help="directory for report.json (default: the plan's directory)")
    parser.add_argument("--profile", metavar="STEPS", help="write a torch.profiler trace of step N or steps A-B "
                                                           "(profile/rank<R>.trace.json beside report.json)")
    args = parser.parse_args(argv)
    report.echo(launch_env.rank_line())
    try:
        plan = plan_mod.load(args.plan)
        try:
            profile = parse_steps(args.profile, plan.training["train_iters"])
        except ProfileError as exc:
            parser.error(str(exc))
        env = apply_env(plan)
        gate.check(plan)  # before megatron-core is imported or any model is built
        train(plan, Path(args.out) if args.out else plan.path.parent, env, profile)
    except RuntimeFailure as err:
        report_and_exit(err, prog=f"moeforge.runtime.train[rank {os.environ.get('RANK', '0')}]")
    except Exception as exc:  # noqa: BLE001 - one line, exit 7
        internal(exc, prog=f"moeforge.runtime.train[rank {os.environ.get('RANK', '0')}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
