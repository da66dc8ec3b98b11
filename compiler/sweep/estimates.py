"""The planner's estimate of one compiled point (what `moeforge plan-layout --evaluate RECIPE` prints):
peak memory per rank (compiler/estimate/memory.py), step time, tokens/s/GPU and model TFLOP/s/GPU
(steptime.py, Megatron-LM's FLOPs count), and the GPU-hours the point's runs will take. A platform
without a `performance` block (the cpu platform) has no step-time model: the estimate says so instead
of inventing one."""
from __future__ import annotations

from moeforge.compiler.estimate import calibration, flops, memory, steptime
from moeforge.compiler.knobs.layout import Layout


def of_plan(plan: dict, repeats: int = 1) -> dict:
    """The estimate as results.json records it (schemas/results.v1.json, `estimate`), with the calibration beside
    the platform when there is one (compiler/estimate/calibration.py), which ``calibration`` names."""
    lay = Layout.from_plan(plan["layout"])
    cal = calibration.for_platform(plan["platform"]["name"])
    mem, pp_rank = memory.peak(plan, lay, calibration=cal)
    gpu = plan["platform"].get("gpu") or {}
    capacity = memory.capacity_bytes(plan) if gpu.get("memory_gb") else None
    out = {"peak_memory_bytes": mem.total, "allocated_bytes": mem.allocated, "pp_rank": pp_rank,
           "capacity_bytes": capacity, "fits": None if capacity is None else mem.total <= capacity,
           "step_time_s": None, "tokens_per_s_per_gpu": None, "model_tflops_per_s_per_gpu": None,
           "gpu_hours": None, "dominant": None, "missing": None, "calibration": calibration.note(cal)}
    try:
        t = steptime.estimate(plan, lay, calibration=cal)
    except steptime.PerformanceError as exc:
        out["missing"] = f"no step-time estimate: {exc}"
        return out
    iters = plan["training"]["train_iters"]
    out.update(step_time_s=t.total_s, tokens_per_s_per_gpu=t.tokens_per_s_per_gpu,
               model_tflops_per_s_per_gpu=t.tflops_per_gpu, dominant=t.dominant,
               gpu_hours=t.total_s * iters * lay.world_size * repeats / 3600)
    return out


def model_flops_per_step(plan: dict) -> float:
    """Training FLOPs of one optimizer step over all ranks, as Megatron-LM counts them (flops.py)."""
    tc, tr = plan["transformer_config"], plan["training"]
    per_token = sum(flops.model_flops_per_token(tc, plan["model"], tr["seq_length"]).values())
    return per_token * tr["global_batch_size"] * tr["seq_length"]
