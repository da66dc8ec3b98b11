"""The domain documents' primary fixes for a wall, as recipe changes the compiler has verified.

seeds "Phase 3: Profile The Dominant Bottleneck" lists them per wall:
  memory         selective recompute, FP8, offloading, better PP layout
  communication  DeepEP or HybridEP, EP overlap, DP/TP overlap, better PP layout
  host overhead  CUDA graphs, --manual-gc, higher MBS, CPU affinity tuning
  compute        grouped GEMM, fusion work, FP8, dispatcher-specific kernel tuning

Each becomes the `--set` values that make it on the run's recipe (the run's own --set values kept), is
compiled through the same pipeline as `moeforge check` (the rules are the only judge), and the ones that
compile are priced by the calibrated planner (step time when the platform has a model, peak memory per
rank against the capacity).  Those the rules refuse are named with the rule.  Fixes that are not recipe
settings (--manual-gc, CPU affinity) are listed as such.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeforge.compiler import driver
from moeforge.compiler.diagnose.walls import capacity_bytes
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.estimate import memory, steptime
from moeforge.compiler.estimate.calibration import Calibration
from moeforge.compiler.knobs.layout import batch_remainder


@dataclass
class Fix:
    what: str
    sets: list
    compiled: bool = False
    refused: str | None = None
    step_s: float | None = None
    peak_gib: float | None = None
    fits: bool | None = None
    notes: list = field(default_factory=list)


NOT_RECIPE = {"host overhead": ["--manual-gc (a Megatron-LM flag, not a recipe setting: moeforge.runtime.megatron takes it "
                                "after --)", "CPU affinity tuning (numactl/taskset in the launcher, not a recipe setting)"]}


def _pp_layout(plan: dict) -> list[str] | None:
    lay, tc = plan["layout"], plan["transformer_config"]
    world, pp = lay["world_size"], lay["pp"]
    target = pp * 2
    if world % target or tc["num_layers"] % target:
        return None
    ep = lay["ep"]
    while ep > 1 and (world // target) % (ep * lay["etp"]):
        ep //= 2
    sets = [f"parallelism.pp={target}"]
    if ep != lay["ep"]:
        sets.append(f"parallelism.ep={ep}")
    if tc.get("overlap_moe_expert_parallel_comm"):
        sets.append("parallelism.vpp=2")
    return sets


def candidates(wall: str, plan: dict) -> list[tuple[str, list[str]]]:
    """The domain documents' fixes for a wall, as (label, --set values), only those that apply to this plan."""
    tc, lay, tr = plan["transformer_config"], plan["layout"], plan["training"]
    out: list[tuple[str, list[str]]] = []
    fp8 = ("FP8", ["precision.fp8=e4m3", "precision.fp8_recipe=" +
                   ("mxfp8" if ((plan["platform"].get("gpu") or {}).get("arch") == "blackwell") else "blockwise")])
    pp = _pp_layout(plan)
    if wall == "memory":
        if tc.get("recompute_granularity") != "selective":
            out.append(("selective recompute", ["recompute.granularity=selective", "recompute.modules=[layernorm,moe_act]",
                                                "recompute.method=null", "recompute.num_layers=null"]))
        out.append(fp8)
        if not tc.get("fine_grained_activation_offloading"):
            out.append(("activation offloading", ["recompute.offload.enabled=true",
                                                  "recompute.offload.modules=[expert_fc1,moe_act]"]))
        if pp:
            out.append(("better PP layout", pp))
    elif wall == "communication":
        if lay["ep"] > 1:
            for backend in ("deepep", "hybridep"):
                if not (tc.get("moe_token_dispatcher_type") == "flex" and tc.get("moe_flex_dispatcher_backend") == backend):
                    out.append((f"flex dispatcher with {'DeepEP' if backend == 'deepep' else 'HybridEP'}",
                                ["moe.dispatcher=flex", f"moe.flex_backend={backend}"]))
            if not tc.get("overlap_moe_expert_parallel_comm"):
                sets = ["moe.overlap.ep_comm=true"]
                if tr["num_microbatches"] < 2:  # combined 1F1B hides nothing with one micro-batch
                    sets.append(f"training.global_batch_size={tr['global_batch_size'] * 2}")
                out.append(("EP overlap", sets))
        if lay["dp"] > 1 and not (plan.get("ddp_config") or {}).get("overlap_grad_reduce"):
            out.append(("DP overlap", ["overlap.grad_reduce=true"]))
        if lay["tp"] > 1 and not tc.get("tp_comm_overlap"):
            out.append(("TP overlap", ["overlap.tp_comm=true"]))
        if pp:
            out.append(("better PP layout", pp))
    elif wall == "host overhead":
        if tc.get("cuda_graph_impl") in (None, "none"):
            out.append(("CUDA graphs (attn, moe_router, moe_preprocess)",
                        ["cuda_graph.impl=transformer_engine", "cuda_graph.modules=[attn,moe_router,moe_preprocess]"]))
        mbs = tr["micro_batch_size"] * 2
        if batch_remainder(tr["global_batch_size"], mbs, lay["dp"]) == 0:
            out.append(("higher MBS", [f"training.micro_batch_size={mbs}"]))
    elif wall == "compute":
        if tc.get("num_moe_experts") and not tc.get("moe_grouped_gemm"):
            out.append(("grouped GEMM", ["moe.grouped_gemm=true"]))
        if tc.get("num_moe_experts") and not tc.get("moe_permute_fusion"):
            out.append(("fused permutation", ["moe.permute_fusion=true"]))
        out.append(fp8)
        if tc.get("moe_token_dispatcher_type") == "flex":
            out.append(("dispatcher kernel tuning (SMs for the flex dispatcher)", ["moe.flex_num_sms=24"]))
    return out


def verify(wall: str, plan: dict, recipe: str, overrides: list[str], cal: Calibration | None,
           measured_peak: int | None = None) -> list[Fix]:
    """Every candidate compiled on the run's recipe (with its own overrides) and priced.  With a measured peak
    (all the memory a rank held), a fix's peak is the measured one moved by the memory model's difference, so
    a term the model lacks on this machine (a CPU process's own memory) cancels."""
    cap = capacity_bytes(plan)
    base = memory.peak(plan, calibration=cal)[0].total
    try:
        now = steptime.estimate(plan, calibration=cal).total_s
    except steptime.PerformanceError:
        now = None
    out = []
    for what, sets in candidates(wall, plan):
        fix = Fix(what, sets)
        try:
            fixed = driver.compile(recipe, [*overrides, *sets], explain_errors=False).plan
        except CompileError as exc:
            first = next((d for d in exc.diagnostics if d.is_error), None)
            fix.refused = f"{first.code}: {first.message}" if first else "refused"
            out.append(fix)
            continue
        fix.compiled = True
        mem, _ = memory.peak(fixed, calibration=cal)
        peak = mem.total if measured_peak is None else measured_peak + mem.total - base
        fix.peak_gib = peak / memory.GIB
        fix.fits = None if cap is None else peak <= cap
        try:
            fix.step_s = steptime.estimate(fixed, calibration=cal).total_s
            if now is not None and abs(fix.step_s - now) <= 1e-9 * now:
                fix.notes.append("the step-time model does not price this change (docs/layout-model.md, section 8)")
        except steptime.PerformanceError:
            fix.notes.append("no step-time model for the platform (calibrate it)")
        out.append(fix)
    for text in NOT_RECIPE.get(wall, []):
        out.append(Fix(text, [], notes=["not a recipe change"]))
    return out
