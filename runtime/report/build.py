"""report.json: ONE builder for both entry points (moeforge's loop and Megatron-LM's pretrain()).

Why: the report is the runtime's only output and the input to tuning decisions (`moeforge calibrate`,
`diagnose`, sweeps), so both entry points must state the same facts the same way: the steps with their
times, the steady state over the plan's ``training.report_window`` (profiled steps left out), tokens per
second, peak memory per rank and how it was measured, the schedule planned and taken, the preflight's
findings and the software that ran. What only one entry point knows comes in ``extra``.
"""

from __future__ import annotations

import statistics

from . import measure


def window(plan_window: list[int], iterations: list[int]) -> list[int]:
    """The plan's report window in the iterations this process ran: a run resumed at iteration k+1
    counts its window from there (its first step warms up like a fresh run's), clamped to the last."""
    first, last = plan_window
    offset = iterations[0] - 1 if iterations else 0
    return [first + offset, min(last + offset, iterations[-1] if iterations else last)]


def steady_state(times: dict[int, float], span: list[int], skip: tuple[int, int] | None = None) -> dict | None:
    """Mean/median/min/max step time over the inclusive iteration ``span``, leaving out the profiled
    iterations ``skip`` (profiled steps run slower); every step when the span holds none."""
    inside = {it: s for it, s in times.items() if span[0] <= it <= span[1]} or dict(times)
    if not inside:
        return None
    sample = [s for it, s in inside.items() if skip is None or not skip[0] <= it <= skip[1]] or list(inside.values())
    return {
        "window": list(span),
        **({"left_out_profiled": list(skip)} if skip else {}),
        "steps": len(sample),
        "mean_s": statistics.fmean(sample),
        "median_s": statistics.median(sample),
        "min_s": min(sample),
        "max_s": max(sample),
    }


def training_report(plan, *, entrypoint: str, status: str, steps: list[dict], times: dict[int, float],
                    profile: tuple[int, int] | None, world_size: int, placement, device: str, peaks: list[int],
                    peak_source: str, probe: dict, cpu_stand_ins: bool, env: dict, preflight: dict | None,
                    extra: dict) -> dict:
    """The report of one training run. ``steps``: one dict per logged step (``step`` first); ``times``:
    seconds per iteration run; ``profile``: the profiled iterations (marked, left out of the steady state)."""
    tr = plan.training
    its = sorted(times)
    steady = steady_state(times, window(tr.get("report_window", [1, tr["train_iters"]]), its), profile)
    tokens_per_step = tr["global_batch_size"] * tr["seq_length"]
    marked = [{**s, **({"profiled": True} if profile and profile[0] <= s["step"] <= profile[1] else {})}
              for s in steps]
    return {
        "status": status, "entrypoint": entrypoint,
        "plan": str(plan.path), "recipe": plan.raw.get("recipe"),
        "world_size": world_size, "layout": plan.layout, "placement": placement,
        "device": device, "cpu_stand_ins": cpu_stand_ins,
        "schedule_planned": plan.runtime["schedule"], **probe,
        "steps": marked,
        "steady_state": steady, "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / steady["mean_s"] if steady else None,
        "peak_memory_bytes_rank0": peaks[0], "peak_memory_bytes_max": max(peaks),
        "peak_memory_bytes_per_rank": peaks, "peak_memory_source": peak_source,
        **extra,
        "env": env, "preflight": preflight, "versions": measure.versions(),
    }
