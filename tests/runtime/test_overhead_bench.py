"""bench/runtime_overhead.py on a reduced SwiGLU model: the plain baseline builds the runtime's model.

The plan is a Qwen3-like shape shrunk to CPU size (2 layers, hidden 64, 4 experts, EP=2): SwiGLU
experts (activation_func "silu" + gated_linear_unit), RMSNorm, QK layernorm, GQA, RoPE with a
non-default base.  The benchmark runs moeforge.runtime.train and its plain megatron-core worker on 2 CPU
ranks for a few steps; the test checks that the plain worker trains (finite losses on every
step), that it trains the same model (identical per-micro-batch losses, the same rank-0
parameter count as moeforge.runtime.dryrun's build of the plan, the plan's activation/norm/RoPE values in
its config), and never looks at wall-clock times.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from runtime_testlib import PYTHON, ROOT, run_module, subprocess_env


def swiglu_plan(tiny: dict) -> dict:
    plan = tiny
    plan["transformer_config"].update(
        num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
        num_query_groups=2, kv_channels=16, qk_layernorm=True, normalization="RMSNorm",
        gated_linear_unit=True, activation_func="silu", layernorm_epsilon=1e-6,
        num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=32,
        moe_router_score_function="softmax", moe_router_dtype="fp32")
    plan["model"].update(position_embedding_type="rope", rotary_base=1000000)
    return plan


@pytest.mark.slow
def test_overhead_bench_plain_worker_builds_the_runtime_model(tiny_plan, tmp_path):
    plan = swiglu_plan(tiny_plan)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [PYTHON, str(ROOT / "bench" / "runtime_overhead.py"), str(plan_path), "--steps", "3",
         "--repeats", "1", "--summary", str(summary_path)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    summary = json.loads(summary_path.read_text())

    plain = summary["losses"]["plain"]
    assert len(plain) == 3 and all(math.isfinite(v) for step in plain for v in step)
    assert summary["losses_identical"], summary["losses"]

    built = summary["plain_model"]
    cfg = built["config"]
    assert cfg["activation_func"] == "silu" and cfg["gated_linear_unit"] is True
    assert cfg["normalization"] == "RMSNorm" and cfg["qk_layernorm"] is True
    assert cfg["layernorm_epsilon"] == 1e-6 and cfg["num_query_groups"] == 2
    assert built["model"]["rotary_base"] == 1000000
    assert built["model"]["position_embedding_type"] == "rope"

    out = tmp_path / "dryrun.json"
    run = run_module("moeforge.runtime.dryrun", str(plan_path), "--rank", "0", "--out", str(out))
    assert run.returncode == 0, run.output[-3000:]
    assert built["parameters_rank0"] == json.loads(out.read_text())["parameters"]["total"]
