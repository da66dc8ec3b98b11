"""Training FLOPs per token, counted the way Megatron-LM reports TFLOP/s/GPU.

Megatron-LM's ``num_floating_point_operations`` (megatron/training/training.py, 0.19.2 wheel)
counts 2 FLOPs per multiply-add and 3 GEMMs per weight (forward, backward data gradient,
backward weight gradient): every term below is ``6 x`` the forward multiply-adds per token.
It counts no recompute, no norms, no softmax/activation element-wise work and no router; the
core attention is counted causal (half of QK^T and of PV).  The step-time model uses the same
counts for what a GPU must execute (plus the recomputed forward passes, steptime.py), so the
model FLOPs it reports agree with what a Megatron-LM run logs (tests/data/megatron_flops.json,
recorded from that function by tests/data/gen_megatron_flops.py).

Layer structure (which layers are MoE, which are Gated DeltaNet, which layers a pipeline stage
holds) comes from memory.py: one place.
"""
from __future__ import annotations

from moeforge.compiler.estimate.activations import glu_factor, heads
from moeforge.compiler.estimate.memory import is_linear_attention_layer, is_moe_layer

FWD_BWD = 3  # forward, backward dgrad, backward wgrad (Megatron-LM forward_backward_expansion_factor)
FMA = 2      # one multiply-add is two FLOPs (Megatron-LM fma_expansion_factor)
K = FWD_BWD * FMA


def _linear_attention_megatron(tc: dict, index0: int) -> bool:
    """Megatron-LM's FLOPs pattern over num_layers + MTP layers: 0-based layer i is Gated
    DeltaNet unless (i + 1) % linear_attention_freq == 0.  For decoder layers this is
    memory.is_linear_attention_layer; it also classifies the MTP layers (index >= num_layers)."""
    if index0 < tc["num_layers"]:
        return is_linear_attention_layer(tc, index0 + 1)
    freq = tc.get("linear_attention_freq")
    if tc.get("experimental_attention_variant") != "gated_delta_net" or isinstance(freq, list):
        return False
    return (index0 + 1) % (freq or 1) != 0


def window_keys(tc: dict, number: int, seq: int) -> float | None:
    """Keys a query of 1-based layer ``number`` attends on average when the layer is sliding-window
    (megatron-core transformer/utils.is_layer_window_attention: window_size set, and layer_number %
    window_attn_skip_freq != 0, or the list entry is 1), else None.  With window (left, 0) query i
    sees min(i + 1, left + 1) keys; flash/cuDNN attention skip the tiles outside the window, so the
    executed core attention scales with this mean, not with seq / 2 (Megatron-LM's count ignores it)."""
    window, freq = tc.get("window_size"), tc.get("window_attn_skip_freq")
    if not window:
        return None
    if isinstance(freq, list):
        windowed = bool(freq[number - 1])
    else:
        windowed = freq is None or number % freq != 0
    if not windowed:
        return None
    w = min(int(window[0]) + 1, seq) if int(window[0]) >= 0 else seq
    return w - w * (w - 1) / (2 * seq)  # mean over i of min(i + 1, w)


def attention_flops(tc: dict, seq: int, linear: bool, keys: float | None = None) -> tuple[float, float]:
    """(token-linear projections, core attention) FLOPs per token of one layer's attention.

    The core term is causal over the full sequence ``seq`` (CP splits the work, not the count), or
    over ``keys`` keys per query on average (a sliding-window layer as executed, window_keys)."""
    h = tc["hidden_size"]
    if linear:  # Gated DeltaNet: in_proj, conv1d, the delta rule (4 head-dim^2 products), out_proj
        qk = tc["linear_key_head_dim"] * tc["linear_num_key_heads"]
        nv, dv = tc["linear_num_value_heads"], tc["linear_value_head_dim"]
        v = dv * nv
        return K * (h * (2 * qk + 2 * v + 2 * nv) + tc.get("linear_conv_kernel_dim", 4) * (2 * qk + v)
                    + nv * dv * dv * 4 + h * v), 0.0
    _, a, d, g = heads(tc)
    if tc.get("multi_latent_attention"):
        qk, pos, vd = tc["qk_head_dim"], tc["qk_pos_emb_head_dim"], tc["v_head_dim"]
        qlr, kvlr = tc.get("q_lora_rank"), tc["kv_lora_rank"]
        q = qlr * (h + a * (qk + pos) + 1) if qlr else h * a * (qk + pos)
        proj = q + kvlr * (h + a * (qk + vd) + 1) + h * pos + a * vd * h
        return K * proj, K * (a * (qk + pos) / 2 + a * vd / 2) * seq
    q = a * d
    gate = q if tc.get("attention_output_gate") else 0
    mean_keys = seq / 2 if keys is None else keys
    return K * (h * (q + 2 * g * d + gate) + q * h), K * q * 2 * mean_keys  # QK^T and PV over the keys seen


def ffn_gemms(tc: dict, megatron: bool = True) -> int:
    """h x ffn GEMMs per MLP: fc1 (two with a gated linear unit) and fc2.  Megatron-LM's count
    (``megatron``) knows only --swiglu as gated: a GLU with another activation (gpt-oss's
    quick-GEGLU) is counted as 2 although it executes 3."""
    if megatron:
        return 3 if glu_factor(tc) == 2 and tc.get("activation_func", "silu") == "silu" else 2
    return 1 + glu_factor(tc)


def mlp_flops(tc: dict, moe: bool, megatron: bool = True) -> dict:
    """FLOPs per token of one layer's MLP block: dense MLP, or routed experts (top-k) + shared expert."""
    h, e = tc["hidden_size"], ffn_gemms(tc, megatron)
    if not moe:
        return {"dense_mlp": K * h * tc["ffn_hidden_size"] * e, "experts": 0.0, "shared_expert": 0.0}
    f = tc.get("moe_ffn_hidden_size") or tc["ffn_hidden_size"]
    shared = tc.get("moe_shared_expert_intermediate_size") or 0
    return {"dense_mlp": 0.0, "experts": K * h * f * tc["moe_router_topk"] * e, "shared_expert": K * h * shared * e}


def layer_flops(tc: dict, index0: int, seq: int, megatron: bool = True) -> dict:
    """FLOPs per token of decoder layer ``index0`` (0-based; >= num_layers: an MTP layer, typed
    like Megatron-LM's count: MoE when the last decoder layer is; as executed (not ``megatron``):
    a sliding-window layer's core attention over its window)."""
    moe = is_moe_layer(tc, min(index0, tc["num_layers"] - 1) + 1)
    keys = None if megatron or index0 >= tc["num_layers"] else window_keys(tc, index0 + 1, seq)
    proj, core = attention_flops(tc, seq, _linear_attention_megatron(tc, index0), keys)
    return {"attention": proj, "core_attention": core, **mlp_flops(tc, moe, megatron)}


def logits_flops(tc: dict, vocab: int) -> float:
    """The output layer's FLOPs per token (one per MTP depth too)."""
    return K * tc["hidden_size"] * vocab


def mtp_extra_flops(tc: dict) -> float:
    """An MTP depth's own projection (eh_proj 2h -> h) and norms, per token, as Megatron-LM counts them."""
    h = tc["hidden_size"]
    return K * (3 * h + 2 * h * h)


def _add(total: dict, part: dict) -> None:
    for key, value in part.items():
        total[key] = total.get(key, 0.0) + value


KEYS = ("attention", "core_attention", "dense_mlp", "experts", "shared_expert", "logits", "mtp")


def chunk_flops(tc: dict, vocab: int, seq: int, chunk: dict, megatron: bool = True) -> dict:
    """FLOPs per token of one model chunk (memory.stage_contents): its layers, MTP, output layer
    (``megatron``: Megatron-LM's count; False: the GEMMs as executed, see ffn_gemms)."""
    out = dict.fromkeys(KEYS, 0.0)
    # layers of one kind (MoE or dense, linear or softmax attention, windowed as executed) cost the
    # same: count each kind once
    kinds: dict = {}
    windows = not megatron and bool(tc.get("window_size"))
    for index0 in [n - 1 for n in chunk["layers"]] + [tc["num_layers"] + d for d in range(chunk["mtp"])]:
        windowed = windows and index0 < tc["num_layers"] and window_keys(tc, index0 + 1, seq) is not None
        key = (is_moe_layer(tc, min(index0, tc["num_layers"] - 1) + 1), _linear_attention_megatron(tc, index0),
               windowed)
        first, count = kinds.get(key, (index0, 0))
        kinds[key] = (first, count + 1)
    for first, count in kinds.values():
        _add(out, {k: v * count for k, v in layer_flops(tc, first, seq, megatron).items()})
    out["mtp"] += chunk["mtp"] * (mtp_extra_flops(tc) + logits_flops(tc, vocab))
    if chunk["output"]:
        out["logits"] += logits_flops(tc, vocab)
    return out


def model_flops_per_token(tc: dict, model: dict, seq: int) -> dict:
    """The whole model's training FLOPs per token, by component (Megatron-LM's count)."""
    mtp = tc.get("mtp_num_layers") or 0
    chunk = {"layers": list(range(1, tc["num_layers"] + 1)), "mtp": mtp, "output": True}
    return chunk_flops(tc, model["vocab_size"], seq, chunk)
