"""One plan's estimate with the calibration it used: what `explain` prints and what `moeforge results`
records beside a measured run (its owner calls ``of_plan``).

    from moeforge.compiler.estimate import summary
    summary.of_plan(plan)                  # the calibration beside the plan's platform, if any
    summary.of_plan(plan, choice="none")   # the fixed constants; choice=PATH: that calibration file
"""
from __future__ import annotations

from pathlib import Path

from moeforge.compiler.estimate import calibration, memory, steptime


def of_plan(plan: dict, choice: str | None = None, platform_file: Path | None = None) -> dict:
    """Peak memory per rank (GiB, its pipeline rank), step time, its dominant item and tokens/s/GPU (None
    with the reason when the platform has no step-time model), and the calibration: ``calibration`` (JSON,
    None for the fixed constants) and ``calibration_note`` (the line to print)."""
    cal = calibration.for_platform(plan["platform"]["name"], choice, platform_file)
    mem, pp_rank = memory.peak(plan, calibration=cal)
    out = {"calibration": calibration.record(cal), "calibration_note": calibration.note(cal),
           "peak_memory_gib": round(mem.total / memory.GIB, 3), "pp_rank": pp_rank, "step_time_s": None,
           "dominant": None, "tokens_per_s_per_gpu": None, "step_time_missing": None}
    try:
        t = steptime.estimate(plan, calibration=cal)
        out.update(step_time_s=round(t.total_s, 6), dominant=t.dominant,
                   tokens_per_s_per_gpu=round(t.tokens_per_s_per_gpu, 1))
    except steptime.PerformanceError as exc:
        out["step_time_missing"] = str(exc)
    return out
