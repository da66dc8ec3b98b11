"""compiler/estimate/memory.py against megatron-core's own parameter counts.

tests/data/layout_param_counts.json holds, for every catalogue recipe, what ``python -m
runtime.dryrun PLAN --rank 0,[middle,]-1 --local-spec`` counted on the meta device (megatron-core
0.19.2 for the GPU platforms, 0.16 for the CPU one); tests/data/gen_layout_param_counts.py
regenerates it.  The analytic count, from the golden plan.json alone (no torch), must equal it
exactly, for every rank recorded: total, dense, expert and embedding, the decoder layers the
stage owns and its MTP layers.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.estimate import memory as M
from compiler.layout import Layout

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "data" / "layout_param_counts.json").read_text())["recipes"]
GOLDEN = ROOT / "tests" / "golden"


def _plan(recipe: str) -> dict:
    return json.loads((GOLDEN / recipe / "plan.json").read_text())


def test_fixture_covers_the_catalogue():
    golden = {str(p.parent.relative_to(GOLDEN)) for p in GOLDEN.rglob("plan.json")}
    assert golden == set(FIXTURE)


@pytest.mark.parametrize("recipe", sorted(FIXTURE))
def test_parameter_counts_equal_megatron(recipe):
    plan = _plan(recipe)
    assert plan["layout"] == FIXTURE[recipe]["layout"], "golden plan and fixture disagree: regenerate"
    lay = Layout.from_plan(plan["layout"])
    for rank in FIXTURE[recipe]["ranks"]:
        got = M.rank_parameters(plan["transformer_config"], plan["model"], lay, rank["coordinates"]["pp"],
                               te=False)  # the fixture was built with --local-spec
        assert {k: got[k] for k in rank["parameters"]} == rank["parameters"], (recipe, rank["rank"])
        assert got["decoder_layers"] == rank["decoder_layers"]["numbers"], (recipe, rank["rank"])
        assert got["mtp_layers"] == rank["mtp_layers_on_rank"], (recipe, rank["rank"])


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
