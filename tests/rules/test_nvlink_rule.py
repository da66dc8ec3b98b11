"""NVLINK_EP_GROUP_SPANS_DOMAINS (compiler/rules/nvlink.py): an EP group should stay in one NVLink domain.

Checked concretely (lint-config's evaluator, the one the plan's warnings use), on recipes through the
whole pipeline, for registration (`moeforge rules`), and against launch.sbatch's --segment choice
(compiler/targets/emit.py nvlink_segment): wherever the rule is satisfied on a multi-node NVLink platform, the
segment Slurm is asked for holds whole EP groups and divides the job's node count.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from moeforge.compiler.targets import emit
from moeforge.compiler.lint.config_lint import lint_mapping
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.rules import BY_ID, CATALOGUE, CONCERNS, RULES

RULE = "NVLINK_EP_GROUP_SPANS_DOMAINS"
ROOT = Path(__file__).resolve().parents[2]

H100 = {"gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}, "nvlink_domain": 8, "gpus_per_node": 8}
GB200 = {"gpu": {"name": "NVIDIA GB200", "compute_capability": "10.0"}, "nvlink_domain": 72, "gpus_per_node": 4}
BASE = {
    "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
    "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 1,
    "num_layers": 16, "hidden_size": 1024, "num_attention_heads": 16, "num_query_groups": 4,
    "num_moe_experts": 256, "moe_ffn_hidden_size": 512, "moe_router_dtype": "fp32", "bf16": True,
    "moe_token_dispatcher_type": "alltoall", "micro_batch_size": 1, "global_batch_size": 4096,
    "versions": {"torch": "2.9.0", "transformer_engine": "2.12.0", "megatron_core": "0.19.0"},
}


def fires(platform: dict, **values) -> bool:
    findings = lint_mapping({**BASE, **platform, **values})
    return RULE in {f.rule for f in findings}


def test_registered_like_the_others():
    assert "nvlink" in CONCERNS
    rule = BY_ID[RULE]
    assert rule.severity == "warning" and rule.origin == "moeforge"
    assert rule.source and rule.fix and rule.message
    assert RULE in {r.id for r in RULES}  # the recipe compiler uses it too
    assert [r.id for r in CATALOGUE].count(RULE) == 1


def test_moeforge_rules_lists_it():
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", "rules"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert f"{RULE}  [warning; moeforge]" in proc.stdout


@pytest.mark.parametrize("platform, values, expected", [
    # NVL72 (4 GPUs per tray, 72 per domain)
    (GB200, dict(world_size=256, num_nodes=64, expert_model_parallel_size=128), True),    # 128 > 72
    (GB200, dict(world_size=256, num_nodes=64, expert_model_parallel_size=64), False),    # segments of 16 trays
    (GB200, dict(world_size=192, num_nodes=48, expert_model_parallel_size=48), False),    # segments of 12 trays
    (GB200, dict(world_size=256, num_nodes=64, expert_model_parallel_size=48,
                 expert_tensor_parallel_size=2, num_moe_experts=96), True),                 # ETP2 x EP48 = 96 > 72
    (GB200, dict(world_size=64, num_nodes=16, expert_model_parallel_size=64), False),     # the job fits one domain
    (GB200, dict(world_size=256, num_nodes=64, expert_model_parallel_size=2), False),     # inside one tray
    (GB200, dict(world_size=256, num_nodes=64, expert_model_parallel_size=8,
                 expert_tensor_parallel_size=None, tensor_model_parallel_size=2), False),  # ETP unset: TP2 x EP8
    (GB200, dict(world_size=256, num_nodes=64, expert_model_parallel_size=64,
                 expert_tensor_parallel_size=None, tensor_model_parallel_size=2), True),   # TP2 x EP64 = 128
    # 8-GPU nodes: the NVLink domain is the node
    (H100, dict(world_size=64, num_nodes=8, expert_model_parallel_size=8), False),
    (H100, dict(world_size=64, num_nodes=8, expert_model_parallel_size=2,
                expert_tensor_parallel_size=3, num_moe_experts=64), True),                  # span 6 straddles nodes
    (H100, dict(world_size=16, num_nodes=2, expert_model_parallel_size=16), False),       # deliberate inter-node EP
    (H100, dict(world_size=8, num_nodes=1, expert_model_parallel_size=8), False),
])  # fmt: skip
def test_concrete_cases(platform, values, expected):
    assert fires(platform, **values) is expected


def test_cpu_and_single_gpu_domains_never():
    assert not fires({"gpu": None, "nvlink_domain": 1, "gpus_per_node": 2}, world_size=16, num_nodes=8,
                     expert_model_parallel_size=16)
    assert not fires({**H100, "nvlink_domain": 1}, world_size=64, num_nodes=8, expert_model_parallel_size=6)


def test_unknown_sizes_skip_the_check():
    assert not fires(GB200, expert_model_parallel_size=128)  # no world size, no node count: unknown


def _warnings(rid: str, sets=()) -> set[str]:
    return {d.code for d in resolve(load(rid, list(sets))).diagnostics}


def test_recipes():
    """Inter-node EP on 8-GPU nodes is not warned about; a group larger than the rack is."""
    assert RULE not in _warnings("qwen3-30b-a3b/h100-bf16")            # EP16 over two nodes, on purpose
    assert RULE not in _warnings("deepseek-v3/gb200-nvl72-bf16")       # EP64 in segments of 16 trays
    assert RULE not in _warnings("qwen3-30b-a3b/gb200-nvl72-bf16", ["resources.nodes=48", "parallelism.ep=32",
                                                                   "training.global_batch_size=1536"])
    assert RULE in _warnings("qwen3-30b-a3b/gb200-nvl72-bf16", ["resources.nodes=64", "parallelism.ep=128",
                                                               "moe.dispatcher=alltoall",
                                                               "training.global_batch_size=2048"])


def _segment(nodes: int, ep: int, etp: int, per_node: int = 4, domain: int = 72) -> int | None:
    plan = {"layout": {"nnodes": nodes, "nproc_per_node": per_node, "ep": ep, "etp": etp, "tp": etp},
            "platform": {"device": "cuda", "nvlink_domain": domain, "gpus_per_node": per_node}}
    return emit.nvlink_segment(plan)


@pytest.mark.parametrize("domain, per_node", [(72, 4), (36, 4), (64, 8)])
def test_segment_agrees_with_the_rule(domain, per_node):
    """Where the rule is satisfied, the segment divides the node count (Slurm refuses a job that is
    larger than a segment and not a whole number of them) and holds whole EP groups."""
    checked = 0
    for nodes in range(1, 97):
        world = nodes * per_node
        for etp in (1, 2):
            for ep in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128):
                if ep == 1 or world % (etp * ep):
                    continue
                segment = _segment(nodes, ep, etp, per_node, domain)
                assert segment is not None and 1 <= segment <= max(nodes, 1)
                assert segment == nodes or nodes % segment == 0, (nodes, segment)
                assert segment * per_node <= domain or segment == nodes <= domain // per_node
                warned = fires({**GB200, "nvlink_domain": domain, "gpus_per_node": per_node}, world_size=world,
                               num_nodes=nodes, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
                               num_moe_experts=384)
                if not warned and world > domain:
                    assert (segment * per_node) % (etp * ep) == 0, (nodes, ep, etp, segment)
                    checked += 1
    assert checked > 50


def test_no_segment_where_the_domain_is_the_node():
    assert _segment(16, 16, 1, per_node=8, domain=8) is None
    plan = {"layout": {"nnodes": 4, "nproc_per_node": 2, "ep": 2, "etp": 1},
            "platform": {"device": "cpu", "nvlink_domain": 1, "gpus_per_node": 2}}
    assert emit.nvlink_segment(plan) is None


def test_segment_examples():
    assert _segment(2, 8, 1) == 2      # the whole job fits one domain
    assert _segment(18, 8, 1) == 18
    assert _segment(64, 64, 1) == 16   # 64 is not a multiple of 18: 16-tray segments, one EP group each
    assert _segment(36, 8, 1) == 18
    assert _segment(20, 8, 1) == 10    # the largest divisor of 20 that fits a domain
