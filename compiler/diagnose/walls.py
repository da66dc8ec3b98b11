"""A run's step attributed to the four walls of the domain documents (seeds: "Three Walls": memory,
communication, compute and host overhead; "Phase 3: Profile The Dominant Bottleneck").

  memory         the peak against the rank's capacity (platform memory_budget_gb, else gpu.memory_gb), the
                 recompute and offloading in use and what dropping them would add (the memory model's
                 activations, compiler/estimate/memory.py); its time is the recomputed forward passes
  communication  exposed all-to-all and collectives: time in communication no compute hides
  host overhead  gaps between operators/kernels, CPU-bound steps
  compute        the rest, with the achieved model FLOP/s against the datasheet peak when there is one

With a profiler trace (runtime --profile) communication, compute and host are measured (trace.py); without
one they are the calibrated step-time model's items scaled to the measured step.  Memory is dominant when
the run fits only with the recompute or offloading it uses, or its peak is within 10 % of the capacity
(the documents' "fits only with aggressive full recompute or OOMs": fit first); otherwise the wall with
the most time.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from moeforge.compiler.estimate import memory, steptime
from moeforge.compiler.estimate.calibration import Calibration
from moeforge.compiler.knobs.layout import Layout

WALLS = ("memory", "communication", "host overhead", "compute")
NEAR_CAPACITY = 0.9
COMM_ITEMS = ("tp_comm", "cp_comm", "ep_a2a", "pp_p2p", "dp_reduce")
HOST_ITEMS = ("host", "overhead")


@dataclass
class Walls:
    seconds: dict                 # wall -> seconds of the measured step
    numbers: dict                 # wall -> lines of the numbers behind it
    dominant: str
    why: str
    step_s: float
    source: str                   # "profiler trace ..." or "step-time model ..."
    memory_bound: bool = False
    extra: dict = field(default_factory=dict)


def capacity_bytes(plan: dict) -> int | None:
    """Bytes a rank may use: the platform's memory budget, else the GPU's memory; None when neither is stated."""
    plat = plan.get("platform") or {}
    gb = plat.get("memory_budget_gb") or (plat.get("gpu") or {}).get("memory_gb")
    return int(gb * memory.GIB) if gb else None


def _without_recompute(plan: dict) -> dict:
    p = copy.deepcopy(plan)
    tc = p["transformer_config"]
    tc.update(recompute_granularity=None, recompute_method=None, recompute_num_layers=None, recompute_modules=None,
              fine_grained_activation_offloading=False, offload_modules=None)
    return p


def memory_facts(plan: dict, peak: int | None, cal: Calibration | None) -> tuple[bool, list[str], float]:
    """(memory-bound, the numbers, the recomputed share of the executed compute FLOPs)."""
    tc = plan["transformer_config"]
    lay = Layout.from_plan(plan["layout"])
    recompute = tc.get("recompute_granularity")
    offload = bool(tc.get("fine_grained_activation_offloading"))
    cap = capacity_bytes(plan)
    est, _ = memory.peak(plan, lay, calibration=cal)
    lines = [f"recompute {recompute or 'none'}"
             + (f" ({', '.join(tc.get('recompute_modules') or [])})" if recompute == "selective" else "")
             + f", offloading {'on' if offload else 'off'}"]
    added = 0
    if recompute or offload:
        bare, _ = memory.peak(_without_recompute(plan), lay, calibration=cal)
        added = bare.activations - est.activations
        lines.append(f"without them the activations grow by {added / memory.GIB:.3f} GiB (memory model)")
    if peak:
        lines.append(f"measured peak {peak / memory.GIB:.3f} GiB per rank")
    if cap:
        lines.append(f"capacity {cap / memory.GIB:.3g} GiB per rank (platform "
                     f"{'memory_budget_gb' if plan['platform'].get('memory_budget_gb') else 'gpu.memory_gb'})")
    bound = False
    if cap and peak:
        share = peak / cap
        lines.append(f"peak / capacity {share:.2f}")
        if share >= NEAR_CAPACITY:
            bound = True
        if (recompute or offload) and peak + added > cap:
            lines.append(f"without them the peak would be {(peak + added) / memory.GIB:.3f} GiB > capacity: "
                         "the run fits only with them")
            bound = True
    f = steptime.stage_facts(plan, lay)["stage"]["flops"]
    recomputed = (f["recompute"] + f["recompute_experts"]) / max(sum(f.values()), 1e-30)
    return bound, lines, recomputed


def attribute(report: dict, plan: dict, step_s: float, cal: Calibration | None, split=None) -> Walls:
    """Split the measured step over the walls, from the trace when there is one, else from the step-time estimate."""
    peak = report.get("peak_memory_bytes_max") or report.get("peak_memory_bytes_rank0")
    bound, mem_lines, recomputed = memory_facts(plan, peak, cal)
    numbers = {"memory": mem_lines}
    try:
        est = steptime.estimate(plan, calibration=cal)
    except steptime.PerformanceError:
        est = None
    if split is not None:
        scale = step_s / split.step_s if split.step_s else 1.0
        comm, host, compute = split.communication_s * scale, split.host_s * scale, split.compute_s * scale
        source = (f"profiler trace {split.path} ({split.steps} step(s), {split.device} "
                  f"{'kernels' if split.device == 'gpu' else 'operators'}), scaled to the measured step")
        numbers["communication"] = [f"exposed communication {split.communication_s * 1e3:.1f} ms of a "
                                    f"{split.step_s * 1e3:.1f} ms profiled step"]
        numbers["host overhead"] = [f"gaps between {'kernels' if split.device == 'gpu' else 'operators'} "
                                    f"{split.host_s * 1e3:.1f} ms"]
        numbers["compute"] = [f"{'kernels' if split.device == 'gpu' else 'operators'} outside communication "
                              f"{split.compute_s * 1e3:.1f} ms"]
    elif est is not None:
        scale = step_s / est.total_s
        comm = sum(est.items[k] for k in COMM_ITEMS) * scale
        host = sum(est.items[k] for k in HOST_ITEMS) * scale
        compute = (est.items["compute"] + est.items["optimizer"] + est.items["pp_bubble"]) * scale
        source = (f"step-time model ({'calibration ' + cal.source if cal else 'fixed constants'}): "
                  f"{est.total_s * 1e3:.1f} ms estimated, items scaled to the measured step")
        numbers["communication"] = [f"{_label(k)} {est.items[k] * scale * 1e3:.1f} ms exposed"
                                    + (f" ({est.hidden[k] * scale * 1e3:.1f} ms hidden)" if est.hidden.get(k) else "")
                                    for k in COMM_ITEMS if est.items[k] or est.hidden.get(k)] or ["none"]
        numbers["host overhead"] = [f"{k} {est.items[k] * scale * 1e3:.1f} ms" for k in HOST_ITEMS]
        numbers["compute"] = [f"compute {est.items['compute'] * scale * 1e3:.1f} ms, optimizer "
                              f"{est.items['optimizer'] * scale * 1e3:.1f} ms, pipeline bubble "
                              f"{est.items['pp_bubble'] * scale * 1e3:.1f} ms"]
    else:
        raise steptime.PerformanceError(
            f"platform {plan['platform']['name']!r} has no step-time model and the run has no profiler trace: "
            "run it with --profile STEPS, or calibrate the platform (moeforge calibrate)")
    recompute_s = compute * recomputed
    seconds = {"memory": recompute_s, "communication": comm, "host overhead": host, "compute": compute - recompute_s}
    numbers["memory"].insert(0, f"recomputed forward passes {recompute_s * 1e3:.1f} ms "
                                f"({recomputed:.0%} of the executed compute FLOPs)")
    if est is not None:
        achieved = est.model_flops / step_s
        numbers["compute"].append(f"achieved {achieved / 1e12:.3g} TFLOP/s per rank, "
                                  f"{achieved / est.peak_flops:.1%} of the {est.peak_flops / 1e12:g} TFLOP/s peak")
    if bound:
        dominant, why = "memory", "the run fits its memory only with what it recomputes or offloads, or runs near capacity"
    else:
        dominant = max(("communication", "host overhead", "compute"), key=lambda w: seconds[w])
        why = f"{seconds[dominant] / step_s:.0%} of the step"
    return Walls(seconds, numbers, dominant, why, step_s, source, bound)


def _label(key: str) -> str:
    return steptime.DOMINANT_NAMES[key]
