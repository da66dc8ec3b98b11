"""What a point's runs cost, split so that points compare: the steady-state part (every timed step of the
runs priced at the measured steady-state step: the knob's effect) and the rest of the wall-clock (start-up,
compilation, teardown, failed runs: spent, but the same whichever knob wins on a long run).

Why apart: the runs of a sweep are short, so their wall-clock is mostly start-up; a GPU-hours figure from it
made the fastest point look the dearest (issue 48)."""
from __future__ import annotations

import math


def steady_gpu_hours(point: dict) -> float | None:
    """GPU-hours of the point's timed steps at its steady-state step time: median step x steps x ranks."""
    m = point.get("measured") or {}
    step = m.get("step_time_s") or {}
    median, world = step.get("median"), m.get("world_size")
    if not _positive(median) or not _positive(world):
        return None
    runs = len(step.get("runs") or ()) or 1
    steps = (step.get("steps_counted") or 0) + (step.get("warmup_steps_skipped") or 0) * runs
    return median * steps * world / 3600 if steps else None


def startup_gpu_hours(point: dict) -> float | None:
    """The rest of the runs' wall-clock GPU-hours (never below zero: a clock may round)."""
    total, steady = point.get("gpu_hours"), steady_gpu_hours(point)
    if not _positive(total) or steady is None:
        return None
    return max(0.0, total - steady)


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
