"""Activation memory: what megatron-core 0.19 keeps for backward, per layer and micro-batch, and
how many micro-batches a pipeline schedule holds at its peak.

Why term by term from the source rather than Korthikanti et al. 2022 (arXiv:2205.05198) eq. 2:
that formula assumes a dense MLP over the whole sequence, dropout masks and no flash attention.
An MoE layer keeps the top-k routed copies of the tokens *this rank routes* (the sequence-parallel
shard with SP), MLA's selective recompute frees q/k/v, and dropout is 0 in every tuned recipe.
Each term below names the megatron-core 0.19.2 code that saves the tensor
(megatron/core/... in the .venv312 wheel). Sizes are bytes of bf16 (2 B) unless stated.

Notation: t = seq/cp * mbs tokens of the micro-batch; t_h = t/tp with sequence parallelism (the
[s/tp, b, h] residual stream), else t; a, g, d heads, query groups, head dim; k top-k.
"""
from __future__ import annotations

from moeforge.compiler.knobs import table as K

ACT = 2          # bf16/fp16 activations (params_dtype bfloat16 in every GPU recipe)
FP32 = 4
# EP token imbalance when routing is neither forced balanced nor capped by a capacity factor:
# a stated planning bound (an assumption, not a measurement): the busiest rank's experts receive
# this multiple of the mean token count.
EP_IMBALANCE_BOUND = 1.5


def glu_factor(tc) -> int:
    """How many fc1 halves an MLP has: 2 for a gated linear unit (SwiGLU), else 1."""
    return 2 if tc.get("gated_linear_unit") else 1


def heads(tc: dict) -> tuple[int, int, int, int]:
    """Hidden size, attention heads, head size and query groups, as megatron-core derives the unset ones."""
    return (tc["hidden_size"], tc["num_attention_heads"], K.effective("kv_channels", tc),
            K.effective("num_query_groups", tc))


def attention_bytes(tc: dict, t: int, t_h: float, tp: int, modules: frozenset, linear: bool,
                    scores: float = 0) -> dict:
    """One layer's attention block (with its input norm).  ``scores``: the s x s attention
    probabilities per token and head when the attention is not flash (megatron-core's local
    DotProductAttention saves its softmax output for the bmm with v); 0 with TE."""
    h, a, d, g = heads(tc)
    # input norm: its input and normed output (TELayerNormColumnParallelLinear keeps both for backward;
    # with SP the local [s/tp] shard, gathered again in backward)
    out = {"norm": 2 * ACT * t_h * h}
    if linear:
        # Gated DeltaNet (megatron/core/ssm/gated_delta_net.py): in_proj output (q,k,v,z,b,a), the
        # causal conv output (q,k,v), the chunked delta-rule kernel's q,k,v (normed) and fp32 g/beta,
        # the gated RMSNorm input and the out_proj input.
        qk = tc["linear_key_head_dim"] * tc["linear_num_key_heads"]
        nv, dv = tc["linear_num_value_heads"], tc["linear_value_head_dim"]
        v = nv * dv
        out["in_proj"] = ACT * t * (2 * qk + 2 * v + 2 * nv) / tp
        out["conv_and_kernel"] = 2 * ACT * t * (2 * qk + v) / tp + 2 * FP32 * t * nv / tp
        out["gated_norm_and_proj"] = 3 * ACT * t * v / tp
        return out
    if tc.get("multi_latent_attention"):
        qk, pos, vd = tc["qk_head_dim"], tc["qk_pos_emb_head_dim"], tc["v_head_dim"]
        lora = (tc.get("q_lora_rank") or 0) + tc["kv_lora_rank"] + pos
        # q/kv compressed latents: the up projections' LayerNormLinear input + ln_out
        out["latents"] = 2 * ACT * t_h * lora
        if not tc.get("q_lora_rank") and tc.get("qk_layernorm"):
            # no query LoRA: linear_q_proj is a fused LayerNormLinear over the (already saved) normed
            # hidden states (mla_qk_norm_config.py), whose ln_out is a new tensor
            out["latents"] += ACT * t_h * h
        if "mla_up_proj" not in modules:
            # query, key (qk+pos per head) and value after the fused MLA RoPE, saved by TE attention;
            # recompute "mla_up_proj" discards them (multi_latent_attention.py: qkv_up_checkpoint
            # .discard_output_and_register_recompute(core_attn_out))
            out["qkv"] = ACT * t * a * (2 * (qk + pos) + vd) / tp
        out["core_attn"] = (ACT * t * a * vd + FP32 * t * a + ACT * t * a * scores) / tp  # output + lse
        if "core_attn" in modules:
            out["core_attn"] = (ACT * t * a * vd + FP32 * t * a) / tp
        return out
    q = a * d * (2 if tc.get("attention_output_gate") else 1)
    # linear_qkv output (kept alive by the value view), then q and k after qk-norm/RoPE (new tensors
    # saved by TE DotProductAttention: attention.py get_query_key_value_tensors, fused RoPE)
    out["qkv"] = ACT * t * (q + 2 * g * d) / tp + ACT * t * (a * d + g * d) / tp
    # attention output (shared with linear_proj's saved input) + fp32 softmax lse (flash/cuDNN)
    out["core_attn"] = (ACT * t * a * d + FP32 * t * a + ACT * t * a * scores) / tp
    if tc.get("attention_output_gate"):
        out["core_attn"] += ACT * t * a * d / tp  # the gated output is a second tensor
    if "core_attn" in modules:  # checkpointed: q/k/v are its inputs, the output linear_proj's input
        out["core_attn"] = (ACT * t * a * d + FP32 * t * a) / tp
    return out


def routed_rows(tc: dict, t_h: float, etp: int) -> tuple[float, str]:
    """Token copies the busiest rank's experts process: k per routed token, all-gathered over
    ETP (token_dispatcher.py), times the EP imbalance bound."""
    k = tc["moe_router_topk"]
    if tc.get("moe_router_force_load_balancing"):
        bound, why = 1.0, "forced load balancing"
    elif tc.get("moe_expert_capacity_factor"):
        bound, why = float(tc["moe_expert_capacity_factor"]), "capacity factor"
    else:
        bound, why = EP_IMBALANCE_BOUND, "stated imbalance bound"
    return k * t_h * etp * bound, f"{k} x {t_h:g} tokens x etp {etp} x {bound:g} ({why})"


def mlp_bytes(tc: dict, t: int, t_h: float, tp: int, etp: int, moe: bool, modules: frozenset) -> dict:
    """One layer's MLP or MoE block (with its pre-MLP norm)."""
    h, glu = tc["hidden_size"], glu_factor(tc)
    if not moe:
        f = tc["ffn_hidden_size"]
        if "mlp" in modules:  # transformer_layer.py recompute_mlp: the checkpoint keeps the block input
            return {"norm": ACT * t_h * h}
        # fc1 is TELayerNormColumnParallelLinear (input + ln_out), activation input, fc2 input
        return {"norm": 2 * ACT * t_h * h, "fc": ACT * t * (glu * f + f) / tp}
    if "moe" in modules:  # moe_layer.py moe_layer_recompute: the checkpoint keeps its input
        return {"norm": 2 * ACT * t_h * h}
    # pre_mlp_layernorm (TENorm): input + output (router and shared expert input); recompute
    # "layernorm" discards the output (transformer_layer.py pre_mlp_norm_checkpoint)
    out = {"norm": (1 if "layernorm" in modules else 2) * ACT * t_h * h,
           # router logits and probs (router.py gating: moe_router_dtype, else bf16; fp32 as the bound)
           "router": 2 * FP32 * t_h * tc["num_moe_experts"]}
    rows, _ = routed_rows(tc, t_h, etp)
    f = tc.get("moe_ffn_hidden_size") or tc["ffn_hidden_size"]
    # TEGroupedMLP (experts.py forward): fc1 input (the dispatched tokens), fc1 output (saved by the
    # weighted bias-activation; probs are applied there, so unpermute keeps nothing), fc2 input.
    # recompute "moe_act" (CheckpointWithoutOutput) discards the activation output, not fc1's.
    per_row = h + glu * f / etp + (0 if "moe_act" in modules else f / etp)
    out["experts"] = ACT * rows * per_row + FP32 * rows  # + permuted probs
    fs = tc.get("moe_shared_expert_intermediate_size")
    if fs and "shared_experts" not in modules:
        out["shared_expert"] = ACT * t * (glu * fs + fs) / tp
    return out


def layer_bytes(tc: dict, t: int, t_h: float, tp: int, etp: int, moe: bool, linear: bool,
                recompute: str | None, modules: frozenset, scores: float = 0) -> dict:
    """Bytes one decoder layer keeps for one micro-batch, itemised (``scores``: attention_bytes)."""
    if recompute == "full":  # transformer_block.py _checkpointed_forward: the layer input only
        return {"layer_input": ACT * t_h * tc["hidden_size"]}
    items = {f"attn.{k}": v for k, v in attention_bytes(tc, t, t_h, tp, modules, linear, scores).items()}
    items.update({f"mlp.{k}": v for k, v in mlp_bytes(tc, t, t_h, tp, etp, moe, modules).items()})
    if (tc.get("hidden_dropout") or 0) > 0:  # two bias-dropout-add masks (1 B per element)
        items["dropout_masks"] = 2 * t_h * tc["hidden_size"]
    return items


def logits_bytes(tc: dict, model: dict, t: int, t_h: float, tp: int) -> dict:
    """The output stage: final norm (input + output, the output layer's saved input) and the
    logits the cross-entropy keeps: an fp32 copy (tensor_parallel/cross_entropy.py
    calculate_logits_max: .float(), exp_logits saved for backward), or, with TE's fused
    parallel cross-entropy, the bf16 logits it writes the gradient into."""
    vocab = model["vocab_size"]
    te_ce = tc.get("cross_entropy_loss_fusion") and tc.get("cross_entropy_fusion_impl") == "te"
    return {"final_norm": 2 * ACT * t_h * tc["hidden_size"],
            "logits": (ACT if te_ce else FP32) * t * vocab / tp}


def pipeline_schedule_peak(chunk_bytes: list[float], pp: int, pp_rank: int, vpp: int | None, microbatches: int,
                  combined: bool, layer_peak: float) -> tuple[float, str]:
    """The most activation bytes a pipeline rank holds, walking megatron-core's schedule.

    schedules.py get_pp_rank_microbatches: warm-up forwards = pp-rank-1 (1F1B), or
    (pp-rank-1)*2 + (vpp-1)*pp (interleaved, microbatch_group_size_per_vp_stage = pp; model chunk
    of virtual micro-batch i = (i mod pp*vpp) // pp, reversed for backward), +1 with
    overlap_moe_expert_parallel_comm; then 1F1B steps (a forward, then a backward).  With the
    combined-1F1B EP overlap (combined_1f1b.py) forward and backward of two micro-batches run
    layer by layer together: at most one more layer is held than before the step.  PP=1 without
    overlap: one micro-batch at a time."""
    combined = combined and (pp == 1 or bool(vpp))  # combined 1F1B exists for these two only
    chunks = len(chunk_bytes)
    total = microbatches * chunks
    if pp == 1:
        warmup = 1 if combined else 0
    elif vpp:
        warmup = (pp - pp_rank - 1) * 2 + (vpp - 1) * pp + (1 if combined else 0)
    else:
        warmup = pp - pp_rank - 1
    warmup = min(warmup, total)
    kind = "combined 1F1B" if combined else ("interleaved 1F1B" if vpp and pp > 1 else "1F1B")
    text = f"{kind}: {warmup} warm-up forwards of {total} (chunk, micro-batch) steps"
    if chunks == 1:  # every step adds and frees the same bytes: the walk below, in closed form
        steady = total > warmup
        return (warmup + (steady and not combined)) * chunk_bytes[0] + (layer_peak if combined and steady else 0), text

    def fwd(i):
        return chunk_bytes[(i % (pp * chunks)) // pp]

    def bwd(i):
        return chunk_bytes[chunks - 1 - (i % (pp * chunks)) // pp]

    held = peak = 0.0
    for i in range(warmup):
        held += fwd(i)
        peak = max(peak, held)
    # fwd and bwd repeat every pp*chunks steps and add up to the same over one period, so what is held
    # in the steady state repeats with that period: its peak is reached within the first period.
    for j in range(min(total - warmup, pp * chunks)):
        if combined:
            peak = max(peak, held + layer_peak)
            held += fwd(warmup + j) - bwd(j)
        else:
            held += fwd(warmup + j)
            peak = max(peak, held)
            held -= bwd(j)
    return peak, text
