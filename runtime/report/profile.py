"""``--profile STEPS``: a torch.profiler trace of the chosen training steps, one Chrome-trace file per rank.

Why: `moeforge diagnose` attributes a step to the four walls from the report alone, with the calibrated
model's split; a trace of real steps says where the time went instead (time inside communication ops,
compute ops, and the gaps between them on the host).  The profiler runs only over the asked steps (it
slows them), so the report's steady state leaves those steps out.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

TRACE_DIR = "profile"
STEP_MARK = "moeforge.step"  # a record_function around each profiled step; diagnose reads its span


class ProfileError(ValueError):
    pass


def parse_steps(text: str | None, train_iters: int) -> tuple[int, int] | None:
    """"N" or "A-B" (1-based, inclusive) -> (A, B); None when not asked."""
    if not text:
        return None
    first, sep, last = text.partition("-")
    try:
        a, b = int(first), int(last) if sep else int(first)
    except ValueError:
        raise ProfileError(f"--profile {text!r}: expected a step N or a range A-B (e.g. --profile 3-4)") from None
    if not 1 <= a <= b <= train_iters:
        raise ProfileError(f"--profile {text}: the steps must lie within 1-{train_iters} (training.train_iters)")
    return a, b


def trace_path(out_dir: Path, rank: int) -> Path:
    return out_dir / TRACE_DIR / f"rank{rank}.trace.json"


class StepProfiler:
    """Starts torch.profiler before the first asked step and writes the trace after the last."""

    def __init__(self, steps: tuple[int, int] | None, out_dir: Path, rank: int):
        self.steps, self.out_dir, self.rank = steps, out_dir, rank
        self.prof = None

    def wanted(self, step: int) -> bool:
        return self.steps is not None and self.steps[0] <= step <= self.steps[1]

    @contextlib.contextmanager
    def step(self, step: int):
        if not self.wanted(step):
            yield
            return
        import torch

        if self.prof is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=activities)
            self.prof.start()
        with torch.profiler.record_function(f"{STEP_MARK} {step}"):
            yield
        if step == self.steps[1]:
            self.finish()

    def finish(self) -> None:
        if self.prof is None:
            return
        self.prof.stop()
        path = trace_path(self.out_dir, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)
        self.prof = None

    def summary(self, world: int) -> dict | None:
        if self.steps is None:
            return None
        return {"steps": list(self.steps), "traces": [str(Path(TRACE_DIR) / f"rank{r}.trace.json") for r in range(world)],
                "format": "chrome trace (torch.profiler export_chrome_trace)", "step_mark": STEP_MARK}
