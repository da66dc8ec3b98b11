"""Closed-form memory estimate for one rank: weights, gradients, optimizer state, activations.

Why: a dry run builds one rank's shard on the meta device, so the parameter counts are exact but
nothing is allocated; the memory a real step needs is estimated from those counts and the plan.
Every formula is returned next to its number so a reader can check or adjust it; these are
estimates (no allocator fragmentation, no communication buffers, no CUDA context).
"""

from __future__ import annotations

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def weights_and_optimizer(counts: dict, plan_raw: dict, dp: int, edp: int) -> dict:
    tc, ddp = plan_raw["transformer_config"], plan_raw.get("ddp_config") or {}
    opt = plan_raw.get("optimizer") or {}
    pbytes = DTYPE_BYTES[tc.get("params_dtype") or "float32"]
    gbytes = 4 if ddp.get("grad_reduce_in_fp32", pbytes == 4) else pbytes
    non_expert = counts["total"] - counts["expert"]
    expert = counts["expert"]
    # Adam: fp32 exp_avg + exp_avg_sq (8 B) plus an fp32 master copy when params are 16-bit.
    state = 8 + (4 if pbytes < 4 else 0)
    distributed = bool(opt.get("use_distributed_optimizer", ddp.get("use_distributed_optimizer")))
    shard_dp, shard_edp = (dp, edp) if distributed else (1, 1)
    optimizer = state * (non_expert / shard_dp + expert / shard_edp)
    return {
        "weights_bytes": pbytes * counts["total"],
        "weights_formula": f"{pbytes} B/param x {counts['total']} params",
        "gradients_bytes": gbytes * counts["total"],
        "gradients_formula": f"{gbytes} B/param (grad buffer{' in fp32' if gbytes == 4 else ''})"
                             f" x {counts['total']} params",
        "optimizer_bytes": int(optimizer),
        "optimizer_formula": (
            f"{state} B/param (Adam exp_avg+exp_avg_sq fp32"
            f"{' + fp32 master' if pbytes < 4 else ''}) x (non-expert {non_expert} / dp {shard_dp}"
            f" + expert {expert} / edp {shard_edp})"
            + ("  [distributed optimizer]" if distributed else "  [no sharding]")),
    }


def _layer_bytes(tc: dict, s: int, b: int, moe: bool, flash: bool) -> float:
    """Activation bytes one layer keeps for backward, one micro-batch, before TP/CP split."""
    h, a = tc["hidden_size"], tc["num_attention_heads"]
    d = tc.get("kv_channels") or h // a
    g = tc.get("num_query_groups") or a
    glu = 2 if tc.get("gated_linear_unit") else 1
    sbh = s * b * h
    qkv = 2 * s * b * (a * d + 2 * g * d)
    attn = 2 * sbh + 2 * sbh + qkv + 2 * sbh + sbh  # ln in, qkv in, q/k/v, proj in, dropout mask
    attn += (2 * s * b * a * d + 4 * a * s * b) if flash else 5 * a * s * s * b
    if moe:
        k, f = tc["moe_router_topk"], tc.get("moe_ffn_hidden_size") or tc["ffn_hidden_size"]
        mlp = 2 * sbh + 2 * sbh + k * (2 * sbh + 2 * s * b * f * glu + 2 * s * b * f) + sbh
        fs = tc.get("moe_shared_expert_intermediate_size") or 0
        mlp += (2 * sbh + 2 * s * b * fs * glu + 2 * s * b * fs) if fs else 0
    else:
        f = tc["ffn_hidden_size"]
        mlp = 2 * sbh + 2 * sbh + 2 * s * b * f * glu + 2 * s * b * f + sbh
    return attn + mlp


def activations(plan_raw: dict, layer_kinds: list[str], pp_rank: int, has_output: bool) -> dict:
    """Activation estimate for this rank's layers times the micro-batches in flight."""
    tc, tr, layout = plan_raw["transformer_config"], plan_raw["training"], plan_raw["layout"]
    rt = plan_raw.get("runtime") or {}
    s, b = tr["seq_length"], tr["micro_batch_size"]
    tp, cp, pp, ep = layout["tp"], layout["cp"], layout["pp"], layout["ep"]
    flash = rt.get("transformer_impl") == "transformer_engine"
    s_local = s // cp
    if tc.get("recompute_granularity") == "full":
        per_mb = len(layer_kinds) * 2 * s_local * b * tc["hidden_size"] / tp
        how = "full recompute: 2*s*b*h per layer (layer inputs only)"
    else:
        per_mb = sum(_layer_bytes(tc, s_local, b, k == "moe", flash) for k in layer_kinds) / tp
        how = ("per layer: attention 7sbh + 2sb(a*d+2g*d) + "
               + ("flash 2sb*a*d + 4asb" if flash else "5as^2b")
               + "; dense MLP 5sbh + 2sbf*glu + 2sbf; MoE MLP 5sbh + k(2sbh + 2sbf*glu + 2sbf)"
               " (+ shared expert); bf16 = 2 B, masks 1 B; /tp")
    logits = (4 * s_local * b * plan_raw["model"]["vocab_size"] / tp) if has_output else 0
    # The combined-1F1B (EP overlap) schedule runs one micro-batch's forward while another's
    # backward is pending, so it holds one extra micro-batch (chunk) of activations.
    extra = 1 if tc.get("overlap_moe_expert_parallel_comm") else 0
    in_flight = min(tr["num_microbatches"], pp - pp_rank + extra)
    if pp > 1 and layout.get("vpp"):
        # Interleaved warm-up: (pp-rank-1)*2 + (vpp-1)*pp + 1 chunk-micro-batches, each holding
        # 1/vpp of this rank's layers.
        vpp = layout["vpp"]
        virtual = min(tr["num_microbatches"] * vpp,
                      (pp - pp_rank - 1) * 2 + (vpp - 1) * pp + 1 + extra)
        in_flight = virtual / vpp
    total = int((per_mb + logits) * in_flight)
    return {
        "activation_bytes": total,
        "activation_formula": (
            f"({how}) summed over {len(layer_kinds)} local layers "
            f"[{layer_kinds.count('moe')} MoE, {layer_kinds.count('dense')} dense], "
            f"s={s_local} (seq/cp), b={b}, + fp32 logits 4*s*b*V/tp={int(logits)} on the output "
            f"stage; x {in_flight:g} micro-batches in flight (schedule warm-up depth at pp rank "
            f"{pp_rank}{', +1 for combined-1F1B' if extra else ''}); tokens reach experts "
            f"evenly across ep={ep} (balanced routing)"),
    }
