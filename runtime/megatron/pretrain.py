"""Real training: Megatron-LM's pretrain() on the model moeforge builds, then the report.

Megatron-LM's own loop (``megatron.training.pretrain``: data, tokenizer, checkpoints and resume,
LR schedule, logging, the exit-signal handler) trains the model moeforge builds from the plan:

1. load the plan, export its env, run the preflight (before any process group), gate the backends
   (before megatron is imported): cli.py;
2. Megatron-LM parses and validates the plan's ``megatron-lm.args`` (next to plan.json; ``${VAR}``
   expanded from the environment, an unset one is an error) plus any extra arguments; every value
   validate_args() rewrote is reported, and the MoE/overlap/shape fields of the TransformerConfig
   Megatron-LM derives must equal the plan's (else the job stops before step 1);
3. a checkpoint to resume from is checked against the plan's shape first (differing fields named);
4. pretrain() builds the model through moeforge's provider (moeforge.runtime.model.build: the plan-driven
   construction and realised-configuration check, shared with moeforge.runtime.train), then trains;
5. rank 0 writes report.json (per-step loss, rewrites, checkpoint, status).

Exit codes are runtime/errors.py's; 75 (EXIT_SAVED_ON_SIGNAL) means "saved a checkpoint after
SIGUSR1 and stopped": launch.sbatch requeues the job, which resumes from that checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..data import megatron_datasets
from ..errors import stage
from ..launch import ranks as launch_env
from ..model import cpu_support
from ..report import build as report_build, measure as report
from ..report.profile import StepProfiler
from . import checkpoint as checkpoint_guard
from .args import check_loggers, megatron_lm_argv
from .hooks import Run, forward_step, gathered_losses, signal_received, use_prebuilt_dataset_helpers
from .validate import megatron_lm_arguments


def train(plan, out_dir: Path, extra: list[str], strict: bool, env: dict,
          profile: tuple[int, int] | None = None, checked_node: dict | None = None) -> dict:
    """Megatron-LM's pretrain() on the plan's model; report.json on rank 0 (``checked_node``: the preflight's)."""
    import torch  # lazy: after the preflight and the gate (cli.py)

    cpu = cpu_support.install()
    if cpu:
        cpu_support.install_megatron_training()
    argv = megatron_lm_argv(plan, extra)
    check_loggers(argv)
    if cpu and "--distributed-backend" not in argv:
        argv += ["--distributed-backend", "gloo"]

    from megatron.core.enums import ModelType  # lazy: megatron loads after the gate
    from megatron.training import training
    from megatron.training.argument_utils import pretrain_cfg_container_from_args

    args, changed = megatron_lm_arguments(plan, argv, strict)
    resume = checkpoint_guard.check_resume(plan, args)  # before any rank touches the checkpoint
    megatron_datasets.check_data(args, plan)

    use_prebuilt_dataset_helpers()
    if resume.get("resumed_from"):
        training.load_checkpoint = checkpoint_guard.guarded_load(training.load_checkpoint, resume)
    pruned: list[str] = []
    training.save_checkpoint_and_time = checkpoint_guard.pruning_after_each_save(
        training.save_checkpoint_and_time, plan, args, pruned)
    run = Run(plan)
    run.profiler = StepProfiler(profile, out_dir, int(os.environ.get("RANK", "0"))) if profile else None
    run.wrap_train_step(training)
    saved_on_signal = False
    with cpu_support.device_scope():
        try:
            with stage("Megatron-LM's pretrain"):
                training.pretrain(pretrain_cfg_container_from_args(args, None),
                                  megatron_datasets.datasets_provider, ModelType.encoder_or_decoder,
                                  forward_step, model_provider=run.model_provider)
        except SystemExit as exc:  # Megatron-LM exits this way after a signal or --exit-interval
            if exc.code not in (0, None):
                raise
            saved_on_signal = signal_received(args)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
        else torch.device("cpu")
    losses = gathered_losses(run, device)
    peaks, peak_how = report.peak_memory_per_rank(device)
    world = torch.distributed.get_world_size()
    if run.profiler is not None:
        run.profiler.finish()  # a run stopped before the last profiled step still leaves its trace
    steps = [{"step": it, "loss": loss, "grad_norm": run.grad_norms.get(it),
              **({"time_s": run.step_times[it]} if it in run.step_times else {})}
             for it, loss in sorted(losses.items())]
    result = report_build.training_report(
        plan, entrypoint="megatron-lm", status="preempted" if saved_on_signal else "ok", steps=steps,
        times=run.step_times, profile=profile, world_size=world, placement=launch_env.placement(),
        device=device.type, peaks=peaks, peak_source=peak_how, probe=run.probe.summary(),
        cpu_stand_ins=cpu_support.active(), env=env, preflight=checked_node,
        extra={**({"profile": run.profiler.summary(world)} if run.profiler else {}),
               "iteration": getattr(args, "iteration", None), "megatron_lm_rewrites": changed,
               "realised": run.realised, "checkpoint": {**resume, "save": args.save, "pruned": pruned}})
    if torch.distributed.get_rank() == 0:
        path = report.write(out_dir, result)
        report.echo(f"{result['status']}: {len(result['steps'])} step(s) logged; report: {path}")
    torch.distributed.barrier()
    return result
