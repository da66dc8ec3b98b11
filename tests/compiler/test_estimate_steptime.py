"""compiler/estimate/steptime.py: the step-time model against measured runs, and its pieces.

The calibration set is every measured step time in the seeds (docs/layout-model.md lists the
readings): each point is compiled from the catalogue, estimated, and must land within 25 % of the
measurement (but the Qwen3-Next pair, whose GBS the seed does not state: UNDETERMINED); every
EP-overlap pair must move in the measured direction.  test_estimate_measured.py adds Megatron-Bridge's
published throughput of tuned runs.  ``pytest -s`` prints the
table.  The FLOPs count is checked against Megatron-LM's own num_floating_point_operations,
recorded for every catalogue recipe in tests/data/megatron_flops.json (gen_megatron_flops.py).
"""
from __future__ import annotations

import copy
import itertools
import math
import random
import json
from functools import lru_cache
from pathlib import Path

import pytest

from moeforge.compiler import driver as pipeline
from moeforge.compiler.targets import plan as planmod
from moeforge.compiler.estimate import comm, flops, steptime, steptime_constants
from moeforge.compiler.knobs.layout import Layout, LayoutError

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
MEGATRON = json.loads((ROOT / "tests" / "data" / "megatron_flops.json").read_text())["recipes"]
TOLERANCE = 0.25  # the bound on |estimate / measured - 1|

EP16 = "qwen3-30b-a3b/h100-bf16-ep16-alltoall"
# Seeds 000 (lines ~270-300): EP16 runs, iterations 3-8 steady window; 003 (~126): smoke run.
# Seeds 004 (~70-145): Qwen3-30B-A3B EP4 alltoall on 2 H100 nodes, GBS 8 and 64, and
# Qwen3-Next-80B-A3B EP8 alltoall on 8 nodes.  What the seeds leave open is read as below.
# EP4: GBS 8 needs dp <= 8 and "no speedup at GBS 8" is one micro-batch per rank: 8 ranks, split
# over 2 nodes of 4 (_two_nodes_of_four).  Doubt: the memory model puts it over 80 GB (docs).
EP4 = ["parallelism.ep=4", "resources.nodes=1"]
# Qwen3-Next: Megatron-Bridge's H100 recipe layout (TP1 PP4 EP8) on 8 nodes; EP overlap needs VPP
# when PP > 1 and forbids recomputing "moe" (megatron-core 0.17+); GBS not given: 256.  The seed
# states neither the GBS nor the pipeline layout, and the step time is proportional to the GBS: any
# absolute reading is a choice (an earlier one, GBS 256, was made with the model in hand, which made
# "within 25 %" a fit, not a check).  Its absolute time is printed, not asserted; its direction is.
UNDETERMINED = {"next EP overlap", "next overlap + delayed wgrad"}
NEXT = ["resources.nodes=8", "parallelism.ep=8", "parallelism.pp=4", "parallelism.vpp=2", "moe.overlap.ep_comm=true",
        "recompute.modules=[layernorm,moe_act]", "training.global_batch_size=256"]
CASES = {  # name: (recipe, overrides, 8 ranks as 2 nodes x 4, measured seconds per step)
    "ep16 no overlap": (EP16, [], False, 41.25),
    "ep16 EP overlap": (EP16 + "-overlap", [], False, 31.31),
    "ep16 overlap + delayed wgrad": (EP16 + "-overlap", ["moe.overlap.delay_wgrad=true"], False, 31.20),
    "ep16 smoke run (no overlap)": (EP16, [], False, 45.65),
    "ep4 GBS 8 no overlap": (EP16, EP4 + ["training.global_batch_size=8"], True, 0.822),
    "ep4 GBS 8 EP overlap": (EP16 + "-overlap", EP4 + ["training.global_batch_size=8"], True, 0.827),
    "ep4 GBS 64 no overlap": (EP16, EP4 + ["training.global_batch_size=64"], True, 4.889),
    "ep4 GBS 64 EP overlap": (EP16 + "-overlap", EP4 + ["training.global_batch_size=64"], True, 5.538),
    "next EP overlap": ("qwen3-next-80b-a3b/h100-bf16", NEXT, False, 4.686),
    "next overlap + delayed wgrad": ("qwen3-next-80b-a3b/h100-bf16", NEXT + ["moe.overlap.delay_wgrad=true"], False,
                                     4.912),
}
# (baseline, variant, measured direction of the variant: +1 slower, -1 faster, 0 within noise)
PAIRS = [("ep16 no overlap", "ep16 EP overlap", -1), ("ep4 GBS 64 no overlap", "ep4 GBS 64 EP overlap", +1),
         ("ep4 GBS 8 no overlap", "ep4 GBS 8 EP overlap", 0), ("next EP overlap", "next overlap + delayed wgrad", +1),
         ("ep16 EP overlap", "ep16 overlap + delayed wgrad", 0)]
NOISE = 0.02  # "flat" / "no meaningful independent win": the modelled change stays under 2 %


def _two_nodes_of_four(plan: dict) -> dict:
    """The EP4 run's 8 ranks as 2 nodes x 4 GPUs: EP4 inside a node, expert-DP across the two."""
    plan = copy.deepcopy(plan)
    plan["platform"]["nvlink_domain"] = plan["layout"]["nproc_per_node"] = 4
    plan["layout"]["nnodes"] = 2
    return plan


@lru_cache(maxsize=None)
def _case(name: str) -> tuple[steptime.StepTime, float]:
    recipe, overrides, split, measured = CASES[name]
    plan = planmod.build(pipeline.resolve(pipeline.load(recipe, overrides)))
    return steptime.estimate(_two_nodes_of_four(plan) if split else plan), measured


def test_calibration_table():
    rows = []
    for name in CASES:
        est, measured = _case(name)
        rows.append((name, measured, est.total_s, est.total_s / measured, est.dominant, est.tflops_per_gpu))
    print(f"\n{'case':34s} {'measured s':>10s} {'model s':>9s} {'ratio':>6s}  dominant        TFLOP/s/GPU")
    for name, measured, model, ratio, dominant, tflops in rows:
        note = "  (GBS not in the seed: not asserted)" if name in UNDETERMINED else ""
        print(f"{name:34s} {measured:10.3f} {model:9.3f} {ratio:6.3f}  {dominant:15s} {tflops:6.1f}{note}")
    checked = [r for r in rows if r[0] not in UNDETERMINED]
    worst = max(checked, key=lambda r: abs(r[3] - 1))
    print(f"worst: {worst[0]} at {worst[3]:.3f} (bound 1 +- {TOLERANCE})")
    assert len(checked) == 8 and all(abs(r[3] - 1) <= TOLERANCE for r in checked), \
        [r[:4] for r in checked if abs(r[3] - 1) > TOLERANCE]


@pytest.mark.parametrize("base,variant,direction", PAIRS)
def test_overlap_effects_move_the_measured_way(base, variant, direction):
    change = _case(variant)[0].total_s / _case(base)[0].total_s - 1
    measured = CASES[variant][3] / CASES[base][3] - 1
    print(f"\n{variant} vs {base}: model {change:+.3f}, measured {measured:+.3f}")
    if direction:
        assert change * direction > 0, (change, measured)
    else:
        assert abs(change) < NOISE, (change, measured)


def test_smoke_run_tflops_are_megatrons_count():
    """The smoke run logged 132.9 TFLOP/s/GPU at 45.65 s/step: Megatron-LM's FLOPs per step / 16 GPUs
    / the step time.  The model's FLOPs at the measured step time must give the same rate."""
    est, measured = _case("ep16 smoke run (no overlap)")
    assert est.model_flops / measured / 1e12 == pytest.approx(132.9, rel=0.01)
    print(f"\nsmoke run: model {est.tflops_per_gpu:.1f} TFLOP/s/GPU, logged 132.9")
    assert abs(est.tflops_per_gpu / 132.9 - 1) <= TOLERANCE


@pytest.mark.parametrize("recipe", sorted(MEGATRON))
def test_model_flops_equal_megatron_lm(recipe):
    plan = json.loads((GOLDEN / recipe / "plan.json").read_text())
    tc, tr = plan["transformer_config"], plan["training"]
    per_token = sum(flops.model_flops_per_token(tc, plan["model"], tr["seq_length"]).values())
    assert per_token == pytest.approx(MEGATRON[recipe]["flops_per_token"], rel=1e-9)


def test_flops_per_token_by_hand_qwen3_30b():
    """Qwen3-30B-A3B: h 2048, 48 layers, 32 heads x 128, 4 KV groups, top-8 of 768-wide SwiGLU
    experts, vocab 151936, seq 4096; 6 FLOPs per multiply-add trained."""
    plan = json.loads((GOLDEN / EP16 / "plan.json").read_text())
    got = flops.model_flops_per_token(plan["transformer_config"], plan["model"], 4096)
    h, layers = 2048, 48
    assert got["attention"] == 6 * layers * (h * (4096 + 2 * 512) + 4096 * h)
    assert got["core_attention"] == 6 * layers * 4096 * 4096       # causal: half of QK^T and PV, each 2 x
    assert got["experts"] == 6 * layers * h * 768 * 8 * 3
    assert got["logits"] == 6 * h * 151936
    assert got["dense_mlp"] == got["shared_expert"] == got["mtp"] == 0


def _golden(recipe: str) -> dict:
    return json.loads((GOLDEN / recipe / "plan.json").read_text())


def test_sliding_window_layers_execute_their_window():
    """gpt-oss: window (127, 0) on 1-based layers 1, 3, ..., 35 (megatron-core is_layer_window_attention:
    layer_number % window_attn_skip_freq != 0).  Executed, such a layer's core attention covers on
    average 128 - 128*127/(2*4096) keys per query instead of the causal 2048; Megatron-LM's count
    (model FLOPs, MFU) keeps the causal term on every layer."""
    tc = _golden("gpt-oss-120b/h100-bf16")["transformer_config"]
    keys = 128 - 128 * 127 / (2 * 4096)
    assert flops.window_keys(tc, 1, 4096) == pytest.approx(keys) and flops.window_keys(tc, 35, 4096) == keys
    assert flops.window_keys(tc, 2, 4096) is None and flops.window_keys(tc, 36, 4096) is None
    assert flops.window_keys({**tc, "window_attn_skip_freq": [0, 1] * 18}, 2, 4096) == keys
    assert flops.window_keys({**tc, "window_size": None}, 1, 4096) is None
    full = flops.layer_flops(tc, 1, 4096, megatron=False)["core_attention"]      # 0-based 1: layer 2, full
    windowed = flops.layer_flops(tc, 0, 4096, megatron=False)["core_attention"]  # layer 1, windowed
    assert windowed == pytest.approx(full * keys / 2048)
    assert flops.layer_flops(tc, 0, 4096)["core_attention"] == full              # Megatron-LM's count
    chunk = {"layers": list(range(1, 37)), "mtp": 0, "output": True}
    executed = flops.chunk_flops(tc, 201088, 4096, chunk, megatron=False)["core_attention"]
    assert executed == pytest.approx(18 * full + 18 * windowed)


def test_bubble_is_p_minus_1_over_v_m():
    plan = _golden("qwen3-30b-a3b/h100-bf16-x64")  # 48 layers, GBS 4096
    for pp, vpp in ((4, None), (4, 2), (8, 3)):
        lay = Layout(world_size=64, pp=pp, ep=8, vpp=vpp, gpus_per_node=8)
        est = steptime.estimate(plan, lay)
        m, v = est.details["microbatches"], vpp or 1
        busy = sum(est.items[k] for k in ("compute", "tp_comm", "cp_comm", "ep_a2a", "overhead"))
        assert est.items["pp_bubble"] == pytest.approx((pp - 1) / (v * m) * busy)
        assert m == 4096 // (64 // pp) and est.items["pp_bubble"] > 0
    assert steptime.estimate(plan, Layout(world_size=64, ep=8, gpus_per_node=8)).items["pp_bubble"] == 0


def test_adam_step_moves_the_state_it_keeps():
    """The Adam step reads and writes its state once: 34 B per parameter with FP32 state, 26 B with BF16 moments
    (the precision-aware optimizer), at the same HBM bandwidth."""
    plan = _golden("qwen3-30b-a3b/h100-bf16-x64")
    lay = Layout(world_size=64, ep=8, gpus_per_node=8)
    fp32 = steptime.estimate(plan, lay).items["optimizer"]
    low = copy.deepcopy(plan)
    low["optimizer"].update(use_precision_aware_optimizer=True, exp_avg_dtype="bfloat16", exp_avg_sq_dtype="bfloat16")
    assert steptime.estimate(low, lay).items["optimizer"] == pytest.approx(fp32 * 26 / 34)


def test_output_layer_runs_at_its_own_fraction_of_peak():
    """A larger vocabulary adds only output-layer FLOPs (6 h vocab per token, on the last stage), and
    they cost OUTPUT_LAYER_FRACTION of peak, not the decoder layers' achievable_fraction."""
    plan = _golden("gpt-oss-120b/h100-bf16")  # PP4: the last stage holds the output layer
    bigger = copy.deepcopy(plan)
    bigger["model"]["vocab_size"] += 65536
    base, more = steptime.estimate(plan), steptime.estimate(bigger)
    assert more.details["pp_rank"] == base.details["pp_rank"] == 3
    share = base.tokens_per_step * 4 / base.world_size  # tokens' worth of stage work per GPU
    extra = 6 * plan["transformer_config"]["hidden_size"] * 65536 * share
    peak = plan["platform"]["performance"]["bf16_dense_tflops"] * 1e12
    assert more.items["compute"] - base.items["compute"] == pytest.approx(
        extra / (peak * steptime_constants.OUTPUT_LAYER_FRACTION))
    assert steptime_constants.OUTPUT_LAYER_FRACTION > plan["platform"]["performance"]["achievable_fraction"]


def test_elementwise_passes_move_the_stage_activations_at_hbm_bandwidth():
    """A calibration's elementwise_passes adds passes x layers x tokens x h x 2 B / hbm_gbps to the busiest
    stage's compute (and to the weight that picks it); the fixed constants leave it at 0, so without a
    calibration nothing moves."""
    from moeforge.compiler.estimate import calibration as calib

    plan = _golden("gpt-oss-120b/h100-bf16")  # PP4
    base = steptime.estimate(plan)
    zero = steptime.estimate(plan, calibration=calib.Calibration("h100", time={"elementwise_passes": 0.0}))
    assert zero.items == base.items and zero.formulas == base.formulas
    more = steptime.estimate(plan, calibration=calib.Calibration("h100", time={"elementwise_passes": 40.0}))
    lay = Layout.from_plan(plan["layout"])
    layers = steptime.stages(plan, lay)[more.details["pp_rank"]]["layers"]
    share = base.tokens_per_step * lay.pp / base.world_size
    hbm = plan["platform"]["performance"]["hbm_gbps"] * 1e9
    added = 40 * layers * share * plan["transformer_config"]["hidden_size"] * 2 / hbm
    assert more.items["compute"] - base.items["compute"] == pytest.approx(added) and added > 0
    assert "element-wise 40 passes" in more.formulas["compute"] and "element-wise" not in base.formulas["compute"]
    perf = steptime.performance(plan, calib.Calibration("h100", time={"elementwise_passes": 40.0}))
    flops0 = steptime.stages(plan, lay)[0]["flops"]
    ridge = perf["bf16_dense_tflops"] * 1e12 / hbm
    assert steptime.compute_weight(flops0, perf, elementwise=1000.0) == pytest.approx(
        steptime.compute_weight(flops0, perf) + 1000.0 * ridge)


def test_expert_gemms_follow_their_roofline():
    """Expert GEMM [M, K] x [K, N] at intensity I = 1/(1/M + 1/K + 1/N) FLOP/B against the ridge point
    R = peak / HBM: time over compute-bound time sqrt(1 + (R/I)^2), fc1 (K = h, N = 2f, 2/3 of the
    FLOPs) and fc2 (K = f, N = h) weighted.  At 1024 tokens per expert: Qwen3-30B-A3B's 2048 x 768
    experts x0.822, gpt-oss's 2880 x 2880 x0.909; more tokens per expert, closer to 1."""
    from moeforge.compiler.estimate import steptime_terms

    def eff(recipe, m_tokens):
        plan = copy.deepcopy(_golden(recipe))
        tc = plan["transformer_config"]
        plan["training"]["micro_batch_size"], plan["training"]["seq_length"] = 1, 4096
        ep = m_tokens * tc["num_moe_experts"] // (4096 * tc["moe_router_topk"])
        lay = Layout(world_size=ep, ep=ep, gpus_per_node=8)
        ctx = {"plan": plan, "lay": lay, "perf": plan["platform"]["performance"]}
        assert steptime_terms.expert_tokens(ctx) == m_tokens
        return steptime_terms.expert_gemm_efficiency(ctx)

    ridge = 989e12 / 3350e9
    by_hand = 3 / sum(w * (1 + (ridge * (1 / 1024 + 1 / k + 1 / n)) ** 2) ** 0.5
                      for k, n, w in ((2048, 1536, 2), (768, 2048, 1)))
    assert eff(EP16, 1024) == pytest.approx(by_hand) == pytest.approx(0.822, abs=5e-4)
    assert eff("gpt-oss-120b/h100-bf16", 1024) == pytest.approx(0.909, abs=5e-4)
    assert eff(EP16, 1024) < eff(EP16, 4096) < eff(EP16, 16384) < 1


def test_stage_facts_are_shared_by_dispatcher_and_overlap_variants():
    """The planner computes stage_facts once per layout and recompute and reuses them for every
    dispatcher and overlap variant: for those the estimate must be the same as computed afresh."""
    base, _ = _case("ep16 no overlap")
    recipe, overrides, _, _ = CASES["ep16 EP overlap"]
    plan = planmod.build(pipeline.resolve(pipeline.load(recipe, overrides + ["moe.overlap.delay_wgrad=true"])))
    lay = Layout.from_plan(plan["layout"])
    facts = steptime.stage_facts(_golden(EP16), lay)
    shared, fresh = steptime.estimate(plan, lay, facts), steptime.estimate(plan, lay)
    assert shared.items == fresh.items and shared.model_flops == fresh.model_flops
    assert fresh.total_s != base.total_s   # the variant does change the step time, through the other terms


def test_ep_overlap_hides_at_most_the_compute_it_overlaps():
    """Each of a layer's four all-to-alls hides behind one compute window of the other micro-batch
    (expert backward / forward, attention backward / forward): e + a per layer and overlapped
    micro-batch in all.  On a fabric 100x slower the hidden time saturates exactly there."""
    recipe, overrides, _, _ = CASES["ep16 EP overlap"]
    plan = planmod.build(pipeline.resolve(pipeline.load(recipe, overrides)))
    est = steptime.estimate(plan)
    slow_plan = copy.deepcopy(plan)
    slow_plan["platform"]["performance"]["internode_gbps"] /= 100
    slow = steptime.estimate(slow_plan)
    d, m = slow.details, slow.details["microbatches"]
    bound = (d["expert_layer_mb_s"] + d["attn_layer_mb_s"]) * 48 * (m - 1)
    assert slow.hidden["ep_a2a"] == pytest.approx(bound)
    assert slow.items["ep_a2a"] > 10 * bound        # the rest stays exposed
    assert est.hidden["ep_a2a"] <= bound
    no_overlap, _ = _case("ep16 no overlap")
    assert no_overlap.hidden["ep_a2a"] == 0


def test_link_choice_nvlink_inside_the_domain_fabric_outside():
    links = comm.Links(nvlink_gbps=450, internode_gbps=50, nvlink_domain=8, collective_efficiency=1,
                       a2a_efficiency=1)
    gb = 1e9
    assert links.a2a_link(8, 1) == "nvlink" and links.a2a_s(4.5 * gb, 8, 1) == pytest.approx(0.01)
    assert links.a2a_link(16, 1) == "inter-node"
    # EP16 over two nodes: 8 of 15 peers are remote, their share crosses the 50 GB/s NIC
    assert links.a2a_s(15 * gb, 16, 1) == pytest.approx(8 * gb / (50 * gb))
    assert links.a2a_link(8, 2) == "inter-node"   # ETP 2 x EP 8 spans 16 ranks
    assert links.ring_s(45 * gb, 8) == pytest.approx(0.1) and links.ring_s(5 * gb, 16) == pytest.approx(0.1)
    nvl72 = comm.Links(900, 50, 72, 1, 1)
    assert nvl72.a2a_link(64, 1) == "nvlink"


def _routed_remote_domains(experts, topk, ep, local, groups, tokens=2000, seed=0):
    """megatron-core's routing with random logits (moe_router_force_load_balancing), token by token:
    group_limited_topk's group scores (sum of the top k/t scores), the top t groups, the top k experts
    among them; counted: distinct NVLink domains other than the token's own among the k."""
    rng = random.Random(seed)
    domain = [e // (experts // ep) // local for e in range(experts)]
    seen = 0
    for _ in range(tokens):
        score = [rng.random() for _ in range(experts)]
        allowed = range(experts)
        if groups:
            n, chosen = groups
            size = experts // n
            best = sorted(range(n), key=lambda g: -sum(sorted(score[g * size:(g + 1) * size])[-(topk // chosen):]))
            allowed = [e for g in best[:chosen] for e in range(g * size, (g + 1) * size)]
        picked = sorted(allowed, key=lambda e: -score[e])[:topk]
        seen += len({domain[e] for e in picked} - {rng.randrange(ep // local)})
    return seen / tokens


@pytest.mark.parametrize("experts,topk,ep,groups", [
    (256, 8, 64, (8, 4)),    # DeepSeek-V3 node-limited: EP64 over 8 nodes, one group per node
    (256, 8, 16, (8, 4)),    # four groups per node
    (256, 8, 256, (8, 4)),   # each group spread over 4 nodes
    (256, 8, 64, None),      # the same experts, free top-k
    (512, 10, 64, None),     # Qwen3-Next-80B-A3B
])
def test_remote_domains_follow_megatron_routing(experts, topk, ep, groups):
    """The hierarchical dispatch's fabric copies per token (comm.remote_domains) agree with routing
    simulated as megatron-core routes, within 6 %; node-limited routing reaches fewer domains."""
    expected = comm.remote_domains(ep / 8, topk, groups)
    assert expected == pytest.approx(_routed_remote_domains(experts, topk, ep, 8, groups), rel=0.06)
    if groups and ep // 8 == groups[0]:
        assert expected == pytest.approx(3.5) and expected < comm.remote_domains(ep / 8, topk)
    links = comm.Links(nvlink_gbps=450, internode_gbps=50, nvlink_domain=8, collective_efficiency=1,
                       a2a_efficiency=1)
    fabric = 4096 * 7168 * 2 * expected / 50e9
    assert links.hierarchical_a2a_s(4096, topk, 7168, ep, 1, groups) == pytest.approx(fabric)


def test_every_catalogue_plan_has_a_step_time():
    for path in sorted(GOLDEN.rglob("plan.json")):
        plan = json.loads(path.read_text())
        if plan["platform"]["device"] == "cpu":
            continue
        est = steptime.estimate(plan)
        assert set(est.items) == set(steptime.ITEMS) and min(est.items.values()) >= 0, path
        assert est.total_s == pytest.approx(sum(est.items.values()))
        assert 0 < est.mfu < 1 and est.tokens_per_s_per_gpu > 0, path
        assert est.dominant in steptime.DOMINANT_NAMES.values()
        assert set(est.formulas) >= set(steptime.ITEMS) - {"overhead"} | {"compute"}, path


def test_platform_without_performance_is_a_one_line_error():
    plan = _golden("tiny-moe/cpu")
    with pytest.raises(steptime.PerformanceError) as err:
        steptime.estimate(plan)
    msg = str(err.value)
    assert "\n" not in msg and "recipes/platforms/cpu.yaml" in msg and "performance.bf16_dense_tflops" in msg


@pytest.mark.parametrize("pp", [1, 2])
def test_stage_facts_need_no_step_time_model(pp):
    """The busiest stage is priced by time where the platform has a step-time model; without one (cpu) the
    memory and recompute facts still come: one stage is the busiest, and of several the most FLOPs wins."""
    plan = planmod.build(pipeline.resolve(pipeline.load("tiny-moe/cpu", [f"parallelism.pp={pp}", f"parallelism.ep={2 // pp}", "moe.overlap.ep_comm=false"])))
    lay = Layout.from_plan(plan["layout"])
    ranks = steptime.stages(plan, lay)
    facts = steptime.stage_facts(plan, lay, ranks)
    assert facts["pp_rank"] == max(range(pp), key=lambda r: sum(ranks[r]["flops"].values()))


def test_explain_shows_every_item_and_the_numbers_add_up():
    est, _ = _case("ep16 overlap + delayed wgrad")
    lines = est.explain()
    assert len(lines) == 1 + len(steptime.ITEMS)
    assert f"{est.total_s:.4g} s" in lines[0] and f"MFU {est.mfu:.3f}" in lines[0]
    for key, line in zip(steptime.ITEMS, lines[1:]):
        assert line.split()[0] == key and f"{est.items[key]:.4g} s" in line
    assert "hidden by overlap" in lines[1 + steptime.ITEMS.index("ep_a2a")]
    assert est.details["delay_wgrad_launch_s"] == pytest.approx(
        steptime_constants.DWG_LAUNCH_S * (128 // 16) * 48 * 64)


@pytest.mark.parametrize("recipe", ["deepseek-v3/h100-bf16", "gpt-oss-120b/b200-bf16",
                                    "qwen3-235b-a22b/gb200-nvl72-bf16", "qwen3-30b-a3b/h100-bf16",
                                    "qwen3-next-80b-a3b/h100-bf16"])
def test_layouts_the_planner_may_try_all_get_finite_times(recipe):
    """MLA, Gated DeltaNet, MTP, shared experts, NVL72: every folding of TP, CP, PP (with and
    without VPP) and EP the model allows gives non-negative, finite items and an MFU below 1."""
    plan = _golden(recipe)
    tc = {k: v for k, v in plan["transformer_config"].items() if k not in (
        "pipeline_model_parallel_layout", "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")}
    plan = {**plan, "transformer_config": tc}
    world, tried = plan["layout"]["world_size"], 0
    for tp, cp, pp, ep, vpp in itertools.product([1, 2, 4], [1, 2], [1, 2, 4], [1, 8, 16], [None, 2]):
        try:
            lay = Layout(world_size=world, tp=tp, cp=cp, pp=pp, ep=ep, vpp=vpp if pp > 1 else None,
                         gpus_per_node=plan["layout"]["nproc_per_node"], num_layers=tc["num_layers"])
        except LayoutError:
            continue
        if tc["num_moe_experts"] % ep:
            continue
        est = steptime.estimate(plan, lay)
        assert all(math.isfinite(v) and v >= 0 for v in est.items.values()), (lay, est.items)
        assert 0 < est.mfu < 1, lay
        tried += 1
    assert tried >= 20


def test_the_busiest_stage_is_the_slowest_one_not_the_one_of_most_flops():
    """The compute item prices the output layer and MTP at their own fraction of peak, far above the decoder
    layers': DeepSeek-V3 on Megatron-Bridge's PP16 layout 'Et*4|(t*4|)*14tmL' has most FLOPs on its last rank
    (a decoder layer, MTP, two output layers) and most time on the ranks of four MoE layers.  The busiest stage
    was picked by FLOPs: the estimate priced the last rank (33.0 s per step, two MoE layers' all-to-all) and the
    planner balanced stages by a number the model did not charge."""
    plan = planmod.build(pipeline.resolve(pipeline.load("deepseek-v3/b200-bf16")))
    lay = Layout.from_plan(plan["layout"])
    perf = steptime.performance(plan)
    ranks = steptime.stages(plan, lay)
    by_flops = max(range(lay.pp), key=lambda r: sum(ranks[r]["flops"].values()))
    assert by_flops == lay.pp - 1 and ranks[by_flops]["layers"] == 2          # t and m beside the loss
    facts = steptime.stage_facts(plan, lay, ranks)
    assert facts["stage"]["moe_layers"] == 4 and facts["pp_rank"] != by_flops
    weight = [steptime.compute_weight(r["flops"], perf) for r in ranks]
    assert weight[facts["pp_rank"]] == max(weight) > weight[by_flops]
    est = steptime.estimate(plan, lay, facts)
    assert est.items == steptime.estimate(plan, lay).items and est.total_s > 40
