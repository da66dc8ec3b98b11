"""`moeforge dryrun`'s report: the runtime's real shard, with the compiler's memory estimate beside it.

Why here: moeforge.runtime.dryrun builds one rank's shard on the meta device, so its parameter counts are
megatron-core's own; the memory a step needs on that rank is an estimate, and moeforge has one
memory model (compiler/estimate/memory.py, docs/memory-model.md), the one plan-layout ranks with.
The runtime never imports the compiler, so the estimate joins the report here: per rank, for the
plan as written, on the rank's pipeline stage, with `parameters_match` saying whether the
estimate's count of that stage equals what megatron-core built.
"""
from __future__ import annotations

from moeforge.compiler.bounded import LIMITS, Unreadable, read_json
from moeforge.compiler.estimate import calibration, memory
from moeforge.compiler.knobs.layout import Layout


def estimate_for(result: dict, plan: dict, choice: str | None = None) -> dict:
    """The memory estimate of one dry-run rank result, in bytes with formulas."""
    lay = Layout.from_plan(plan["layout"])
    # the layer spec the dry run built: --local-spec maps Transformer Engine's onto megatron-core's local one
    local = any(s["field"] == "runtime.transformer_impl" and s["used"] == "local"
                for s in result.get("substitutions") or ())
    cal = calibration.for_platform(plan["platform"]["name"], choice)
    est = memory.estimate(plan, lay, result["coordinates"]["pp"], te=False if local else None, calibration=cal)
    out = {"weights_bytes": est.weights, "gradients_bytes": est.gradients, "optimizer_bytes": est.optimizer,
           "activation_bytes": est.activations, "allowance_bytes": est.allowance, "total_bytes": est.total,
           "total_gib": round(est.total / memory.GIB, 3), "formulas": dict(est.formulas),
           "parameters_match": est.parameters["total"] == result["parameters"]["total"],
           "source": "compiler/estimate/memory.py (docs/memory-model.md)",
           "calibration": calibration.record(cal), "calibration_note": calibration.note(cal)}
    return out


def with_estimates(report: dict, choice: str | None = None) -> dict:
    """The runtime's JSON (one rank, {"ranks": [...]}, or {"plans": [...]}) with memory_estimate added to
    every rank result; failed plans are left as they are."""
    if "plans" in report:
        return {**report, "plans": [with_estimates(p, choice) for p in report["plans"]]}
    if "error" in report:
        return report
    try:
        plan = read_json(report["plan"], LIMITS["plan"])  # the runtime read it: an Unreadable is a file changed since
    except Unreadable:
        return report
    if "ranks" in report:
        return {**report, "ranks": [{**r, "memory_estimate": estimate_for(r, plan, choice)} for r in report["ranks"]]}
    return {**report, "memory_estimate": estimate_for(report, plan, choice)}
