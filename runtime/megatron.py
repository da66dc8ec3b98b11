"""``python -m moeforge.runtime.megatron PLAN.json [--out DIR] [--strict] [-- MEGATRON-LM ARGS...]``: real training.

Megatron-LM's own loop (``megatron.training.pretrain``: data, tokenizer, checkpoints and resume,
LR schedule, logging, the exit-signal handler) trains the model moeforge builds from the plan:

1. load the plan, export its env, gate the backends (before megatron is imported);
2. Megatron-LM parses and validates the plan's ``megatron-lm.args`` (next to plan.json; ``${VAR}``
   expanded from the environment, an unset one is an error) plus any extra arguments; every value
   validate_args() rewrote is reported, and the MoE/overlap/shape fields of the TransformerConfig
   Megatron-LM derives must equal the plan's (else the job stops before step 1);
3. a checkpoint to resume from is checked against the plan's shape first (differing fields named);
4. pretrain() builds the model through moeforge's provider (moeforge.runtime.model: the plan-driven
   construction and realised-configuration check, shared with moeforge.runtime.train), then trains;
5. rank 0 writes report.json (per-step loss, rewrites, checkpoint, status).

Exit codes are runtime/errors.py's; 75 (EXIT_SAVED_ON_SIGNAL) means "saved a checkpoint after
SIGUSR1 and stopped": launch.sbatch requeues the job, which resumes from that checkpoint.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import shlex
import sys
import time
from pathlib import Path

from . import checkpoint_guard, cpu_support, gate, inputs, launch_env, megatron_gpt, model, realised, report
from . import plan as plan_mod
from .errors import (EXIT_SAVED_ON_SIGNAL, BackendMissing, ConfigRejected, PlanError, RealisedMismatch,
                     RuntimeFailure, ScheduleMismatch, internal, raised_at, report_and_exit, stage)
from .profile import ProfileError, StepProfiler, parse_steps
from .schedule_probe import ScheduleProbe
from .train import apply_env, free_port, loss_func

ARGS_FILE = "megatron-lm.args"
# TransformerConfig fields, beyond the plan's checked MoE/overlap fields, that fix the model's shape.
SHAPE_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                "kv_channels", "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk",
                "moe_shared_expert_intermediate_size", "tensor_model_parallel_size",
                "pipeline_model_parallel_size", "context_parallel_size")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def megatron_lm_argv(plan, extra: list[str]) -> list[str]:
    """The plan's megatron-lm.args as an argv list (comments skipped, ${VAR} expanded) + extra."""
    path = plan.path.parent / ARGS_FILE
    if not path.is_file():
        raise PlanError(f"{path} not found: moeforge.runtime.megatron reads the megatron-lm.args that "
                        f"`moeforge compile` writes next to plan.json")
    with stage(f"reading {path}"):
        argv = read_args_file(path)
    return [expand(token, f"{path.name}") for token in argv] + list(extra)


def read_args_file(path: Path) -> list[str]:
    """The words of an args file exactly as the compiler wrote them: each value is one shell word
    (shlex.quote in templates/megatron-lm.args.j2), so the whole text is split at once, never line by
    line: a quoted value may hold characters str.splitlines() ends a line at (\v, \f, \x85, U+2028,
    ... which a YAML "\\v" or "\\L" puts into a path)."""
    text = inputs.read_text(path)
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise PlanError(f"{path}: {exc}: not as `moeforge compile` writes it (recompile the recipe, or "
                        f"quote the value with shell quoting)") from None


def require_megatron_training() -> None:
    """moeforge.runtime.megatron runs Megatron-LM's pretrain(): megatron.training must import in this Python
    (megatron-core wheels ship it from 0.17 on), checked before anything is built."""
    import importlib.metadata
    import importlib.util

    try:
        found = importlib.util.find_spec("megatron.training") is not None
    except (ImportError, ValueError):  # no megatron package at all
        found = False
    if found:
        return
    try:
        have = f"megatron-core {importlib.metadata.version('megatron-core')}, which has no megatron/training"
    except importlib.metadata.PackageNotFoundError:
        have = "no megatron-core"
    raise BackendMissing(f"moeforge.runtime.megatron runs Megatron-LM's pretrain() from megatron.training, which "
                         f"{sys.executable} cannot import ({have}; the megatron-core wheel ships it from 0.17): "
                         f"run it with a Python that has megatron-core >= 0.17 (make setup312 builds .venv312), "
                         f"or set runtime.entrypoint: moeforge")


# Logging backends Megatron-LM imports only when asked (neither is a moeforge dependency).
LOGGERS = {"--tensorboard-dir": ("torch.utils.tensorboard", "tensorboard", "logging.tensorboard"),
           "--wandb-project": ("wandb", "wandb", "logging.wandb")}


def check_loggers(argv: list[str]) -> None:
    """A logger the plan asks for must import here, before anything is built (not at step 1)."""
    import importlib

    for flag, (module, package, knob) in LOGGERS.items():
        if flag in argv:
            try:
                importlib.import_module(module)
            except ImportError:
                raise BackendMissing(f"{knob} is set but {module} does not import in this environment: "
                                     f"pip install {package}, or unset {knob}") from None


def expand(token: str, where: str) -> str:
    """``${VAR}`` from the environment; an unset variable is an error, never an empty path."""
    missing = [m for m in _VAR.findall(token) if m not in os.environ]
    if missing:
        raise PlanError(f"{where}: {token!r} uses ${{{missing[0]}}}, which is not set in this "
                        f"rank's environment (export it before launching)")
    return _VAR.sub(lambda m: os.environ[m.group(1)], token)


def _planned(plan) -> dict:
    """Every plan value under its Megatron name (later sections never shadow the model's)."""
    out = {}
    for section in ("optimizer", "ddp_config", "training", "model", "transformer_config"):
        out.update(plan.section(section) or {})
    return out


def rewrites(before: dict, after: dict, plan) -> list[dict]:
    """What validate_args() changed, each with the plan's value where the plan states one."""
    planned = _planned(plan)
    out = []
    for key in sorted(set(before) & set(after)):
        if callable(before[key]) or callable(after[key]):
            continue
        old, new = realised.jsonable(before[key]), realised.jsonable(after[key])
        if old == new:
            continue
        entry = {"argument": key, "parsed": old, "validated": new}
        if key in planned:
            entry["plan"] = realised.jsonable(planned[key])
            entry["agrees_with_plan"] = entry["plan"] == entry["validated"]
        out.append(entry)
    return out


def config_differences(args, plan) -> list[str]:
    """Fields where the TransformerConfig Megatron-LM derives from its arguments differs from the plan."""
    from megatron.training.arguments import core_transformer_config_from_args

    try:
        derived = core_transformer_config_from_args(args)
    except (AssertionError, ValueError, TypeError, NotImplementedError) as exc:
        raise ConfigRejected(f"the TransformerConfig Megatron-LM derives from its arguments: "
                             f"{raised_at(exc)}") from None
    tc = plan.transformer_config
    fields = [f for f in (*plan.runtime.get("checked_fields", []), *SHAPE_FIELDS) if f in tc]
    diffs = []
    for field in dict.fromkeys(fields):
        ours, theirs = realised.jsonable(tc[field]), realised.jsonable(getattr(derived, field, None))
        if ours != theirs:
            diffs.append(f"{field}: plan {ours!r}, Megatron-LM {theirs!r}")
    vocab = plan.model.get("vocab_size")
    if vocab is not None and getattr(args, "padded_vocab_size", vocab) != vocab:
        diffs.append(f"vocab_size: plan {vocab}, Megatron-LM {args.padded_vocab_size} "
                     f"(its tokenizer's vocabulary padded to --make-vocab-size-divisible-by x TP)")
    return diffs


class Run:
    """State one training run gathers for its report (losses per iteration, realised checks)."""

    def __init__(self, plan):
        self.plan = plan
        self.losses: dict[int, float] = {}
        self.grad_norms: dict[int, float] = {}
        self.realised: dict = {}
        self.chunks: list = []
        self.cfg = None
        self.probe = ScheduleProbe()
        self.steps_run = 0
        self.step_times: dict[int, float] = {}
        self.profiler: StepProfiler | None = None  # --profile: a torch.profiler trace of the asked iterations

    def model_provider(self, pre_process=True, post_process=True, vp_stage=None, config=None,
                       pg_collection=None):
        """Megatron-LM's model_provider_func: one plan-built chunk per call; after the last chunk
        of this rank the realised configuration is checked (a mismatch stops before step 1)."""
        if self.cfg is None:
            import torch

            overrides = {} if torch.cuda.is_available() else {"use_cpu_initialization": True}
            self.cfg, _ = model.build_config(self.plan, overrides)
        with cpu_support.device_scope(), stage("building the model"):
            chunk = model.build_chunk(self.plan, self.cfg, pre_process, post_process, vp_stage,
                                      cast_dtype=False)  # Megatron-LM's Float16Module casts
        self.chunks.append(chunk)
        vpp = self.plan.layout.get("vpp")
        if vp_stage is None or vp_stage == vpp - 1:
            self.realised = realised.compare(self.plan, self.cfg, self.chunks)
        return chunk

    def wrap_train_step(self, training_module):
        """Record each iteration's loss (Megatron-LM logs it only every --log-interval), and check
        after the first step that megatron-core ran the planned schedule (e.g. combined 1F1B)."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        original = training_module.train_step
        self.probe.install()

        def train_step(*args, **kwargs):
            import torch
            from megatron.training import get_args

            started = time.perf_counter()
            step = get_args().curr_iteration + 1
            with stage(f"training step {step}"), (self.profiler.step(step) if self.profiler else _nothing()):
                result = original(*args, **kwargs)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            self.steps_run += 1
            if self.steps_run == 1:
                self.probe.note_function(get_forward_backward_func())
                planned = self.plan.runtime["schedule"]
                if self.probe.schedule_taken() != planned:
                    raise ScheduleMismatch(f"the plan expects schedule {planned!r} but megatron-core ran "
                                           f"{self.probe.schedule_taken()!r} ({self.probe.summary()})")
            loss_dict, grad_norm = result[0], result[5]
            iteration = get_args().curr_iteration + 1
            self.step_times[iteration] = seconds
            if "lm loss" in loss_dict:
                value = loss_dict["lm loss"]
                self.losses[iteration] = float(value.item() if hasattr(value, "item") else value)
            if grad_norm is not None:
                self.grad_norms[iteration] = float(grad_norm)
            return result

        training_module.train_step = train_step


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def gathered_losses(run: Run, device) -> dict[int, float]:
    """Losses live on the last pipeline stage; a world all-reduce brings them to rank 0."""
    import torch

    iters = sorted(run.losses)
    top = torch.tensor([max(iters) if iters else 0], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX)
    n = int(top.item())
    buf = torch.zeros(n + 1, 2, dtype=torch.float64, device=device)
    from megatron.core import parallel_state

    if parallel_state.is_pipeline_last_stage(ignore_virtual=True) and \
            parallel_state.get_tensor_model_parallel_rank() == 0 and \
            parallel_state.get_data_parallel_rank() == 0:
        for it, loss in run.losses.items():
            buf[it] = torch.tensor([loss, 1.0], dtype=torch.float64)
    torch.distributed.all_reduce(buf)
    return {it: buf[it, 0].item() / buf[it, 1].item() for it in range(1, n + 1) if buf[it, 1] > 0}


def megatron_lm_arguments(plan, argv: list[str], strict: bool):
    """(args, rewrites): Megatron-LM's parse_args + validate_args on ``argv``, set as its global
    arguments (tokenizer built), checked against the plan before anything is built."""
    from megatron.training import arguments as mlm_arguments
    from megatron.training import global_vars

    sys.argv = ["moeforge.runtime.megatron", *argv]
    try:
        args = mlm_arguments.parse_args(ignore_unknown_args=False)
    except SystemExit as exc:  # argparse already printed which argument
        raise ConfigRejected(f"Megatron-LM's argument parser refused {ARGS_FILE} (exit {exc.code}); "
                             f"see the message above") from None
    before = copy.copy(vars(args))
    try:
        mlm_arguments.validate_args(args, {})
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigRejected(f"Megatron-LM's validate_args: {raised_at(exc)}") from None
    global_vars.set_global_variables(args)
    changed = rewrites(before, vars(args), plan)
    differs = config_differences(args, plan)
    if differs:
        raise RealisedMismatch("Megatron-LM's arguments describe a different model than the plan: "
                               + "; ".join(differs))
    disagree = [c for c in changed if c.get("agrees_with_plan") is False]
    if strict and disagree:
        raise ConfigRejected("--strict: Megatron-LM rewrote planned values at start-up: " + ", ".join(
            f"{c['argument']} {c['plan']!r} -> {c['validated']!r}" for c in disagree))
    if int(os.environ.get("RANK", "0")) == 0:
        planned = [c for c in changed if "plan" in c]
        report.echo(f"Megatron-LM's validate_args set {len(changed)} argument(s) ("
                    f"{len(planned)} the plan states, {len(disagree)} differently; report.json "
                    f"megatron_lm_rewrites)" + (": " + ", ".join(
                        f"{c['argument']} {c['plan']!r} -> {c['validated']!r}" for c in disagree)
                        if disagree else ""))
    return args, changed


def train(plan, out_dir: Path, extra: list[str], strict: bool, env: dict,
          profile: tuple[int, int] | None = None) -> dict:
    import torch

    cpu = cpu_support.install()
    if cpu:
        cpu_support.install_megatron_training()
    argv = megatron_lm_argv(plan, extra)
    check_loggers(argv)
    if cpu and "--distributed-backend" not in argv:
        argv += ["--distributed-backend", "gloo"]

    from megatron.core.enums import ModelType
    from megatron.training import training
    from megatron.training.argument_utils import pretrain_cfg_container_from_args

    args, changed = megatron_lm_arguments(plan, argv, strict)
    resume = checkpoint_guard.check_resume(plan, args)  # before any rank touches the checkpoint
    megatron_gpt.check_data(args, plan)

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
                                  megatron_gpt.datasets_provider, ModelType.encoder_or_decoder,
                                  _forward_step, model_provider=run.model_provider)
        except SystemExit as exc:  # Megatron-LM exits this way after a signal or --exit-interval
            if exc.code not in (0, None):
                raise
            saved_on_signal = _signal_received(args)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
        else torch.device("cpu")
    losses = gathered_losses(run, device)
    peaks, peak_how = report.peak_memory_per_rank(device)
    where = launch_env.placement()
    rank = torch.distributed.get_rank()
    if run.profiler is not None:
        run.profiler.finish()  # a run stopped before the last profiled step still leaves its trace
    its = sorted(run.step_times)
    times = [run.step_times[it] for it in its]
    tokens_per_step = plan.training["global_batch_size"] * plan.training["seq_length"]
    profiled = [i + 1 for i, it in enumerate(its) if profile and profile[0] <= it <= profile[1]]
    steady = report.steady_state(times, [min(2, len(times)), len(times)],
                                 skip=(profiled[0], profiled[-1]) if profiled else None) if times else None
    result = {
        "status": "preempted" if saved_on_signal else "ok",
        "entrypoint": "megatron-lm",
        "plan": str(plan.path), "recipe": plan.raw.get("recipe"),
        "world_size": torch.distributed.get_world_size(), "layout": plan.layout, "placement": where,
        "device": device.type, "cpu_stand_ins": cpu_support.active(),
        "steps": [{"step": it, "loss": loss, "grad_norm": run.grad_norms.get(it),
                   **({"time_s": run.step_times[it]} if it in run.step_times else {}),
                   **({"profiled": True} if profile and profile[0] <= it <= profile[1] else {})}
                  for it, loss in sorted(losses.items())],
        "steady_state": steady, "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / steady["mean_s"] if steady else None,
        "peak_memory_bytes_rank0": peaks[0], "peak_memory_bytes_max": max(peaks),
        "peak_memory_bytes_per_rank": peaks, "peak_memory_source": peak_how,
        **({"profile": run.profiler.summary(torch.distributed.get_world_size())} if run.profiler else {}),
        "iteration": args.iteration if hasattr(args, "iteration") else None,
        "megatron_lm_rewrites": changed,
        "realised": run.realised,
        "checkpoint": {**resume, "save": args.save, "pruned": pruned},
        "schedule_planned": plan.runtime["schedule"], **run.probe.summary(),
        "env": env, "versions": report.versions(),
    }
    if rank == 0:
        path = report.write(out_dir, result)
        report.echo(f"{result['status']}: {len(result['steps'])} step(s) logged; report: {path}")
    torch.distributed.barrier()
    return result


def use_prebuilt_dataset_helpers() -> bool:
    """initialize_megatron() runs ``make`` in megatron/core/datasets to build helpers_cpp, and exits
    when that fails; the pip wheel ships the module already built but no Makefile, so the build
    step is skipped when the built module imports (on GPU machines too)."""
    try:
        from megatron.core.datasets import helpers_cpp  # noqa: F401
    except ImportError:
        return False
    from megatron.core.datasets import utils

    utils.compile_helpers = lambda: None
    return True


def _forward_step(data_iterator, model_chunk, return_schedule_plan: bool = False):
    return megatron_gpt.forward_step(data_iterator, model_chunk, return_schedule_plan, loss_func=loss_func)


def _signal_received(args) -> bool:
    if not getattr(args, "exit_signal_handler", False):
        return False
    from megatron.training import global_vars

    handler = global_vars._GLOBAL_SIGNAL_HANDLER
    return bool(handler is not None and getattr(handler, "_signal_received", False))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="python -m moeforge.runtime.megatron", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", help="build/<recipe>/plan.json (megatron-lm.args is read next to it)")
    parser.add_argument("--out", help="directory for report.json (default: the plan's directory)")
    parser.add_argument("--strict", action="store_true",
                        help="exit non-zero when Megatron-LM rewrites a value the plan states")
    parser.add_argument("--profile", metavar="STEPS", help="write a torch.profiler trace of iteration N or "
                                                           "iterations A-B (profile/rank<R>.trace.json beside report.json)")
    opts = parser.parse_args(argv)
    launch_env.rank_environment()
    report.echo(launch_env.rank_line())
    rank = os.environ.get("RANK", "0")
    try:
        plan = plan_mod.load(opts.plan)
        require_megatron_training()
        try:
            profile = parse_steps(opts.profile, plan.training["train_iters"])
        except ProfileError as exc:
            parser.error(str(exc))
        env = apply_env(plan)
        gate.check(plan)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "MASTER_PORT" not in os.environ:
            raise PlanError("environment variable MASTER_PORT is not set: launch with torchrun or srun "
                            "(torchrun.sh and launch.sbatch set it)")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        result = train(plan, Path(opts.out) if opts.out else plan.path.parent, extra, opts.strict, env, profile)
    except RuntimeFailure as err:
        report_and_exit(err, prog=f"moeforge.runtime.megatron[rank {rank}]")
    except Exception as exc:  # noqa: BLE001 - one line, exit 7
        internal(exc, prog=f"moeforge.runtime.megatron[rank {rank}]")
    return EXIT_SAVED_ON_SIGNAL if result["status"] == "preempted" else 0


if __name__ == "__main__":
    raise SystemExit(main())
