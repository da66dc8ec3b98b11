"""Dry run of large layouts: per-rank parameter counts must equal an independent count.

The expected numbers are computed here from the published architectures (Qwen3-30B-A3B,
DeepSeek-V3) with closed-form formulas, not by asking megatron-core, so a wrong layer split,
a missing shared expert, an unsharded expert or a forgotten MTP embedding copy shows up.
"""

from __future__ import annotations

import json

import pytest

from runtime_testlib import DATA, run_module

from moeforge.compiler.commands.dryrun_report import with_estimates


def mlp(h: int, f: int, gated: bool) -> int:
    return h * f * (2 if gated else 1) + f * h  # fc1 (gate+up when gated) + fc2, no bias


def attention(tc: dict) -> int:
    h, a = tc["hidden_size"], tc["num_attention_heads"]
    if tc.get("multi_latent_attention"):
        qk, pos, v = tc["qk_head_dim"], tc["qk_pos_emb_head_dim"], tc["v_head_dim"]
        ql, kvl = tc["q_lora_rank"], tc["kv_lora_rank"]
        q = h * ql + ql + ql * a * (qk + pos)  # down-proj, q norm, up-proj
        kv = h * (kvl + pos) + kvl + kvl * a * (qk + v)  # down-proj (+rope part), kv norm, up
        return q + kv + a * v * h
    d, g = tc["kv_channels"], tc["num_query_groups"]
    qk_norm = 2 * d if tc.get("qk_layernorm") else 0
    return h * (a * d + 2 * g * d) + qk_norm + a * d * h


def layer(tc: dict, moe: bool, ep: int) -> tuple[int, int]:
    """(non-expert, expert) parameters of one transformer layer on one EP rank."""
    h, gated = tc["hidden_size"], tc["gated_linear_unit"]
    base = attention(tc) + 2 * h  # + input and pre-MLP RMSNorm
    if not moe:
        return base + mlp(h, tc["ffn_hidden_size"], gated), 0
    experts = tc["num_moe_experts"]
    router = experts * h
    shared = tc.get("moe_shared_expert_intermediate_size")
    dense = base + router + (mlp(h, shared, gated) if shared else 0)
    return dense, experts // ep * mlp(h, tc["moe_ffn_hidden_size"], gated)


def stage_layers(tc: dict, pp: int, pp_rank: int) -> list[int]:
    """1-based global layer numbers on a pipeline stage."""
    n = tc["num_layers"]
    first = tc.get("num_layers_in_first_pipeline_stage")
    last = tc.get("num_layers_in_last_pipeline_stage")
    if pp == 1:
        return list(range(1, n + 1))
    sizes = [None] * pp
    if first:
        sizes[0] = first
    if last:
        sizes[-1] = last
    rest = [i for i in range(pp) if sizes[i] is None]
    per = (n - sum(s for s in sizes if s)) // len(rest)
    for i in rest:
        sizes[i] = per
    start = sum(sizes[:pp_rank])
    return list(range(start + 1, start + sizes[pp_rank] + 1))


def is_moe(tc: dict, number: int) -> bool:
    freq = tc["moe_layer_freq"]
    return bool(freq[number - 1]) if isinstance(freq, list) else (number - 1) % freq == 0


def expected(plan: dict, rank: int) -> dict:
    tc, layout, vocab = plan["transformer_config"], plan["layout"], plan["model"]["vocab_size"]
    h, pp, ep = tc["hidden_size"], layout["pp"], layout["ep"]
    pp_rank = rank // (layout["world_size"] // pp)  # megatron's default order tp-cp-ep-dp-pp
    numbers = stage_layers(tc, pp, pp_rank)
    dense = expert = embedding = 0
    for n in numbers:
        d, e = layer(tc, is_moe(tc, n), ep)
        dense, expert = dense + d, expert + e
    last = pp_rank == pp - 1
    mtp = tc.get("mtp_num_layers") or 0
    if pp_rank == 0:
        embedding += vocab * h
    if last:
        dense += h  # final norm
        embedding += vocab * h  # untied output layer
        if mtp:
            embedding += vocab * h if pp > 1 else 0  # MTP needs the embedding on the last stage
            for _ in range(mtp):  # enorm, hnorm, final norm, eh_proj (2h -> h), one layer
                d, e = layer(tc, is_moe(tc, tc["num_layers"]), ep)
                dense += 3 * h + 2 * h * h + d
                expert += e
    return {"numbers": numbers, "mtp": mtp if last else 0,
            "parameters": {"total": dense + expert + embedding, "embedding": embedding,
                           "expert": expert, "dense": dense}}


CASES = [
    ("qwen3-30b-a3b-ep8", [0, 7], True),  # TP1 PP1 EP8, world 8 (TE/flex -> local spec)
    ("qwen3-30b-a3b-pp4-ep8", [0, 9, 31], False),  # PP4 EP8, world 32, local spec as written
    ("deepseek-v3-pp16-ep8", [0, 64, 127], True),  # PP16 EP8, world 128, MLA + MTP
]


@pytest.mark.parametrize("name, ranks, local_spec", CASES)
def test_dryrun_parameter_counts_match_architecture(name, ranks, local_spec, tmp_path):
    plan_path = DATA / f"{name}.plan.json"
    plan = json.loads(plan_path.read_text())
    out = tmp_path / "dryrun.json"
    args = [str(plan_path), "--rank", ",".join(map(str, ranks)), "--out", str(out)]
    run = run_module("moeforge.runtime.dryrun", *args, *(["--local-spec"] if local_spec else []))
    assert run.returncode == 0, run.output[-4000:]
    result = json.loads(out.read_text())
    results = result["ranks"] if len(ranks) > 1 else [result]
    for rank, got in zip(ranks, results):
        want = expected(plan, rank)
        assert got["rank"] == rank
        assert got["device"] == "meta"
        assert got["decoder_layers"]["numbers"] == want["numbers"], rank
        assert got["mtp_layers_on_rank"] == want["mtp"], rank
        assert got["parameters"] == want["parameters"], rank
        assert "memory_estimate" not in got  # an estimate is the compiler's, not the runtime's
        mem = with_estimates(got)["memory_estimate"]  # what `moeforge dryrun` adds
        parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activation_bytes", "allowance_bytes")
        assert mem["total_bytes"] == sum(mem[p] for p in parts)
        assert mem["parameters_match"], rank  # the estimate's count of this stage is megatron-core's
        assert mem["weights_bytes"] == 2 * want["parameters"]["total"]  # bf16
        assert {"weights", "gradients", "optimizer", "activations"} <= set(mem["formulas"])
        assert bool(got["substitutions"]) == local_spec
    if local_spec:
        subs = results[0]["substitutions"]
        grouped = [s for s in subs if s["field"] == "moe_grouped_gemm"]
        assert grouped and grouped[0]["plan"] is True and grouped[0]["used"] is False
        assert all(set(s) == {"field", "plan", "used", "why"} and s["why"] for s in subs)


def test_dryrun_without_local_spec_is_gated(tmp_path):
    run = run_module("moeforge.runtime.dryrun", str(DATA / "deepseek-v3-pp16-ep8.plan.json"))
    assert run.returncode == 3
    assert "transformer_engine" in run.stderr and "deep_ep" in run.stderr
    assert "--local-spec" in run.stderr and "Traceback" not in run.stderr


def test_plans_with_different_attention_backends_dry_run_in_one_process(tmp_path):
    """GPTModel sets Transformer Engine's NVTE_*_ATTN variables for its attention backend and refuses a process
    whose variables say another: each plan of a multi-plan dry run starts from the environment it was given
    (found dry-running the imported functional tests, which mix unfused and auto attention)."""
    base = json.loads((DATA / "qwen3-30b-a3b-ep8.plan.json").read_text())
    paths = []
    for backend in ("unfused", "auto", "flash"):
        plan = json.loads(json.dumps(base))
        plan["transformer_config"]["attention_backend"] = backend
        paths.append(tmp_path / f"{backend}.plan.json")
        paths[-1].write_text(json.dumps(plan))
    run = run_module("moeforge.runtime.dryrun", *map(str, paths), "--local-spec")
    assert run.returncode == 0, run.output[-4000:]
    assert [p.get("error") for p in json.loads(run.stdout)["plans"]] == [None, None, None]


def test_a_yarn_model_with_context_parallelism_dry_runs(tmp_path):
    """YaRN builds its cos/sin table while GPTModel is built, and with CP > 1 megatron-core picks this CP rank's
    positions through a pinned-memory tensor, which needs a CUDA driver: the CPU stand-ins leave the memory
    unpinned (the dry run failed with "Found no NVIDIA driver"; found dry-running plan-layout winners)."""
    plan = json.loads((DATA / "qwen3-30b-a3b-ep8.plan.json").read_text())
    plan["model"]["position_embedding_type"] = "yarn"
    plan["config_attributes"] = {
        "yarn_rotary_scaling_factor": 4.0, "yarn_original_max_position_embeddings": 4096, "yarn_beta_fast": 32.0,
        "yarn_beta_slow": 1.0, "yarn_mscale": 1.0, "yarn_mscale_all_dim": 0.0, "yarn_correction_range_round_to_int": True}
    plan["transformer_config"]["context_parallel_size"] = 2
    plan["layout"].update(cp=2, dp=4)
    plan["training"]["num_microbatches"] *= 2
    path = tmp_path / "yarn-cp2.plan.json"
    path.write_text(json.dumps(plan))
    run = run_module("moeforge.runtime.dryrun", str(path), "--rank", "0,-1", "--local-spec")
    assert run.returncode == 0, run.output[-4000:]
    ranks = json.loads(run.stdout)["ranks"]
    assert [r["coordinates"]["cp"] for r in ranks] == [0, 1]

