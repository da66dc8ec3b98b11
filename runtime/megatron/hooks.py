"""moeforge's hooks into Megatron-LM's pretrain(): the model provider, the per-step record, the forward step.

Why: Megatron-LM's loop trains, moeforge supplies the plan-built model (the realised configuration
checked after the last chunk), records every iteration's loss and time (Megatron-LM logs only every
--log-interval), checks after step 1 that megatron-core ran the planned schedule, and brings the
losses from the last pipeline stage to rank 0 for the report.
"""

from __future__ import annotations

import contextlib
import time

from ..errors import ScheduleMismatch, stage
from ..model import build as model, cpu_support, realised
from ..model.loss import loss_func
from ..report.profile import StepProfiler
from ..report.schedule_probe import ScheduleProbe
from . import gpt

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
            with stage(f"training step {step}"), (self.profiler.step(step) if self.profiler else contextlib.nullcontext()):
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


def forward_step(data_iterator, model_chunk, return_schedule_plan: bool = False):
    """pretrain()'s forward_step_func: Megatron-LM's GPT batch and forward with moeforge's loss."""
    return gpt.forward_step(data_iterator, model_chunk, return_schedule_plan, loss_func=loss_func)


def signal_received(args) -> bool:
    """Whether Megatron-LM's exit-signal handler caught SIGUSR1 (it saved and exited on it)."""
    if not getattr(args, "exit_signal_handler", False):
        return False
    from megatron.training import global_vars

    handler = global_vars._GLOBAL_SIGNAL_HANDLER
    return bool(handler is not None and getattr(handler, "_signal_received", False))
