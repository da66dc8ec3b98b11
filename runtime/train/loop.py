"""moeforge's training loop: seeded synthetic micro-batches through megatron-core's schedule.

Why: the light harness runs exactly ``get_forward_backward_func()`` (the combined-1F1B EP-overlap
schedule when planned) on batches every rank can regenerate, checks after step 1 that megatron-core
ran the planned schedule, and hands what it measured to the one report builder.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import torch

from ..data import synthetic as synthetic_batches
from ..errors import ScheduleMismatch, stage
from ..launch import ranks as launch_env
from ..model import build as model, cpu_support
from ..model.loss import loss_func
from ..report import build as report_build, measure as report
from ..report.profile import StepProfiler
from ..report.schedule_probe import ScheduleProbe
from .setup import build, init_distributed, seed_everything


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


def train(plan, out_dir: Path, env: dict | None = None, profile: tuple[int, int] | None = None,
          checked_node: dict | None = None) -> dict:
    """Train ``plan`` on this rank and write report.json on rank 0 (``checked_node``: the preflight's)."""
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
    steps, times = [], {}
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
        times[step] = seconds
        steps.append({"step": step, "loss": step_loss, "micro_batch_losses": mb_losses,
                      "time_s": seconds, "grad_norm": _float(grad_norm), "update_successful": bool(ok)})
        if step == 1 and probe.schedule_taken() != plan.runtime["schedule"]:
            raise ScheduleMismatch(
                f"the plan expects schedule {plan.runtime['schedule']!r} but megatron-core ran "
                f"{probe.schedule_taken()!r} ({probe.summary()})")
        if rank == 0:
            report.echo(report.step_line(step, tr["train_iters"], step_loss, seconds,
                                         tokens_per_step, _float(grad_norm)))

    peaks, peak_how = report.peak_memory_per_rank(device)
    result = report_build.training_report(
        plan, entrypoint="moeforge", status="ok", steps=steps, times=times, profile=profile,
        world_size=world, placement=where, device=device.type, peaks=peaks, peak_source=peak_how,
        probe=probe.summary(), cpu_stand_ins=cpu_support.active(), env=env or {}, preflight=checked_node,
        extra={"ep": parallel_state.get_expert_model_parallel_world_size(),
               "dp": parallel_state.get_data_parallel_world_size(),
               "realised": checked, "ignored_plan_fields": ignored,
               **({"profile": profiler.summary(world)} if profile else {})})
    if rank == 0:
        path = report.write(out_dir, result)
        steady = result["steady_state"]
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
