"""compiler/estimate/memory.py against megatron-core's own parameter counts.

tests/data/layout_param_counts.json holds, for every catalogue recipe, what ``python -m
moeforge.runtime.dryrun PLAN --rank 0,[middle,]-1 --local-spec`` counted on the meta device (megatron-core
0.19.2 for the GPU platforms, 0.16 for the CPU one); tests/data/gen_layout_param_counts.py
regenerates it.  The analytic count, from the golden plan.json alone (no torch), must equal it
exactly, for every rank recorded: total, dense, expert and embedding, the decoder layers the
stage owns and its MTP layers. Its "variants" are pipeline splits (stage sizes, accounting) and model fields
(learned positions, MLA without qk_layernorm, Gated DeltaNet with LayerNorm) no catalogue recipe uses,
compiled here with the recorded --set overrides and compared at every stage.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeforge.compiler.commands.check import recipe_ids
from moeforge.compiler.cli import main
from moeforge.compiler.estimate import activations as A
from moeforge.compiler.estimate import memory as M
from moeforge.compiler.knobs.layout import Layout

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((ROOT / "tests" / "data" / "layout_param_counts.json").read_text())
FIXTURE, VARIANTS = RECORDED["recipes"], RECORDED.get("variants", {})
GOLDEN = ROOT / "tests" / "golden"


def _plan(recipe: str) -> dict:
    return json.loads((GOLDEN / recipe / "plan.json").read_text())


def test_fixture_covers_the_catalogue():
    golden = {str(p.parent.relative_to(GOLDEN)) for p in GOLDEN.rglob("plan.json")}
    assert golden == set(FIXTURE)


def _assert_counts_equal(name: str, plan: dict, recorded: dict) -> None:
    assert plan["layout"] == recorded["layout"], "plan and fixture disagree: regenerate"
    lay = Layout.from_plan(plan["layout"])
    for rank in recorded["ranks"]:
        got = M.rank_parameters(plan["transformer_config"], plan["model"], lay, rank["coordinates"]["pp"],
                               te=False,  # the fixture was built with --local-spec
                               query_norm=M.fuses_mla_query_norm(plan))
        assert {k: got[k] for k in rank["parameters"]} == rank["parameters"], (name, rank["rank"])
        assert got["decoder_layers"] == rank["decoder_layers"]["numbers"], (name, rank["rank"])
        assert got["mtp_layers"] == rank["mtp_layers_on_rank"], (name, rank["rank"])


@pytest.mark.parametrize("recipe", sorted(FIXTURE))
def test_parameter_counts_equal_megatron(recipe):
    _assert_counts_equal(recipe, _plan(recipe), FIXTURE[recipe])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_uneven_pipeline_counts_equal_megatron(name, tmp_path):
    """Stage sizes (with VPP too), accounting and model fields: every stage holds the layers and parameters
    megatron-core gives it."""
    recorded = VARIANTS[name]
    sets = [a for s in recorded["sets"] for a in ("--set", s)]
    assert main(["compile", recorded["recipe"], *sets, "--out", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / recorded["recipe"] / "plan.json").read_text())
    assert len(recorded["ranks"]) == plan["layout"]["pp"]
    _assert_counts_equal(name, plan, recorded)


@pytest.mark.parametrize("recipe", sorted(FIXTURE))
def test_memory_estimate_is_complete_and_sharded(recipe):
    plan = _plan(recipe)
    lay = Layout.from_plan(plan["layout"])
    est = M.estimate(plan, lay, 0)
    assert est.total == est.weights + est.gradients + est.optimizer + est.activations + est.allowance
    assert min(est.weights, est.gradients, est.optimizer, est.activations) > 0
    assert set(est.formulas) >= {"weights", "gradients", "optimizer", "activations", "allowance"}
    if plan["optimizer"]["use_distributed_optimizer"] and lay.dp > 1:
        assert est.optimizer < 12 * est.parameters["total"]


def _tiny_plan(**tc):
    base = {"hidden_size": 1024, "num_attention_heads": 16, "num_query_groups": 16, "num_layers": 8,
            "ffn_hidden_size": 4096, "gated_linear_unit": True, "num_moe_experts": 8, "moe_router_topk": 2,
            "moe_ffn_hidden_size": 1024, "params_dtype": "bfloat16"}
    base.update(tc)
    return {"transformer_config": base, "model": {"vocab_size": 1024},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "num_microbatches": 32},
            "ddp_config": {"grad_reduce_in_fp32": True}, "optimizer": {"use_distributed_optimizer": True},
            "runtime": {"transformer_impl": "transformer_engine"}}


def test_activations_follow_the_schedule_and_recompute():
    plan = _tiny_plan()
    one = M.estimate(plan, Layout(world_size=8, ep=8), 0).activations
    pp4 = M.estimate(plan, Layout(world_size=32, pp=4, ep=8), 0).activations
    assert pp4 == pytest.approx(one, rel=0.05)  # a quarter of the layers, 4 micro-batches in flight (no logits)
    last = M.estimate(plan, Layout(world_size=32, pp=4, ep=8), 3).activations
    assert last < pp4  # one micro-batch in flight (plus the logits)
    full = M.estimate(_tiny_plan(recompute_granularity="full"), Layout(world_size=8, ep=8), 0).activations
    assert full < one / 5
    cp2 = M.estimate(plan, Layout(world_size=16, cp=2, ep=8), 0).activations
    assert cp2 == pytest.approx(one / 2, rel=0.01)


def test_expert_state_shards_over_expert_dp():
    plan = _tiny_plan()
    a = M.estimate(plan, Layout(world_size=64, ep=8), 0)   # edp 8
    assert a.optimizer == int(12 * ((a.parameters["total"] - a.parameters["expert"]) / 64 + a.parameters["expert"] / 8))


def test_precision_aware_optimizer_keeps_its_state_in_its_dtypes():
    """BF16 moments and an FP32 master (Megatron-Bridge's DeepSeek-V3 optimizer): 8 B of state per parameter;
    an FP16 master too: 6 B."""
    plan = _tiny_plan()
    opt = plan["optimizer"] = {**plan["optimizer"], "use_precision_aware_optimizer": True,
                               "exp_avg_dtype": "bfloat16", "exp_avg_sq_dtype": "bfloat16"}
    lay = Layout(world_size=64, ep=8)
    a = M.estimate(plan, lay, 0)
    sharded = (a.parameters["total"] - a.parameters["expert"]) / 64 + a.parameters["expert"] / 8
    assert a.optimizer == int(8 * sharded)
    opt["main_params_dtype"] = "float16"
    assert M.estimate(plan, lay, 0).optimizer == int(6 * sharded)


def test_te_spec_replicates_mla_down_projections():
    """TE builds MLA's q/kv down projections as TELinear(parallel_mode="duplicated"); the local spec
    (the fixture's) shards them over TP: the difference is exactly those two matrices per layer."""
    plan = _plan("deepseek-v3/h100-bf16")
    tc, lay = plan["transformer_config"], Layout.from_plan(plan["layout"])
    te = M.rank_parameters(tc, plan["model"], lay, 0, te=True)
    local = M.rank_parameters(tc, plan["model"], lay, 0, te=False)
    h, layers = tc["hidden_size"], len(te["decoder_layers"])
    down = h * tc["q_lora_rank"] + h * (tc["kv_lora_rank"] + tc["qk_pos_emb_head_dim"])
    assert te["dense"] - local["dense"] == layers * (down - down // lay.tp)


def test_dryrun_report_compares_the_spec_it_built():
    """`moeforge dryrun --local-spec` counts the local spec's shard: its memory estimate counts the same spec, so
    an MLA model at TP > 1 matches (it reported parameters_match false: found dry-running plan-layout winners)."""
    from moeforge.compiler.commands.dryrun_report import estimate_for

    plan = _plan("deepseek-v3/h100-bf16")
    lay = Layout.from_plan(plan["layout"])
    assert lay.tp > 1 and plan["transformer_config"]["multi_latent_attention"]
    local = M.rank_parameters(plan["transformer_config"], plan["model"], lay, 0, te=False)
    built = {"coordinates": {"pp": 0}, "parameters": {"total": local["total"]},
             "substitutions": [{"field": "runtime.transformer_impl", "plan": "transformer_engine", "used": "local"}]}
    assert estimate_for(built, plan)["parameters_match"]
    assert not estimate_for({**built, "substitutions": []}, plan)["parameters_match"]  # TE's shard is larger


# ------------------------------------------------------------------ calibration and the tuned configurations
# The smoke run (shared/seeds/003_*.txt): Qwen3-30B-A3B BF16, 16 x H100, EP16, alltoall, MBS 1, GBS 1024,
# seq 4096, TE CUDA graphs on moe_router/moe_preprocess: "61.351 GB peak max allocated memory".  Bridge logs
# torch.cuda.memory_stats()["allocated_bytes.all.peak"] / 1.0e9 (megatron/bridge/training/utils/
# train_utils.py), so decimal GB of allocated memory: compared with Estimate.allocated (no allowance).
SMOKE_PEAK_ALLOCATED = 61.351e9
SMOKE_TOLERANCE = 0.15


@pytest.mark.parametrize("recipe", ["qwen3-30b-a3b/h100-bf16", "qwen3-30b-a3b/h100-bf16-ep16-alltoall"])
def test_smoke_run_calibration(recipe):
    plan = _plan(recipe)
    plan["transformer_config"]["moe_token_dispatcher_type"] = "alltoall"  # the run's fallback dispatcher
    est, _ = M.peak(plan)
    ratio = est.allocated / SMOKE_PEAK_ALLOCATED
    print(f"\n{recipe}: estimated allocated {est.allocated / 1e9:.2f} GB vs measured 61.35 GB: ratio {ratio:.3f}")
    assert abs(ratio - 1) < SMOKE_TOLERANCE, ratio


# Megatron-Bridge's controlled run of its tuned Qwen3-30B-A3B H100 layout with EP overlap (#5094,
# skills/nemo-mbridge-perf-moe-comm-overlap/card.yaml measured_result): EP16 HybridEP, combined-1F1B
# overlap, TE CUDA graphs on moe_router/moe_preprocess, "rank0_peak_allocated_gib: 62.166" (GiB).
PRODUCTION_PEAK_ALLOCATED = 62.166 * 2**30


def test_production_ep_overlap_run_calibration():
    """The second measured peak: the same model with HybridEP and EP overlap (whose combined 1F1B holds
    one more layer than one micro-batch), within the smoke run's tolerance."""
    from moeforge.compiler.planner import validation
    rows = json.loads((ROOT / "tests" / "data" / "bridge_tuned_layouts.json").read_text())["rows"]
    row = next(r for r in rows if (r["model"], r["gpu"], r["ngpu"]) == ("qwen3-30b-a3b", "h100", 16))
    assert (row["ep"], row["flex_backend"], row["ep_overlap"], row["mbs"]) == (16, "hybridep", True, 1)
    est, _ = M.peak(validation.tuned_plan(row))
    ratio = est.allocated / PRODUCTION_PEAK_ALLOCATED
    print(f"\nEP16 HybridEP EP overlap: estimated allocated {est.allocated / 2**30:.2f} GiB vs measured 62.17 GiB: "
          f"ratio {ratio:.3f}")
    assert abs(ratio - 1) < SMOKE_TOLERANCE, ratio


def _bridge_rows() -> list[str]:
    """Catalogue recipes whose header names a tuned Megatron-Bridge row (they ran, so they fit)."""
    out = []
    for rid in recipe_ids(ROOT / "recipes"):
        head = (ROOT / "recipes" / f"{rid}.yaml").read_text().split("\nschema:")[0]
        if "Megatron-Bridge perf recipe row" in head or "row `" in head:
            out.append(rid)
    return out


def test_bridge_rows_found():
    assert len(_bridge_rows()) >= 18


@pytest.mark.parametrize("recipe", _bridge_rows())
def test_tuned_bridge_configurations_fit(recipe):
    plan = _plan(recipe)
    est, rank = M.peak(plan)
    capacity = M.capacity_bytes(plan)
    assert est.total <= capacity, (recipe, rank, est.breakdown(), est.formulas)


def test_interleaved_warmup_is_megatrons():
    """schedules.get_pp_rank_microbatches: (pp-rank-1)*2 + (vpp-1)*pp warm-up forwards, then one more
    forward before the first backward; equal chunks: that many chunk-micro-batches held."""
    held, _ = A.pipeline_schedule_peak([1.0] * 4, pp=8, pp_rank=2, vpp=4, microbatches=256, combined=False, layer_peak=0)
    assert held == (8 - 2 - 1) * 2 + 3 * 8 + 1
    held, _ = A.pipeline_schedule_peak([1.0], pp=4, pp_rank=0, vpp=None, microbatches=64, combined=False, layer_peak=0)
    assert held == 4
    held, _ = A.pipeline_schedule_peak([1.0], pp=4, pp_rank=0, vpp=None, microbatches=2, combined=False, layer_peak=0)
    assert held == 2  # never more micro-batches than there are


def _walk_every_step(chunk_bytes, pp, pp_rank, vpp, microbatches, combined, layer_peak):
    """The schedule walked step by step to the end (what pipeline_schedule_peak shortens to one period, and
    for one chunk per rank to a closed form)."""
    combined = combined and (pp == 1 or bool(vpp))
    chunks, total = len(chunk_bytes), microbatches * len(chunk_bytes)
    warmup = (1 if combined else 0) if pp == 1 else \
        ((pp - pp_rank - 1) * 2 + (vpp - 1) * pp + combined if vpp else pp - pp_rank - 1)
    warmup = min(warmup, total)
    fwd = lambda i: chunk_bytes[(i % (pp * chunks)) // pp]  # noqa: E731
    bwd = lambda i: chunk_bytes[chunks - 1 - (i % (pp * chunks)) // pp]  # noqa: E731
    held = peak = 0.0
    for i in range(warmup):
        held += fwd(i)
        peak = max(peak, held)
    for j in range(total - warmup):
        if combined:
            peak = max(peak, held + layer_peak)
            held += fwd(warmup + j) - bwd(j)
        else:
            held += fwd(warmup + j)
            peak = max(peak, held)
            held -= bwd(j)
    return peak


def test_schedule_peak_over_one_period_equals_the_whole_walk():
    """What a rank holds in the steady state repeats every pp*vpp steps, so one period finds the peak;
    with one chunk every step adds and frees the same bytes (the closed form)."""
    import random

    rng = random.Random(15)
    for _ in range(400):
        pp = rng.choice([1, 2, 4, 8, 16])
        vpp = rng.choice([None, 2, 4]) if pp > 1 else None
        chunks = [float(rng.randint(1, 9)) for _ in range(vpp or 1)]
        args = (chunks, pp, rng.randrange(pp), vpp, rng.randint(1, 70), rng.random() < 0.5, float(rng.randint(0, 3)))
        assert A.pipeline_schedule_peak(*args)[0] == _walk_every_step(*args), args


def test_combined_1f1b_holds_one_layer_more_not_one_microbatch():
    """combined_1f1b.py: forward of micro-batch i+1 and backward of i run layer by layer together."""
    plain, _ = A.pipeline_schedule_peak([10.0], pp=1, pp_rank=0, vpp=None, microbatches=64, combined=False, layer_peak=1.0)
    combined, _ = A.pipeline_schedule_peak([10.0], pp=1, pp_rank=0, vpp=None, microbatches=64, combined=True, layer_peak=1.0)
    assert (plain, combined) == (10.0, 11.0)


def test_recompute_modules_drop_what_megatron_discards():
    common = {"moe_ffn_hidden_size": 512, "moe_router_force_load_balancing": True}
    lay = Layout(world_size=8, ep=8)
    base = M.estimate(_tiny_plan(**common), lay, 0).activation_items
    act = M.estimate(_tiny_plan(**common, recompute_granularity="selective", recompute_modules=["moe_act"]),
                     lay, 0).activation_items
    # CheckpointWithoutOutput over the activation: fc2's input goes (8 layers x 2 B x top-2 of 4096
    # tokens x f 512), fc1's output stays
    assert base["mlp.experts"] - act["mlp.experts"] == 8 * 2 * (2 * 4096) * 512
    moe = M.estimate(_tiny_plan(**common, recompute_granularity="selective", recompute_modules=["moe"]),
                     lay, 0).activation_items
    assert "mlp.experts" not in moe and moe["mlp.norm"] == base["mlp.norm"]


def test_mla_up_proj_recompute_frees_qkv():
    plan = _plan("deepseek-v3/h100-bf16")
    est = M.estimate(plan, None, 2)
    assert "attn.qkv" not in est.activation_items  # recompute_modules has mla_up_proj
    plan["transformer_config"]["recompute_modules"] = ["mlp"]
    assert M.estimate(plan, None, 2).activation_items["attn.qkv"] > 0


def test_sequence_parallel_shards_the_routed_tokens():
    """With SP each TP rank routes its own s/tp tokens (ETP 1): the expert rows halve at TP 2;
    without forced balancing the stated imbalance bound multiplies them."""
    plan = _tiny_plan(sequence_parallel=True, moe_router_force_load_balancing=True)
    one = M.estimate(plan, Layout(world_size=8, ep=8), 0).activation_items["mlp.experts"]
    two = M.estimate(plan, Layout(world_size=16, tp=2, ep=8, etp=1), 0).activation_items["mlp.experts"]
    assert two == one // 2
    unbalanced = M.estimate(_tiny_plan(sequence_parallel=True), Layout(world_size=8, ep=8), 0)
    assert unbalanced.activation_items["mlp.experts"] == one * A.EP_IMBALANCE_BOUND


def test_local_attention_keeps_the_scores():
    """Without TE (the CPU platform's local spec) attention saves its s x s softmax output."""
    plan = _tiny_plan()
    flash = M.estimate(plan, Layout(world_size=8, ep=8), 0).activation_items["attn.core_attn"]
    plan["runtime"] = {"transformer_impl": "local"}
    local = M.estimate(plan, Layout(world_size=8, ep=8), 0).activation_items["attn.core_attn"]
    assert local - flash == 8 * 2 * 16 * 4096 * 4096  # layers x bf16 x heads x s x s


def test_states_shared_across_recompute_and_micro_batches_change_nothing():
    """The planner shares one layout's rank_states (memory.peak ``states_by_rank``) across its recompute options,
    micro-batch sizes and overlaps: each must estimate as if computed afresh, so nothing that varies
    between them may enter rank_states."""
    plan = _plan("deepseek-v3/h100-bf16")
    lay = Layout.from_plan(plan["layout"])
    assert lay.pp > 1
    states_by_rank: dict = {}
    for recompute, modules, mbs, overlap in ((None, None, 1, False), ("selective", ["mla_up_proj"], 2, True),
                                             ("full", None, 1, True)):
        variant = {**plan, "transformer_config": {**plan["transformer_config"], "recompute_granularity": recompute,
                                                  "recompute_modules": modules,
                                                  "overlap_moe_expert_parallel_comm": overlap},
                   "training": {**plan["training"], "micro_batch_size": mbs}}
        shared, fresh = M.peak(variant, lay, states_by_rank), M.peak(variant, lay)
        assert (shared[0].total, shared[1], shared[0].formulas) == (fresh[0].total, fresh[1], fresh[0].formulas)
    assert sorted(states_by_rank) == list(range(lay.pp))
