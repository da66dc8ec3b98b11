"""The catalogue inside the recipe compiler: hard rules, silent rewrites, preferences, specialisation.

Recipes here live in a temporary recipes/ root (own platforms and a small GPU MoE model) so the
test does not depend on the shipped catalogue; only the embedded tiny-moe/cpu recipe is used as is.
"""
from __future__ import annotations

import textwrap

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.knobs.table import LINT_ONLY
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.rules import CATALOGUE, PREFERENCES, RULES, fold
from moeforge.compiler.rules.expr import F, Const, IsSet, Or

PLATFORM = """\
schema: moeforge/platform/v1
name: {name}
device: cuda
gpu: {{name: "{gpu}", compute_capability: "{cc}"}}
gpus_per_node: {per_node}
nvlink_domain: {nvl}
distributed_backend: nccl
software: {{torch: "2.9.0", transformer_engine: "2.12.0", megatron_core: "{mcore}", deep_ep: {deep_ep},
            hybrid_ep: true}}
"""
MODEL = """\
schema: moeforge/model/v1
name: moe-16l
family: gpt-moe
architecture: {num_layers: 16, hidden_size: 1024, ffn_hidden_size: 4096, num_attention_heads: 16,
               num_query_groups: 4, vocab_size: 32000, max_position_embeddings: 4096,
               add_bias_linear: false, add_qkv_bias: false}
moe: {num_experts: 64, router_topk: 4, ffn_hidden_size: 512, shared_expert_intermediate_size: null,
      layer_freq: 1, router_load_balancing_type: aux_loss}
mtp_num_layers: null
"""
RECIPE = """\
schema: moeforge/recipe/v2
revision: 1
name: r
platform: {platform}
model: moe-16l
resources: {{nodes: {nodes}}}
parallelism: {{tp: 1, pp: 1, cp: 1, ep: {ep}}}
precision: {{dtype: bf16}}
moe:
  dispatcher: auto
  flex_backend: auto
  overlap: {{ep_comm: auto, delay_wgrad: auto}}
  router: {{dtype: fp32}}
  grouped_gemm: true
cuda_graph: {{impl: auto, modules: auto}}
training: {{micro_batch_size: 1, global_batch_size: 1024, seq_length: 4096}}
{extra}"""


@pytest.fixture()
def root(tmp_path):
    (tmp_path / "platforms").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "r").mkdir()
    platforms = {
        "h100": dict(gpu="NVIDIA H100 80GB HBM3", cc="9.0", per_node=8, nvl=8, mcore="0.19.2", deep_ep="true"),
        "h100-nodeep": dict(gpu="NVIDIA H100 80GB HBM3", cc="9.0", per_node=8, nvl=8, mcore="0.19.2",
                            deep_ep="false"),
        "h100-mcore016": dict(gpu="NVIDIA H100 80GB HBM3", cc="9.0", per_node=8, nvl=8, mcore="0.16.1",
                              deep_ep="true"),
        "gb200": dict(gpu="NVIDIA GB200", cc="10.0", per_node=4, nvl=72, mcore="0.19.2", deep_ep="true"),
    }
    for name, kw in platforms.items():
        (tmp_path / "platforms" / f"{name}.yaml").write_text(PLATFORM.format(name=name, **kw))
    (tmp_path / "models" / "moe-16l.yaml").write_text(MODEL)
    return tmp_path


def compile_(root, platform="h100", nodes=2, ep=16, extra="", overrides=(), strict=False):
    (root / "r" / "x.yaml").write_text(RECIPE.format(platform=platform, nodes=nodes, ep=ep,
                                                     extra=textwrap.dedent(extra)))
    return resolve(load("r/x", list(overrides), root=root), strict=strict)


def test_tiny_cpu_recipe_alltoall_overlap_on_delay_wgrad_off_by_rule():
    r = resolve(load("tiny-moe/cpu"))
    assert r.env["moe_token_dispatcher_type"] == "alltoall"
    assert r.env["overlap_moe_expert_parallel_comm"] is True
    assert r.env["delay_wgrad_compute"] is False
    d = r.decisions["delay_wgrad_compute"]
    assert d.source == "rule" and d.rule == "DELAY_WGRAD_NEEDS_TE_BACKWARD_DW"
    assert r.env["cuda_graph_impl"] == "none"
    assert not [x for x in r.diagnostics if x.is_error]
    resolve(load("tiny-moe/cpu"), strict=True)  # nothing silent either


def test_h100_cross_node_ep16_prefers_deepep_overlap_and_dropless_graphs(root):
    r = compile_(root)
    env, dec = r.env, r.decisions
    assert (env["moe_token_dispatcher_type"], env["moe_flex_dispatcher_backend"]) == ("flex", "deepep")
    assert dec["moe_token_dispatcher_type"].rule == "PREFER_DEEPEP_ON_H100_B200"
    assert env["overlap_moe_expert_parallel_comm"] is True
    assert dec["overlap_moe_expert_parallel_comm"].rule == "PREFER_EP_OVERLAP_INTER_NODE"
    assert env["delay_wgrad_compute"] is False
    assert env["cuda_graph_impl"] == "transformer_engine"
    assert set(env["cuda_graph_modules"]) == {"attn", "moe_router", "moe_preprocess"}
    assert env["use_te_rng_tracker"] is True  # forced by CUDA_GRAPH_NEEDS_TE_RNG_TRACKER given the graphs
    assert env["moe_flex_dispatcher_num_sms"] == 20


def test_gb200_nvl72_prefers_hybridep_with_platform_ranks(root):
    r = compile_(root, platform="gb200", nodes=4, ep=16)
    env = r.env
    assert (env["moe_token_dispatcher_type"], env["moe_flex_dispatcher_backend"]) == ("flex", "hybridep")
    assert env["hybridep_ranks_per_nvlink_domain"] == 16           # EP on NVL72
    assert env["moe_flex_dispatcher_num_sms"] == 32


def test_deepep_needs_the_package(root):
    r = compile_(root, platform="h100-nodeep")
    assert r.env["moe_flex_dispatcher_backend"] != "deepep" or r.env["moe_token_dispatcher_type"] != "flex"
    with pytest.raises(CompileError) as err:
        compile_(root, platform="h100-nodeep", overrides=["moe.dispatcher=flex", "moe.flex_backend=deepep"])
    assert "DEEPEP_PACKAGE_INSTALLED" in {d.code for d in err.value.diagnostics}


def test_small_ep_two_nodes_keeps_alltoall_without_overlap(root):
    r = compile_(root, nodes=1, ep=4)
    assert r.env["moe_token_dispatcher_type"] == "alltoall"
    assert r.env["overlap_moe_expert_parallel_comm"] is False
    assert r.decisions["overlap_moe_expert_parallel_comm"].rule == "PREFER_NO_EP_OVERLAP_SMALL_EP"


def test_hard_rule_conflict_names_the_rule(root):
    with pytest.raises(CompileError) as err:
        compile_(root, overrides=["moe.overlap.ep_comm=true", "parallelism.pp=2", "parallelism.vpp=null"])
    codes = {d.code for d in err.value.diagnostics}
    assert any("EP_OVERLAP_NEEDS_VPP" in code for code in codes), codes


def test_mcore_016_platform_keeps_ep_overlap_graphs_transformer_engine_only(root):
    r = compile_(root, platform="h100-mcore016", overrides=["cuda_graph.impl=local"])
    assert r.env["overlap_moe_expert_parallel_comm"] is False  # 0.16: EP overlap forbids local graphs


def test_silent_rewrite_is_stated_and_strict_refuses_it(root):
    r = compile_(root, extra="overlap: {tp_comm: true}\n")
    diag = [d for d in r.diagnostics if d.code == "TP_OVERLAP_NEEDS_TP"]
    assert diag and diag[0].severity == "warning"
    assert r.env["tp_comm_overlap"] is False
    assert r.decisions["tp_comm_overlap"].source == "megatron"
    with pytest.raises(CompileError) as err:
        compile_(root, extra="overlap: {tp_comm: true}\n", strict=True)
    assert "TP_OVERLAP_NEEDS_TP" in {d.code for d in err.value.diagnostics}


def test_recipe_rules_never_mention_lint_only_fields():
    for r in RULES:
        assert not r.fields & LINT_ONLY, r.id
        assert not r.lint_only
    lint_only = {r.id for r in CATALOGUE if r.lint_only}
    assert lint_only and not lint_only & {r.id for r in RULES}
    assert len(RULES) == len(CATALOGUE) - len(lint_only)
    for p in PREFERENCES:
        assert not (p.prefer.fields() | p.when.fields()) & LINT_ONLY


def test_fold_simplifies_constants():
    e = Or(F("external_cuda_graph") == True, F("cuda_graph_impl") == "transformer_engine")  # noqa: E712
    folded = fold(e, {"external_cuda_graph": False})
    assert folded.fields() == {"cuda_graph_impl"}
    assert type(fold(IsSet(F("x")), {"x": None})) is Const
    assert fold(IsSet(F("x")), {"x": None}).value is False


def test_preferences_are_sane():
    ids = [p.id for p in PREFERENCES]
    assert len(ids) == len(set(ids))
    for p in PREFERENCES:
        assert 1 <= p.weight < 50, p.id       # silent rewrites weigh 50 in the solver
        assert p.reason
