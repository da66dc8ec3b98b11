"""Per-rank memory: parameters, gradients, optimizer state, activations, and a fixed allowance.

Inputs are a plan's ``transformer_config`` and ``model`` sections (megatron-core field names, as
compiler/targets/plan.py writes them) and a compiler/knobs/layout.py Layout.  Parameters are counted the way
megatron-core shards them (tensor_parallel ColumnParallelLinear / RowParallelLinear,
VocabParallelEmbedding, MoE experts over EP x ETP), split like runtime/model/build.count_parameters:
``embedding`` (input embedding and output layer), ``expert`` (routed experts), ``dense`` (the
rest).  Activations are what megatron-core 0.19 keeps for backward, term by term
(compiler/estimate/activations.py), walked through the pipeline schedule.  Every number is
returned with its formula (Estimate.formulas); docs/memory-model.md has the calibration against a
measured run and the comparison with Megatron-LM's theoretical_memory_usage.py.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from moeforge.compiler.knobs import pipeline_layout
from moeforge.compiler.knobs.layer_pattern import linear_attention_layer, moe_layer
from moeforge.compiler.knobs.layout import Layout
from moeforge.compiler.knobs.versions import megatron_core_release, version_int
from moeforge.compiler.estimate import activations as A
from moeforge.compiler.estimate import calibration as calib

GIB = 2 ** 30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Memory torch.cuda.max_memory_allocated does not see, per rank: the CUDA context and loaded
# kernels (~0.5-1 GiB on H100), NCCL communicator buffers (NCCL_BUFFSIZE 4 MiB per channel and
# peer: EP and DP groups span nodes), cuBLAS/TE workspaces and caching-allocator fragmentation
# (reduced, not removed, by PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which the
# Megatron-Bridge perf recipes set, e.g. perf_recipes/qwen/h100/qwen3_moe.py).  A stated allowance, not a measurement: the calibration run
# reported only allocated memory (docs/memory-model.md).
ALLOWANCE_BYTES = 5 * GIB
ALLOWANCE_FORMULA = ("5 GiB stated allowance: CUDA context, NCCL buffers, cuBLAS/TE workspaces, "
                     "allocator fragmentation (not in torch.cuda.max_memory_allocated)")


# ------------------------------------------------------------------------ parameters
def _norm(tc, size: int) -> int:
    """A norm over ``size`` features: RMSNorm has a weight, LayerNorm a weight and a bias."""
    return size * (2 if tc.get("normalization", "LayerNorm") == "LayerNorm" else 1)


def attention_params(tc: dict, tp: int, linear: bool, te: bool = True, query_norm: bool = True) -> int:
    """One layer's attention block on one TP rank, with its input norm.

    ``te``: the Transformer Engine spec, where MLA's down projections are TELinear
    (parallel_mode "duplicated": replicated); the local spec builds them as
    ColumnParallelLinear, sharded over TP (megatron-core multi_latent_attention.py).
    ``query_norm``: MLA with qk_layernorm and no query LoRA norms the hidden states again in a fused
    norm + linear_q_proj (megatron-core 0.19+, ``fuses_mla_query_norm``)."""
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
        # out_proj (+ bias), out_norm over one head (config.normalization: a LayerNorm has a bias too)
        out = v // tp * h + (h if bias else 0) + _norm(tc, dv)
        return norm + in_proj + conv + gates + out
    _, a, d, g = A.heads(tc)
    if tc.get("multi_latent_attention"):
        qk, pos, vd = tc["qk_head_dim"], tc["qk_pos_emb_head_dim"], tc["v_head_dim"]
        qlr, kvlr = tc.get("q_lora_rank"), tc["kv_lora_rank"]
        down = 1 if te else tp
        # the q and kv latent norms (replicated) exist with qk_layernorm only (gpt_layer_specs: IdentityOp else)
        latent_norms = bool(tc.get("qk_layernorm"))
        if qlr:  # down projection (see ``te``), up projection column-parallel
            q = h * qlr // down + qlr * a * (qk + pos) // tp + (_norm(tc, qlr) if latent_norms else 0)
        else:
            q = h * a * (qk + pos) // tp + (_norm(tc, h) if latent_norms and query_norm else 0)
        kv = h * (kvlr + pos) // down + kvlr * a * (qk + vd) // tp + (_norm(tc, kvlr) if latent_norms else 0)
        return norm + q + kv + a * vd // tp * h + (h if bias else 0)
    q_out = a * d * (2 if tc.get("attention_output_gate") else 1)
    qkv_out = (q_out + 2 * g * d) // tp
    qkv = h * qkv_out + (qkv_out if tc.get("add_qkv_bias") else 0)
    qk_norm = 2 * _norm(tc, d) if tc.get("qk_layernorm") else 0
    sinks = a // tp if tc.get("softmax_type") == "learnable" else 0  # learnable softmax offsets
    return norm + qkv + qk_norm + a * d // tp * h + (h if bias else 0) + sinks


def mlp_params(tc: dict, ffn: int, shard: int) -> int:
    """fc1 (column-parallel, GLU doubles it) + fc2 (row-parallel; its bias is not sharded)."""
    h, glu = tc["hidden_size"], A.glu_factor(tc)
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


def is_moe_layer(tc: dict, number: int) -> bool:
    """Is decoder layer ``number`` (1-based) an MoE layer, by moe_layer_freq; a model without experts has none."""
    return bool(tc.get("num_moe_experts")) and moe_layer(tc.get("moe_layer_freq", 1), number)


def is_linear_attention_layer(tc: dict, number: int) -> bool:
    """Is decoder layer ``number`` (1-based) a linear-attention layer, by the attention variant and its frequency."""
    return linear_attention_layer(tc.get("experimental_attention_variant"), tc.get("linear_attention_freq"), number)


def layer_kinds(tc: dict) -> tuple[tuple[bool, bool], ...]:
    """(MoE, linear attention) of decoder layers 1..num_layers, at index number - 1: layers of one kind
    hold and keep the same, so per-rank sums count each kind once."""
    def hashable(v):
        return tuple(v) if isinstance(v, list) else v
    return _layer_kinds(tc["num_layers"], bool(tc.get("num_moe_experts")), hashable(tc.get("moe_layer_freq", 1)),
                        tc.get("experimental_attention_variant"), hashable(tc.get("linear_attention_freq")))


@functools.lru_cache(maxsize=256)
def _layer_kinds(n, moe, moe_freq, variant, linear_freq) -> tuple[tuple[bool, bool], ...]:
    tc = {"num_moe_experts": moe, "experimental_attention_variant": variant,
          "moe_layer_freq": list(moe_freq) if isinstance(moe_freq, tuple) else moe_freq,
          "linear_attention_freq": list(linear_freq) if isinstance(linear_freq, tuple) else linear_freq}
    return tuple((is_moe_layer(tc, k), is_linear_attention_layer(tc, k)) for k in range(1, n + 1))


def _kind_counts(kinds: tuple, layers: range) -> dict:
    """How many of the chunk's decoder layers are of each kind, by first appearance."""
    counts: dict = {}
    for kind in kinds[layers.start - 1:layers.stop - 1]:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def kind_params(tc: dict, kind: tuple[bool, bool], lay: Layout, te: bool = True,
                query_norm: bool = True) -> tuple[int, int]:
    """(dense, expert) parameters on one rank of a decoder layer of ``kind`` (layer_kinds)."""
    moe, linear = kind
    dense, expert = mlp_block_params(tc, moe, lay.tp, lay.ep, lay.expert_tp)
    return dense + attention_params(tc, lay.tp, linear, te, query_norm), expert


def _virtual_stages(tc: dict, lay: Layout) -> tuple[str, ...]:
    """The layout as megatron-core builds it: pp*vpp virtual stages in order (stage i is chunk
    i // pp of pipeline rank i % pp), each a string of E/t/m/L like pipeline_model_parallel_layout.

    Without an explicit layout: transformer_block.get_num_layers_to_build - uneven first/last
    stages, or an even split of num_layers (+1 each for account_for_embedding/loss_in_pipeline_split,
    those slots being the embedding and the loss); the embedding on the first virtual stage, MTP
    and the loss on the last."""
    return _split(tc.get("pipeline_model_parallel_layout"), tc["num_layers"], tc.get("mtp_num_layers") or 0,
                  tc.get("num_layers_in_first_pipeline_stage"), tc.get("num_layers_in_last_pipeline_stage"),
                  bool(tc.get("account_for_embedding_in_pipeline_split")),
                  bool(tc.get("account_for_loss_in_pipeline_split")), lay.pp, lay.chunks)


@functools.lru_cache(maxsize=1024)
def _split(text, n, mtp_layers, first, last, emb, loss, pp, vpp) -> tuple[str, ...]:
    """_virtual_stages from the fields that decide it (hashable: cached per layout)."""
    if text:
        return tuple(pipeline_layout.stages(text))
    mtp = "m" * mtp_layers
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
        per = (n + emb + loss) // (pp * vpp)
        stages = ["t" * per for _ in range(pp * vpp)]
        if emb:
            stages[0] = stages[0][1:]
        if loss:
            stages[-1] = stages[-1][1:]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + mtp + "L"
    return tuple(stages)


def stage_contents(tc: dict, lay: Layout, pp_rank: int) -> tuple[Mapping, ...]:
    """Per model chunk on a pipeline rank: decoder layer numbers, MTP, embedding, output (read-only:
    cached, as the planner asks for every rank of tens of thousands of candidates)."""
    return _contents(_virtual_stages(tc, lay), lay.pp, pp_rank)


@functools.lru_cache(maxsize=4096)
def _contents(stages: tuple[str, ...], pp: int, pp_rank: int) -> tuple[Mapping, ...]:
    starts, count = [], 0
    for s in stages:
        starts.append(count)
        count += s.count("t")
    return tuple(MappingProxyType({"layers": range(starts[i] + 1, starts[i] + stages[i].count("t") + 1),
                                   "mtp": stages[i].count("m"), "embedding": "E" in stages[i],
                                   "output": "L" in stages[i]})
                 for i in range(pp_rank, len(stages), pp))


def rank_parameters(tc: dict, model: dict, lay: Layout, pp_rank: int, te: bool = True,
                    query_norm: bool = True) -> dict:
    """Parameters on one rank of pipeline stage ``pp_rank``: total, dense, expert, embedding
    (``te``: the Transformer Engine layer spec; False: megatron-core's local spec; ``query_norm``:
    see attention_params)."""
    h, vocab, tp = tc["hidden_size"], model["vocab_size"], lay.tp
    tied = bool(model.get("share_embeddings_and_output_weights"))
    table = vocab // tp * h
    # learned absolute positions: a torch.nn.Embedding beside the word table, replicated over TP
    # (LanguageModelEmbedding), wherever GPTModel builds the embedding (first stage, MTP's stage)
    positions = model["max_sequence_length"] * h if model.get("position_embedding_type") == "learned_absolute" else 0
    dense = expert = embedding = 0
    chunks = stage_contents(tc, lay, pp_rank)
    kinds, held = layer_kinds(tc), {}
    for chunk in chunks:
        for kind, count in _kind_counts(kinds, chunk["layers"]).items():
            if kind not in held:
                held[kind] = kind_params(tc, kind, lay, te, query_norm)
            dense, expert = dense + count * held[kind][0], expert + count * held[kind][1]
        if chunk["embedding"]:
            embedding += table + positions
        # the decoder's final norm: on the output stage, or with MTP on the stage holding the last
        # decoder layer (transformer_block.has_final_layernorm_in_this_stage)
        if (tc["num_layers"] in chunk["layers"]) if tc.get("mtp_num_layers") else chunk["output"]:
            dense += _norm(tc, h)
        if chunk["output"]:
            if not (tied and chunk["embedding"]):
                embedding += table  # output layer (a copy on the last stage when tied and PP > 1)
        for _ in range(chunk["mtp"]):
            # enorm, hnorm, eh_proj (2h -> h, column-parallel), one decoder layer, final norm
            d, e = kind_params(tc, kinds[-1], lay, te, query_norm)
            dense += 3 * _norm(tc, h) + 2 * h * h // tp + d
            expert += e
        if chunk["mtp"] and not chunk["embedding"]:
            embedding += table + positions  # MTP embeds the shifted tokens on the last stage
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
    activation_items: dict = field(default_factory=dict)  # bytes per micro-batch, summed over the stage

    @property
    def total(self) -> int:
        """Bytes the rank needs, allowance included: what the planner compares with the GPU's capacity."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.allowance

    @property
    def allocated(self) -> int:
        """What torch.cuda.max_memory_allocated can see: everything but the allowance."""
        return self.total - self.allowance

    def breakdown(self) -> dict:
        """name -> bytes, the five terms first, then the activation items per micro-batch."""
        out = {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
               "activations": self.activations, "allowance": self.allowance}
        out.update({f"activations/mb.{k}": v for k, v in self.activation_items.items()})
        return out

def state_bytes_per_param(plan: dict) -> int:
    """Adam's exp_avg, exp_avg_sq and, for 16-bit weights, the master copy: FP32 unless the precision-aware
    optimizer keeps them lower (plan.optimizer *_dtype): 12 B for BF16 weights."""
    opt = plan.get("optimizer") or {}
    moments = sum(DTYPE_BYTES[opt.get(f"{m}_dtype") or "float32"] for m in ("exp_avg", "exp_avg_sq"))
    pbytes = DTYPE_BYTES[plan["transformer_config"].get("params_dtype") or "float32"]
    return moments + (DTYPE_BYTES[opt.get("main_params_dtype") or "float32"] if pbytes < 4 else 0)


def states(counts: dict, plan: dict, lay: Layout) -> tuple[int, int, int, dict]:
    """Weights, gradients and Adam state; the distributed optimizer shards the state of non-expert
    parameters over DP and of expert parameters over expert-DP (megatron-core DistributedOptimizer)."""
    tc, ddp, opt = plan["transformer_config"], plan.get("ddp_config") or {}, plan.get("optimizer") or {}
    pbytes = DTYPE_BYTES[tc.get("params_dtype") or "float32"]
    gbytes = 4 if ddp.get("grad_reduce_in_fp32", pbytes == 4) else pbytes
    state = state_bytes_per_param(plan)
    total, expert = counts["total"], counts["expert"]
    distributed = bool(opt.get("use_distributed_optimizer", ddp.get("use_distributed_optimizer")))
    dp, edp = (lay.dp, lay.edp) if distributed else (1, 1)
    optimizer = int(state * ((total - expert) / dp + expert / edp))
    return pbytes * total, gbytes * total, optimizer, {
        "weights": f"{pbytes} B x {total} params",
        "gradients": f"{gbytes} B x {total} params (grad buffer)",
        "optimizer": f"{state} B x (non-expert {total - expert} / dp {dp} + expert {expert} / edp {edp})"}


def capacity_bytes(plan: dict) -> int:
    """A GPU's memory as the estimate is compared with it: platform gpu.memory_gb read as GiB.
    Vendors' HBM "GB" are close to binary units (H100 80 GB: nvidia-smi reports 81559 MiB =
    79.6 GiB); the few hundred MiB below memory_gb GiB are inside the allowance."""
    return int(plan["platform"]["gpu"]["memory_gb"] * GIB)


def builds_te(plan: dict) -> bool:
    """Whether the runtime builds the Transformer Engine layer spec (else megatron-core's local spec)."""
    return (plan.get("runtime") or {}).get("transformer_impl") == "transformer_engine"


def fuses_mla_query_norm(plan: dict) -> bool:
    """Whether the plan's megatron-core resolves MLA's query norm without a query LoRA into a fused
    norm + linear_q_proj (0.19+, transformer/mla_qk_norm_config.py; 0.16 builds no query norm then).
    A plan that names no release is taken as the newest, the one the estimates follow."""
    version = megatron_core_release(plan)
    return version is None or version_int(version) >= version_int("0.19")


def activation_bytes(plan: dict, lay: Layout, pp_rank: int) -> tuple[int, dict, str]:
    """Peak activation bytes on a rank of pipeline stage ``pp_rank`` (compiler/estimate/
    activations.py): every model chunk's per-micro-batch bytes (its decoder layers, MTP layers,
    the output stage's final norm and logits), walked through the pipeline schedule, plus the
    backward working set (the gradients of one layer's activations, alive next to them)."""
    tc, model, tr = plan["transformer_config"], plan["model"], plan["training"]
    t = tr["seq_length"] // lay.cp * tr["micro_batch_size"]
    sp = bool(tc.get("sequence_parallel"))
    t_h = t / lay.tp if sp else t
    recompute = tc.get("recompute_granularity")
    modules = frozenset(tc.get("recompute_modules") or ()) if recompute == "selective" else frozenset()
    # without Transformer Engine (the CPU platform's local spec) attention is not flash: s x s scores
    scores = 0 if builds_te(plan) else tr["seq_length"] // lay.cp
    items: dict = {}
    kinds, kept = layer_kinds(tc), {}

    def layers(kind, count: int) -> float:
        """Bytes ``count`` layers of ``kind`` keep (each the same), added to the items."""
        if kind not in kept:
            parts = A.layer_bytes(tc, t, t_h, lay.tp, lay.expert_tp, *kind, recompute, modules, scores)
            kept[kind] = parts, sum(parts.values())
        parts, size = kept[kind]
        for k, v in parts.items():
            items[k] = items.get(k, 0) + count * v
        return size

    chunk_bytes, layer_peak, output = [], 0.0, {}
    for chunk in stage_contents(tc, lay, pp_rank):
        sizes = [(layers(kind, count), count) for kind, count in _kind_counts(kinds, chunk["layers"]).items()]
        for _ in range(chunk["mtp"]):  # an MTP layer: enorm, hnorm, eh_proj inputs + one decoder layer
            mtp_inputs = 5 * A.ACT * t_h * tc["hidden_size"]
            items["mtp.inputs"] = items.get("mtp.inputs", 0) + mtp_inputs
            sizes.append((layers(kinds[-1], 1) + mtp_inputs, 1))
        extra = 0.0
        if chunk["output"]:
            output = A.logits_bytes(tc, model, t, t_h, lay.tp)
            extra = sum(output.values()) * (1 + chunk["mtp"])  # MTP computes its own logits
        layer_peak = max([layer_peak, *(size for size, _ in sizes)])
        chunk_bytes.append(sum(size * count for size, count in sizes) + extra)
    held, pp_schedule = A.pipeline_schedule_peak(chunk_bytes, lay.pp, pp_rank, lay.vpp, tr["num_microbatches"],
                                     bool(tc.get("overlap_moe_expert_parallel_comm")), layer_peak)
    total = int(held + layer_peak)
    formula = (f"schedule peak {held / GIB:.2f} GiB ({pp_schedule}; per micro-batch per chunk "
               f"{[round(c / GIB, 3) for c in chunk_bytes]} GiB, t={t}, t_h={t_h:g}, recompute={recompute}"
               f"{'/' + ','.join(sorted(modules)) if modules else ''}) + backward working set "
               f"{layer_peak / GIB:.2f} GiB (the largest layer)")
    per_mb = {k: int(v) for k, v in sorted(items.items())}  # summed over the stage's layers
    per_mb.update({f"output.{k}": int(v) for k, v in output.items()})
    return total, per_mb, formula


def rank_states(plan: dict, lay: Layout, pp_rank: int, te: bool | None = None) -> tuple:
    """A rank's parameters, and the bytes of its weights, gradients and optimizer state with their
    formulas: what its memory holds whatever the recompute, micro-batch size, dispatcher or overlap."""
    te = builds_te(plan) if te is None else te
    counts = rank_parameters(plan["transformer_config"], plan["model"], lay, pp_rank, te,
                             fuses_mla_query_norm(plan))
    return (counts, *states(counts, plan, lay))


def estimate(plan: dict, lay: Layout | None = None, pp_rank: int = 0, te: bool | None = None,
             state: tuple | None = None, calibration: calib.Calibration | None = None) -> Estimate:
    """One rank's memory for a compiled plan (its layout unless ``lay`` is given; its layer spec unless
    ``te`` says which one was built; ``state``: its rank_states, when already known; ``calibration``: the
    activation scale and allowance fitted to measured peaks, else the active one, else the fixed terms)."""
    lay = lay or Layout.from_plan(plan["layout"])
    counts, weights, grads, opt, formulas = state or rank_states(plan, lay, pp_rank, te)
    activations, per_mb, activation_formula = activation_bytes(plan, lay, pp_rank)
    cal = calib.resolve(plan, calibration)
    allowance, allowance_formula = ALLOWANCE_BYTES, ALLOWANCE_FORMULA
    if cal is not None and cal.memory:
        k = calib.memory_constants(cal, ALLOWANCE_BYTES)
        if k["activation_scale"] != 1.0:
            activation_formula = f"{k['activation_scale']:.4g} x ({activation_formula}) ({cal.source})"
            activations = int(activations * k["activation_scale"])
        if k["allowance_bytes"] != ALLOWANCE_BYTES:
            allowance = int(k["allowance_bytes"])
            allowance_formula = f"{allowance / GIB:.3g} GiB fitted to measured peaks ({cal.source})"
    formulas = {**formulas, "activations": activation_formula, "allowance": allowance_formula}
    return Estimate(counts, weights, grads, opt, activations, allowance, formulas, per_mb)


def peak(plan: dict, lay: Layout | None = None, states_by_rank: dict | None = None,
         calibration: calib.Calibration | None = None) -> tuple[Estimate, int]:
    """The largest per-rank estimate over pipeline stages, and its stage (ranks of one stage hold the
    same shard up to TP/EP symmetry): what must fit on every GPU.  ``states_by_rank``: pipeline rank ->
    rank_states, filled as computed; the planner shares one across the candidates of a layout."""
    lay = lay or Layout.from_plan(plan["layout"])
    states_by_rank = {} if states_by_rank is None else states_by_rank
    for r in range(lay.pp):
        if r not in states_by_rank:
            states_by_rank[r] = rank_states(plan, lay, r)
    return max(((estimate(plan, lay, r, state=states_by_rank[r], calibration=calibration), r)
                for r in range(lay.pp)),
               key=lambda e: e[0].total)
