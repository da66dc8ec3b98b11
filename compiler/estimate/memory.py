"""Per-rank memory: parameters, gradients, optimizer state, activations, and a fixed allowance.

Inputs are a plan's ``transformer_config`` and ``model`` sections (megatron-core field names, as
compiler/plan.py writes them) and a compiler/layout.py Layout.  Parameters are counted the way
megatron-core shards them (tensor_parallel ColumnParallelLinear / RowParallelLinear,
VocabParallelEmbedding, MoE experts over EP x ETP), split like runtime/model.count_parameters:
``embedding`` (input embedding and output layer), ``expert`` (routed experts), ``dense`` (the
rest).  Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198), per layer and micro-batch, held for the schedule's
warm-up depth.  Every number is returned with its formula (Estimate.formulas).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..layout import Layout

GIB = 2 ** 30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# CUDA context, NCCL communicators and buffers, cuBLAS/TE workspaces and allocator fragmentation:
# not modelled term by term. A stated allowance, per rank (rough: an H100 CUDA context with
# NCCL and TE is 1-3 GiB in practice; fragmentation of the caching allocator adds more).
ALLOWANCE_BYTES = 5 * GIB


# ------------------------------------------------------------------------ parameters
def _glu(tc) -> int:
    return 2 if tc.get("gated_linear_unit") else 1


def _norm(tc, size: int) -> int:
    """A norm over ``size`` features: RMSNorm has a weight, LayerNorm a weight and a bias."""
    return size * (2 if tc.get("normalization", "LayerNorm") == "LayerNorm" else 1)


def _heads(tc):
    h, a = tc["hidden_size"], tc["num_attention_heads"]
    d = tc.get("kv_channels") or h // a
    g = tc.get("num_query_groups") or a
    return h, a, d, g


def attention_params(tc: dict, tp: int, linear: bool, te: bool = True) -> int:
    """One layer's attention block on one TP rank, with its input norm.

    ``te``: the Transformer Engine spec, where MLA's down projections are TELinear
    (parallel_mode "duplicated": replicated); the local spec builds them as
    ColumnParallelLinear, sharded over TP (megatron-core multi_latent_attention.py)."""
    h = tc["hidden_size"]
    bias = bool(tc.get("add_bias_linear"))
    norm = _norm(tc, h)
    if linear:  # Gated DeltaNet (megatron-core ssm/gated_delta_net)
        qk = tc["linear_key_head_dim"] * tc["linear_num_key_heads"]
        nv, dv = tc["linear_num_value_heads"], tc["linear_value_head_dim"]
        v = dv * nv
        in_proj = h * (2 * qk + 2 * v + 2 * nv) // tp + ((2 * qk + 2 * v + 2 * nv) // tp if bias else 0)
        conv = (2 * qk + v) // tp * tc.get("linear_conv_kernel_dim", 4)
        gates = 2 * nv // tp  # dt_bias, A_log
        out = v // tp * h + (h if bias else 0) + dv  # out_proj (+ bias), out_norm over one head
        return norm + in_proj + conv + gates + out
    _, a, d, g = _heads(tc)
    if tc.get("multi_latent_attention"):
        qk, pos, vd = tc["qk_head_dim"], tc["qk_pos_emb_head_dim"], tc["v_head_dim"]
        qlr, kvlr = tc.get("q_lora_rank"), tc["kv_lora_rank"]
        down = 1 if te else tp
        if qlr:  # down projection (see ``te``), up projection column-parallel, q norm replicated
            q = h * qlr // down + qlr * a * (qk + pos) // tp + _norm(tc, qlr)
        else:
            q = h * a * (qk + pos) // tp
        kv = h * (kvlr + pos) // down + kvlr * a * (qk + vd) // tp + _norm(tc, kvlr)
        return norm + q + kv + a * vd // tp * h + (h if bias else 0)
    q_out = a * d * (2 if tc.get("attention_output_gate") else 1)
    qkv_out = (q_out + 2 * g * d) // tp
    qkv = h * qkv_out + (qkv_out if tc.get("add_qkv_bias") else 0)
    qk_norm = 2 * _norm(tc, d) if tc.get("qk_layernorm") else 0
    sinks = a // tp if tc.get("softmax_type") == "learnable" else 0  # learnable softmax offsets
    return norm + qkv + qk_norm + a * d // tp * h + (h if bias else 0) + sinks


def mlp_params(tc: dict, ffn: int, shard: int) -> int:
    """fc1 (column-parallel, GLU doubles it) + fc2 (row-parallel; its bias is not sharded)."""
    h, glu = tc["hidden_size"], _glu(tc)
    out = h * glu * ffn // shard + ffn // shard * h
    if tc.get("add_bias_linear"):
        out += glu * ffn // shard + h
    return out


def mlp_block_params(tc: dict, moe: bool, tp: int, ep: int, etp: int) -> tuple[int, int]:
    """(dense, expert) of one layer's MLP block with its pre-MLP norm, on one rank."""
    h = tc["hidden_size"]
    if not moe:
        return _norm(tc, h) + mlp_params(tc, tc["ffn_hidden_size"], tp), 0
    experts = tc["num_moe_experts"]
    # pre-MLP norm, router (replicated; a bias with add_bias_linear: moe/router.py)
    dense = _norm(tc, h) + experts * h + (experts if tc.get("add_bias_linear") else 0)
    shared = tc.get("moe_shared_expert_intermediate_size")
    if shared:
        dense += mlp_params(tc, shared, tp) + (h if tc.get("moe_shared_expert_gate") else 0)
    f = tc.get("moe_ffn_hidden_size") or tc["ffn_hidden_size"]
    return dense, experts // ep * mlp_params(tc, f, etp)


def _flag(freq, number: int, default_every: int = 1) -> bool:
    """Is layer ``number`` (1-based) selected by a megatron frequency (int or 0/1 list)?"""
    if isinstance(freq, list):
        return bool(freq[number - 1])
    return (number - 1) % (freq or default_every) == 0


def is_moe_layer(tc: dict, number: int) -> bool:
    return bool(tc.get("num_moe_experts")) and _flag(tc.get("moe_layer_freq", 1), number)


def is_linear_attention_layer(tc: dict, number: int) -> bool:
    """Gated DeltaNet layers: every layer but each linear_attention_freq-th (megatron-core)."""
    if tc.get("experimental_attention_variant") != "gated_delta_net":
        return False
    freq = tc.get("linear_attention_freq")
    if isinstance(freq, list):
        return not freq[number - 1]
    return number % (freq or 1) != 0


def layer_params(tc: dict, number: int, lay: Layout, te: bool = True) -> tuple[int, int]:
    """(dense, expert) parameters of decoder layer ``number`` on one rank."""
    dense, expert = mlp_block_params(tc, is_moe_layer(tc, number), lay.tp, lay.ep, lay.expert_tp)
    return dense + attention_params(tc, lay.tp, is_linear_attention_layer(tc, number), te), expert


_REPEAT = re.compile(r"\(([^()]*)\)\*(\d+)")


def _expand_layout(text: str) -> list[str]:
    """megatron-core PipelineParallelLayerLayout: '|'-separated stages of E (embedding),
    t (decoder layer), m (MTP), L (loss); '(...)*n' and 'x*n' repeat."""
    while _REPEAT.search(text):
        text = _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return text.split("|")


def _virtual_stages(tc: dict, lay: Layout) -> list[str]:
    """The layout as megatron-core builds it: pp*vpp virtual stages in order (stage i is chunk
    i // pp of pipeline rank i % pp), each a string of E/t/m/L like pipeline_model_parallel_layout.

    Without an explicit layout: transformer_block.get_num_layers_to_build - uneven first/last
    stages, or an even split of num_layers (+1 each for account_for_embedding/loss_in_pipeline_split,
    those slots being the embedding and the loss); the embedding on the first virtual stage, MTP
    and the loss on the last."""
    text = tc.get("pipeline_model_parallel_layout")
    if text:
        return _expand_layout(text)
    n, pp, vpp = tc["num_layers"], lay.pp, lay.chunks
    mtp = "m" * (tc.get("mtp_num_layers") or 0)
    first, last = tc.get("num_layers_in_first_pipeline_stage"), tc.get("num_layers_in_last_pipeline_stage")
    if first is not None or last is not None:
        rest = pp - (first is not None) - (last is not None)
        middle = (n - (first or 0) - (last or 0)) // rest if rest else 0
        per_rank = [middle] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        counts = [per_rank[i % pp] // vpp for i in range(pp * vpp)]
        stages = ["t" * c for c in counts]
    else:
        emb = bool(tc.get("account_for_embedding_in_pipeline_split"))
        loss = bool(tc.get("account_for_loss_in_pipeline_split"))
        per = (n + emb + loss) // (pp * vpp)
        stages = ["t" * per for _ in range(pp * vpp)]
        if emb:
            stages[0] = stages[0][1:]
        if loss:
            stages[-1] = stages[-1][1:]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + mtp + "L"
    return stages


def stage_contents(tc: dict, lay: Layout, pp_rank: int) -> list[dict]:
    """Per model chunk on a pipeline rank: decoder layer numbers, MTP, embedding, output."""
    stages = _virtual_stages(tc, lay)
    starts, count = [], 0
    for s in stages:
        starts.append(count)
        count += s.count("t")
    chunks = []
    for i in range(pp_rank, len(stages), lay.pp):
        s = stages[i]
        chunks.append({"layers": list(range(starts[i] + 1, starts[i] + s.count("t") + 1)),
                       "mtp": s.count("m"), "embedding": "E" in s, "output": "L" in s})
    return chunks


def rank_parameters(tc: dict, model: dict, lay: Layout, pp_rank: int, te: bool = True) -> dict:
    """Parameters on one rank of pipeline stage ``pp_rank``: total, dense, expert, embedding
    (``te``: the Transformer Engine layer spec; False: megatron-core's local spec)."""
    h, vocab, tp = tc["hidden_size"], model["vocab_size"], lay.tp
    tied = bool(model.get("share_embeddings_and_output_weights"))
    table = vocab // tp * h
    dense = expert = embedding = 0
    chunks = stage_contents(tc, lay, pp_rank)
    for chunk in chunks:
        for number in chunk["layers"]:
            d, e = layer_params(tc, number, lay, te)
            dense, expert = dense + d, expert + e
        if chunk["embedding"]:
            embedding += table
        # the decoder's final norm: on the output stage, or with MTP on the stage holding the last
        # decoder layer (transformer_block.has_final_layernorm_in_this_stage)
        if (tc["num_layers"] in chunk["layers"]) if tc.get("mtp_num_layers") else chunk["output"]:
            dense += _norm(tc, h)
        if chunk["output"]:
            if not (tied and chunk["embedding"]):
                embedding += table  # output layer (a copy on the last stage when tied and PP > 1)
        for _ in range(chunk["mtp"]):
            # enorm, hnorm, eh_proj (2h -> h, column-parallel), one decoder layer, final norm
            d, e = layer_params(tc, tc["num_layers"], lay, te)
            dense += 3 * _norm(tc, h) + 2 * h * h // tp + d
            expert += e
        if chunk["mtp"] and not chunk["embedding"]:
            embedding += table  # MTP embeds the shifted tokens on the last stage
    return {"total": dense + expert + embedding, "dense": dense, "expert": expert, "embedding": embedding,
            "decoder_layers": [n for c in chunks for n in c["layers"]],
            "mtp_layers": sum(c["mtp"] for c in chunks)}


# ------------------------------------------------------------------------ memory
@dataclass
class Estimate:
    """One rank's memory, in bytes, with the formula of every term."""

    parameters: dict
    weights: int
    gradients: int
    optimizer: int
    activations: int
    allowance: int
    formulas: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.allowance

    def headroom(self, capacity_bytes: int) -> int:
        return capacity_bytes - self.total


def states(counts: dict, plan: dict, lay: Layout) -> tuple[int, int, int, dict]:
    """Weights, gradients and Adam state; the distributed optimizer shards the state of non-expert
    parameters over DP and of expert parameters over expert-DP (megatron-core DistributedOptimizer)."""
    tc, ddp, opt = plan["transformer_config"], plan.get("ddp_config") or {}, plan.get("optimizer") or {}
    pbytes = DTYPE_BYTES[tc.get("params_dtype") or "float32"]
    gbytes = 4 if ddp.get("grad_reduce_in_fp32", pbytes == 4) else pbytes
    state = 8 + (4 if pbytes < 4 else 0)  # exp_avg, exp_avg_sq (fp32) + fp32 master for 16-bit
    total, expert = counts["total"], counts["expert"]
    distributed = bool(opt.get("use_distributed_optimizer", ddp.get("use_distributed_optimizer")))
    dp, edp = (lay.dp, lay.edp) if distributed else (1, 1)
    optimizer = int(state * ((total - expert) / dp + expert / edp))
    return pbytes * total, gbytes * total, optimizer, {
        "weights": f"{pbytes} B x {total} params",
        "gradients": f"{gbytes} B x {total} params (grad buffer)",
        "optimizer": f"{state} B x (non-expert {total - expert} / dp {dp} + expert {expert} / edp {edp})"}


def layer_activation_bytes(tc: dict, s: int, b: int, lay: Layout, moe: bool, sp: bool, flash: bool,
                           recompute: str | None, modules: frozenset) -> float:
    """Bytes one layer keeps for backward for one micro-batch of s (= seq/cp) tokens, on one rank.

    Korthikanti et al. 2022, eq. 2 with flash attention (no s^2 score/softmax terms) and GQA:
    attention 2sbh (LN in) + 2sb(q+k+v) + 2sbh (proj in) + sbh (dropout mask); MLP
    2sbh (LN in) + 2sbh (fc1 in) + 2sbf*glu (act in) + 2sbf (fc2 in) + sbh (mask); MoE: the
    fc-side terms for top-k routed copies spread evenly over EP, plus the shared expert.
    TP divides the per-head/ffn terms; SP divides the sbh terms by TP too.  Full recompute
    keeps only the layer input (2sbh).  Selective recompute drops the modules it names.
    """
    h, a, d, g = _heads(tc)
    tp, glu = lay.tp, _glu(tc)
    if recompute == "full":
        return 2 * s * b * h / (tp if sp else 1)
    sbh_div = tp if sp else 1
    sbh = s * b * h
    if tc.get("multi_latent_attention"):
        qkv = 2 * s * b * a * (tc["qk_head_dim"] + tc["qk_pos_emb_head_dim"]) * 2 + 2 * s * b * a * tc["v_head_dim"]
    else:
        qkv = 2 * s * b * (a * d + 2 * g * d)
    attn = (2 * sbh + 2 * sbh + sbh) / sbh_div + qkv / tp
    attn += (2 * s * b * a * d + 4 * a * s * b) / tp if flash else 5 * a * s * s * b / tp
    if "core_attn" in modules:
        attn -= (2 * s * b * a * d + 4 * a * s * b) / tp if flash else 5 * a * s * s * b / tp
    if not moe:
        f = tc["ffn_hidden_size"]
        mlp = 5 * sbh / sbh_div + (2 * s * b * f * glu + 2 * s * b * f) / tp
    else:
        k = tc["moe_router_topk"]
        f = tc.get("moe_ffn_hidden_size") or tc["ffn_hidden_size"]
        routed = k * (2 * sbh + 2 * s * b * f * glu + 2 * s * b * f) / lay.expert_tp
        if "moe_act" in modules:
            routed -= k * 2 * s * b * f * glu / lay.expert_tp
        mlp = 5 * sbh / sbh_div + routed
        fs = tc.get("moe_shared_expert_intermediate_size") or 0
        if fs:
            mlp += (2 * s * b * fs * glu + 2 * s * b * fs) / tp
    if "layernorm" in modules:
        attn -= 2 * sbh / sbh_div
        mlp -= 2 * sbh / sbh_div
    return attn + mlp


def in_flight(lay: Layout, pp_rank: int, microbatches: int, combined: bool) -> float:
    """Micro-batches whose activations a pipeline rank holds at the peak (1F1B warm-up depth).

    1F1B: pp - rank; interleaved: ((pp-rank-1)*2 + (vpp-1)*pp + 1) chunk-micro-batches of 1/vpp of
    the layers (megatron-core schedules.get_pp_rank_microbatches); combined-1F1B (EP overlap) holds
    one more. Never more than the micro-batches there are."""
    extra = 1 if combined else 0
    if lay.pp > 1 and lay.vpp:
        return min(microbatches * lay.vpp, (lay.pp - pp_rank - 1) * 2 + (lay.vpp - 1) * lay.pp + 1 + extra) / lay.vpp
    return min(microbatches, lay.pp - pp_rank + extra)


def estimate(plan: dict, lay: Layout | None = None, pp_rank: int = 0) -> Estimate:
    """One rank's memory for a compiled plan (its layout unless ``lay`` is given)."""
    tc, model, tr = plan["transformer_config"], plan["model"], plan["training"]
    lay = lay or Layout.from_plan(plan["layout"])
    te = (plan.get("runtime") or {}).get("transformer_impl") == "transformer_engine"
    counts = rank_parameters(tc, model, lay, pp_rank, te)
    weights, grads, opt, formulas = states(counts, plan, lay)
    s, b = tr["seq_length"] // lay.cp, tr["micro_batch_size"]
    sp = bool(tc.get("sequence_parallel")) or lay.tp == 1
    flash = (plan.get("runtime") or {}).get("transformer_impl") == "transformer_engine"
    recompute = tc.get("recompute_granularity")
    modules = frozenset(tc.get("recompute_modules") or ()) if recompute == "selective" else frozenset()
    per_mb = sum(layer_activation_bytes(tc, s, b, lay, is_moe_layer(tc, n), sp, flash, recompute, modules)
                 for n in counts["decoder_layers"])
    chunks = stage_contents(tc, lay, pp_rank)
    if any(c["output"] for c in chunks):
        per_mb += 4 * s * b * model["vocab_size"] / lay.tp  # fp32 logits
    depth = in_flight(lay, pp_rank, tr["num_microbatches"], bool(tc.get("overlap_moe_expert_parallel_comm")))
    activations = int(per_mb * depth)
    formulas["activations"] = (f"{per_mb:.0f} B per micro-batch ({len(counts['decoder_layers'])} layers, "
                               f"s={s}, b={b}, recompute={recompute}) x {depth:g} in flight")
    formulas["allowance"] = "CUDA context, NCCL, workspaces, fragmentation (stated allowance)"
    return Estimate(counts, weights, grads, opt, activations, ALLOWANCE_BYTES, formulas)


def peak(plan: dict, lay: Layout | None = None) -> tuple[Estimate, int]:
    """The largest per-rank estimate over pipeline stages, and its stage (ranks of one stage hold the
    same shard up to TP/EP symmetry): what must fit on every GPU."""
    lay = lay or Layout.from_plan(plan["layout"])
    return max(((estimate(plan, lay, r), r) for r in range(lay.pp)), key=lambda e: e[0].total)
