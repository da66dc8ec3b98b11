"""Step time of one optimizer step: compute, exposed communication, pipeline bubble, optimizer.

The model (docs/layout-model.md writes it out with every assumption):

  compute     executed FLOPs of the busiest pipeline stage (flops.py, plus recomputed forward
              passes) / (platform peak x achievable fraction); expert GEMMs slower by their
              roofline, the output layer at its own fraction of peak (steptime_terms.py); the
              element-wise kernels' passes over the activations at HBM bandwidth (zero unless a
              calibration sets them); the busiest stage is the one these prices make slowest
              (compute_weight)
  tp/cp/ep    bytes per GPU over the group's link (comm.py); what an overlap hides is subtracted
  pp_bubble   (p-1)/(v*m) x the stage's per-step busy time (Narayanan et al. 2021, arXiv:2104.04473)
  pp_p2p      activations and their gradients between stages, unless overlapped
  dp_reduce   gradient reduce-scatter / parameter all-gather over DP and expert-DP, minus what
              overlap_grad_reduce (last micro-batch's backward) and overlap_param_gather (first
              micro-batch's forward) hide
  optimizer   the Adam update, memory-bound over the rank's optimizer shard
  overhead    costs of the EP-overlap schedule and of delayed weight gradients
  host        host overhead: a per-step and a per-layer-per-micro-batch cost (zero unless a
              calibration sets them: compiler/estimate/calibration.py)

The exposed items sum to the step time.  Pure Python over a compiled plan: no torch, no megatron.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeforge.compiler import project
from moeforge.compiler.knobs.layout import Layout, num_microbatches
from moeforge.compiler.estimate import comm
from moeforge.compiler.estimate.flops import KEYS, chunk_flops, model_flops_per_token
from moeforge.compiler.estimate.activations import heads
from moeforge.compiler.estimate.memory import DTYPE_BYTES, builds_te, fuses_mla_query_norm, layer_kinds, rank_parameters, stage_contents
from moeforge.compiler.estimate.steptime_constants import OUTPUT_LAYER_FRACTION
from moeforge.compiler.estimate.steptime_terms import assemble, elementwise_bytes, expert_gemm_efficiency
from moeforge.compiler.estimate import calibration as calib

ITEMS = ("compute", "tp_comm", "cp_comm", "ep_a2a", "pp_bubble", "pp_p2p", "dp_reduce", "optimizer", "overhead",
         "host")
DOMINANT_NAMES = {"compute": "compute", "tp_comm": "TP comm", "cp_comm": "CP comm", "ep_a2a": "EP all-to-all",
                  "pp_bubble": "PP bubble", "pp_p2p": "PP p2p", "dp_reduce": "DP reduce", "optimizer": "optimizer",
                  "overhead": "overhead", "host": "host overhead"}
PERFORMANCE_FIELDS = ("bf16_dense_tflops", "achievable_fraction", "hbm_gbps", "nvlink_gbps", "internode_gbps",
                      "collective_efficiency", "a2a_efficiency")

class PerformanceError(ValueError):
    """A platform without the fields the step-time model needs."""


def performance(plan: dict, cal: calib.Calibration | None = None) -> dict:
    """Every constant the step time reads (the platform's performance block, the calibration's values over
    it, the fixed ones elsewhere), or a one-line error naming the file that lacks a field.  ``cal``: the
    calibration to use; None: the active one for the plan's platform (calibration.using), if any."""
    platform = plan.get("platform") or {}
    perf = calib.time_constants(plan, calib.resolve(plan, cal))
    missing = [f for f in PERFORMANCE_FIELDS if perf.get(f) is None]
    if missing:
        name = platform.get("name", "?")
        raise PerformanceError(f"platform {name!r} has no performance.{missing[0]}: add a performance block "
                               f"to {_platform_file(name)} (fields: {', '.join(PERFORMANCE_FIELDS)}; "
                               f"see {project.schema_shown('platform')}), or calibrate it from measured runs "
                               "(moeforge calibrate --assume)")
    return perf


def _platform_file(name: str) -> str:
    """The platform file a user edits: the project's recipes/platforms/NAME.yaml; for a built-in platform, a
    copy of it there (the built-in catalogue is moeforge's, not the project's)."""
    if (project.recipes() / "platforms" / f"{name}.yaml").is_file():
        return f"recipes/platforms/{name}.yaml"
    return (f"a copy of builtin:recipes/platforms/{name}.yaml at recipes/platforms/{name}.yaml (a project's "
            "platform wins over the built-in one)")


@dataclass
class StepTime:
    """One optimizer step, per GPU: exposed seconds per item, what overlap hid, and the arithmetic."""

    items: dict[str, float]
    hidden: dict[str, float]
    formulas: dict[str, str]
    model_flops: float
    tokens_per_step: int
    world_size: int
    peak_flops: float
    details: dict = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        """Seconds per step: the exposed items summed (what overlap hid is already out of them)."""
        return sum(self.items.values())

    @property
    def dominant(self) -> str:
        """The display name of the largest exposed item: the cost a layout change should attack first."""
        return DOMINANT_NAMES[max(ITEMS, key=lambda k: self.items[k])]

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: this GPU's model FLOPs over what its peak could do in total_s."""
        return self.model_flops / (self.total_s * self.peak_flops)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Throughput per GPU: tokens per step over step seconds, divided across the world size."""
        return self.tokens_per_step / self.total_s / self.world_size

    @property
    def tflops_per_gpu(self) -> float:
        """What Megatron-LM logs as 'throughput per GPU (TFLOP/s/GPU)'."""
        return self.model_flops / self.total_s / 1e12

    def explain(self) -> list[str]:
        """Every item with its formula and what overlap hid, for plan-layout --explain."""
        lines = [f"step time {self.total_s:.4g} s = sum of the exposed items below; "
                 f"{self.tokens_per_step} tokens/step on {self.world_size} GPUs -> "
                 f"{self.tokens_per_s_per_gpu:.4g} tokens/s/GPU; model FLOPs {self.model_flops:.4g}/GPU "
                 f"(Megatron-LM's count) -> {self.tflops_per_gpu:.4g} TFLOP/s/GPU, MFU {self.mfu:.3f} "
                 f"of {self.peak_flops / 1e12:g} TFLOP/s; dominant: {self.dominant}"]
        for key in ITEMS:
            hidden = f" (+{self.hidden[key]:.4g} s hidden by overlap)" if self.hidden.get(key) else ""
            lines.append(f"  {key:10s} {self.items[key]:10.4g} s{hidden}  {self.formulas.get(key, '')}")
        return lines


def _recompute_extra(tc: dict, per_layer: dict, mla_layers: int) -> tuple[float, float]:
    """Forward FLOPs per token recomputed in backward (one third of a 3x training count): the
    non-expert part and the routed experts' part."""
    granularity = tc.get("recompute_granularity")
    if granularity == "full":
        return sum(per_layer[k] for k in KEYS if k not in ("logits", "mtp", "experts")) / 3, per_layer["experts"] / 3
    if granularity != "selective":
        return 0.0, 0.0
    modules = set(tc.get("recompute_modules") or ["core_attn"])
    extra = 0.0
    if "core_attn" in modules:
        extra += per_layer["core_attention"]
    if "mlp" in modules:
        extra += per_layer["dense_mlp"]
    experts = per_layer["experts"] if "moe" in modules else 0.0
    if modules & {"moe", "shared_experts"}:
        extra += per_layer["shared_expert"]
    if "mla_up_proj" in modules and tc.get("multi_latent_attention"):
        a = tc["num_attention_heads"]
        up = (tc.get("q_lora_rank") or 0) * a * (tc["qk_head_dim"] + tc["qk_pos_emb_head_dim"]) \
            + tc["kv_lora_rank"] * a * (tc["qk_head_dim"] + tc["v_head_dim"])
        extra += 6 * up * mla_layers
    return extra / 3, experts / 3  # layernorm, moe_act: element-wise, no GEMM FLOPs


def _stage(plan: dict, lay: Layout, pp_rank: int) -> dict:
    """Per-token executed FLOPs of one pipeline rank's chunks, and its layer counts."""
    tc, model, seq = plan["transformer_config"], plan["model"], plan["training"]["seq_length"]
    per = dict.fromkeys(KEYS, 0.0)
    moe_layers = attn_layers = mla_layers = layers = 0
    kinds = layer_kinds(tc)
    for chunk in stage_contents(tc, lay, pp_rank):
        for key, value in chunk_flops(tc, model["vocab_size"], seq, chunk, megatron=False).items():
            per[key] += value
        numbers = [*chunk["layers"], *[tc["num_layers"]] * chunk["mtp"]]
        layers += len(numbers)
        moe_layers += sum(kinds[n - 1][0] for n in numbers)
        attn_layers += sum(not kinds[n - 1][1] for n in numbers)
        mla_layers += len(numbers) if tc.get("multi_latent_attention") else 0
    per["recompute"], per["recompute_experts"] = _recompute_extra(tc, per, mla_layers)
    return {"flops": per, "layers": layers, "moe_layers": moe_layers, "attn_layers": attn_layers}


def compute_weight(flops: dict, perf: dict, grouped: float = 1.0, elementwise: float = 0.0) -> float:
    """Seconds x peak FLOP/s of a stage's per-token FLOPs, as the compute item prices them: the output
    layer and MTP at OUTPUT_LAYER_FRACTION of peak, the expert GEMMs at the achievable fraction x their
    roofline factor ``grouped`` (expert_gemm_efficiency), everything else at the achievable fraction; plus
    its element-wise bytes per token (``elementwise``: steptime_terms.elementwise_bytes) at hbm_gbps.  What
    picks the busiest stage, and what the planner balances pipeline stages by: a stage of many FLOPs in
    the output layer can take less time than one of fewer FLOPs in decoder layers."""
    output = flops.get("logits", 0.0) + flops.get("mtp", 0.0)
    experts = flops.get("experts", 0.0) + flops.get("recompute_experts", 0.0)
    rest = sum(flops.values()) - output - experts
    memory = elementwise * perf["bf16_dense_tflops"] * 1e12 / (perf["hbm_gbps"] * 1e9) if elementwise else 0.0
    return (rest + experts / grouped) / perf["achievable_fraction"] + output / OUTPUT_LAYER_FRACTION + memory


def stages(plan: dict, lay: Layout) -> list[dict]:
    """Every pipeline rank's per-token FLOPs and layer counts (what stage_facts picks the busiest of)."""
    return [_stage(plan, lay, r) for r in range(lay.pp)]


def _busiest_stage(plan: dict, lay: Layout, ranks: list[dict]) -> tuple[int, dict]:
    """The pipeline rank that takes longest at the compute item's prices.  One stage needs no prices; a
    platform without a step-time model (cpu, uncalibrated) falls back to the rank of the most FLOPs, which
    is what the memory and recompute facts of such a plan need."""
    if len(ranks) == 1:
        return 0, ranks[0]
    try:
        perf = performance(plan)
    except PerformanceError:
        return max(enumerate(ranks), key=lambda s: sum(s[1]["flops"].values()))
    grouped = expert_gemm_efficiency({"plan": plan, "lay": lay, "perf": perf})
    return max(enumerate(ranks), key=lambda s: compute_weight(s[1]["flops"], perf, grouped,
                                                              elementwise_bytes(plan, perf, s[1]["layers"])))


def stage_facts(plan: dict, lay: Layout, ranks: list[dict] | None = None) -> dict:
    """What the step time needs from the model, the layout and the micro-batch size alone: the busiest
    pipeline rank, its FLOPs and layer counts, its parameters, the model's FLOPs per token.  A candidate's
    dispatcher and overlap settings do not change them, so the planner computes them once for all of those
    variants (``ranks``: stages(plan, lay), which the micro-batch size does not change either)."""
    tc, model = plan["transformer_config"], plan["model"]
    pp_rank, stage = _busiest_stage(plan, lay, ranks if ranks is not None else stages(plan, lay))
    counts = rank_parameters(tc, model, lay, pp_rank, builds_te(plan), fuses_mla_query_norm(plan))
    return {"pp_rank": pp_rank, "stage": stage, "counts": counts,
            "flops_per_token": sum(model_flops_per_token(tc, model, plan["training"]["seq_length"]).values())}


def estimate(plan: dict, lay: Layout | None = None, facts: dict | None = None,
             calibration: calib.Calibration | None = None) -> StepTime:
    """The step time of a compiled plan (its layout unless ``lay`` is given; ``facts``: its
    stage_facts, when already known; ``calibration``: constants fitted to measured runs, else the
    active one for the platform, else the fixed constants)."""
    perf = performance(plan, calibration)
    lay = lay or Layout.from_plan(plan["layout"])
    tc, tr = plan["transformer_config"], plan["training"]
    seq, mbs, gbs = tr["seq_length"], tr["micro_batch_size"], tr["global_batch_size"]
    tokens = gbs * seq
    peak = perf["bf16_dense_tflops"] * 1e12
    facts = facts or stage_facts(plan, lay)
    pp_rank, stage, counts = facts["pp_rank"], facts["stage"], facts["counts"]
    model_flops = facts["flops_per_token"] * tokens / lay.world_size
    links = comm.Links(perf["nvlink_gbps"], perf["internode_gbps"], plan["platform"].get("nvlink_domain", 1),
                       perf["collective_efficiency"], perf["a2a_efficiency"])
    ctx = {"plan": plan, "lay": lay, "perf": perf, "links": links, "stage": stage, "counts": counts,
           "microbatches": max(1, num_microbatches(gbs, mbs, lay.dp)), "tokens": tokens, "peak": peak,
           "rate": peak * perf["achievable_fraction"], "heads": heads(tc),
           "grad_bytes": 4 if (plan.get("ddp_config") or {}).get("grad_reduce_in_fp32") else
           DTYPE_BYTES.get(tc.get("params_dtype") or "bfloat16", 2)}
    items, hidden, formulas, details = assemble(ctx)
    details["pp_rank"] = pp_rank
    return StepTime({k: items.get(k, 0.0) for k in ITEMS}, {k: hidden.get(k, 0.0) for k in ITEMS}, formulas,
                    model_flops, tokens, lay.world_size, peak, details)
