"""``--local-spec``: build a plan's architecture without Transformer Engine and friends.

Why: parameter counts and memory should not need the backends a plan will train with.  Two
layers of mapping, neither of which changes a parameter shape: ``substitute_local`` maps plan
values that only Transformer Engine, DeepEP/HybridEP, grouped_gemm or APEX's CUDA extensions
can build to ones megatron-core's local spec builds; the spec stand-ins (``spec_hook``,
``local_backend``, ``construction_stand_ins``) replace the modules the local spec names but
cannot construct for this plan.  Every mapping is recorded as a substitution
{field, plan, used, why} for the dry-run report.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib.util

from ..plan import document as plan_mod

NO_PARAMETERS = "holds no parameters, so the counts are those of the planned model"


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _sub(subs: list, field: str, planned, used, why: str) -> None:
    subs.append({"field": field, "plan": planned, "used": used, "why": why})


def substitute_local(plan):
    """Same architecture, buildable with the local spec and without TE/DeepEP/HybridEP/APEX
    extensions; returns (plan, substitutions).  Each substitution is a dict
    {field, plan, used, why}; none of them changes a parameter shape."""
    raw = copy.deepcopy(plan.raw)
    subs: list[dict] = []
    rt, tc = raw["runtime"], raw["transformer_config"]

    def flag(field: str, why: str, used=False) -> bool:
        value = tc.get(field)
        if value in (None, False, "none", [], {}) or value == used:
            return False
        tc[field] = used
        _sub(subs, field, value, used, why)
        return True

    if rt.get("transformer_impl") == "transformer_engine":
        rt["transformer_impl"] = "local"
        mla_sharded = tc.get("multi_latent_attention") and (tc.get("tensor_model_parallel_size") or 1) > 1
        _sub(subs, "runtime.transformer_impl", "transformer_engine", "local",
             "--local-spec: megatron-core's local layer spec (ColumnParallelLinear, torch norms, "
             "DotProductAttention) has the parameter shapes of the Transformer Engine spec"
             + (" except MLA's down projections, which it shards over TP where TE replicates them"
                if mla_sharded else ""))
    if tc.get("moe_token_dispatcher_type") == "flex":
        backend = tc.get("moe_flex_dispatcher_backend") or "deepep"
        flag("moe_token_dispatcher_type",
             f"the flex dispatcher needs the {backend} kernels (DeepEP/HybridEP/NCCL EP); a token "
             f"dispatcher {NO_PARAMETERS} (moe_flex_dispatcher_backend = {backend!r} is inert "
             "under alltoall)", used="alltoall")
    grouped = flag("moe_grouped_gemm",
                   "the local spec builds SequentialMLP experts (megatron-core >= 0.18 always; "
                   "0.16's GroupedMLP needs the grouped_gemm package); same parameter count as "
                   "TEGroupedMLP")
    flag("moe_use_legacy_grouped_gemm", "legacy GroupedMLP needs the grouped_gemm package; "
         "SequentialMLP has the same parameter count")
    for field in ("moe_single_grouped_weight", "moe_single_grouped_bias"):
        flag(field, "single grouped expert weights are TE grouped linears (and need "
             "moe_grouped_gemm); per-expert weights have the same parameter count")
    modules = tc.get("recompute_modules")
    if grouped and isinstance(modules, list) and "moe_act" in modules:
        used = [m for m in modules if m != "moe_act"]
        tc["recompute_modules"] = used
        _sub(subs, "recompute_modules", modules, used,
             "megatron-core allows moe_act recompute only with moe_grouped_gemm; recomputation "
             f"{NO_PARAMETERS} (the activation estimate uses the plan as written)")
    for field in ("moe_permute_fusion", "moe_router_fusion"):
        flag(field, f"fused permute/router kernels come from Transformer Engine; a fusion "
             f"{NO_PARAMETERS}")
    if tc.get("cuda_graph_impl") not in (None, "none"):
        impl = tc["cuda_graph_impl"]
        tc["cuda_graph_impl"] = "none"
        _sub(subs, "cuda_graph_impl", impl, "none",
             "CUDA graphs are captured on a GPU at run time (the transformer_engine "
             f"implementation needs TE); capture {NO_PARAMETERS}")
        for field in ("cuda_graph_modules", "cuda_graph_scope"):
            if tc.get(field):
                planned = tc[field]
                tc[field] = []
                _sub(subs, field, planned, [], "no CUDA graphs in the dry run (cuda_graph_impl "
                     "-> none)")
    for field in ("enable_cuda_graph", "external_cuda_graph"):
        flag(field, "CUDA graphs are captured on a GPU at run time; capture "
             + NO_PARAMETERS)
    if not _has_module("fused_weight_gradient_mlp_cuda"):
        flag("gradient_accumulation_fusion",
             "local linear layers need APEX's fused_weight_gradient_mlp_cuda extension (not "
             f"installed; TE brings its own); fusing the wgrad accumulation {NO_PARAMETERS}")
    flag("tp_comm_overlap", "TP communication overlap uses Transformer Engine userbuffers; "
         f"overlap {NO_PARAMETERS}")
    flag("delay_wgrad_compute", "delayed wgrad is Transformer Engine's backward_dw split; it "
         f"reorders the backward pass and {NO_PARAMETERS}")
    flag("overlap_dispatch_backward_with_experts_wgrad",
         f"needs Transformer Engine >= 2.3 (split wgrad); overlap {NO_PARAMETERS}")
    flag("use_te_rng_tracker", f"Transformer Engine's RNG tracker; an RNG {NO_PARAMETERS}")
    flag("use_te_activation_func", "Transformer Engine activation ops; the local MLP applies "
         f"the same activation, which {NO_PARAMETERS}")
    flag("use_transformer_engine_op_fuser", f"Transformer Engine op fuser; fusion {NO_PARAMETERS}")
    for field, used in (("fp8", None), ("fp4", None)):
        flag(field, "FP8/FP4 GEMMs are Transformer Engine modules; the dry run builds "
             "params_dtype modules with the same parameter shapes (the memory estimate uses "
             "params_dtype)", used=used)
    for field in ("fp8_param", "fp4_param", "activation_func_fp8_input_store",
                  "moe_router_padding_for_quantization", "moe_router_padding_for_fp8"):
        flag(field, f"only meaningful with Transformer Engine FP8/FP4; {NO_PARAMETERS}")
    if not _has_module("transformer_engine"):
        flag("apply_rope_fusion", "fused RoPE kernels come from Transformer Engine (not "
             f"installed); RoPE {NO_PARAMETERS}")
    # The gate re-derives what the mapped values still need; the plan's own list names the
    # backends of the values just mapped away.
    replaced = ("transformer_engine", "deep_ep", "grouped_gemm")
    requires = rt.get("requires", [])
    rt["requires"] = [r for r in requires if str(r.get("module", "")).split(".")[0]
                      not in replaced]
    dropped = sorted({r["module"] for r in requires} - {r["module"] for r in rt["requires"]})
    if dropped:
        _sub(subs, "runtime.requires", dropped, [], "the backends of the values mapped above; "
             "the gate still checks whatever the mapped plan needs")
    return plan_mod.check(raw, plan.path), subs


# ---------------------------------------------------------------------------------------------
# Spec-level stand-ins: modules the local spec names but cannot construct for this plan.

class _DryRunCoreAttention:
    """Stand-in for the local DotProductAttention where it cannot be built (MLA's separate
    k/v head dims; context parallelism).  Local core attention holds parameters only for
    ``softmax_type='learnable'`` (one offset per local head); the stand-in keeps exactly those."""

    def __new__(cls, config, *args, **kwargs):
        import torch
        from megatron.core import parallel_state

        module = torch.nn.Module()
        if getattr(config, "softmax_type", "vanilla") == "learnable":
            heads = config.num_attention_heads // parallel_state.get_tensor_model_parallel_world_size()
            module.softmax_offset = torch.nn.Parameter(
                torch.empty(heads, dtype=config.params_dtype))
        return module


class _DryRunTorchNorm:
    """Stand-in for megatron-core's WrappedTorchNorm, which refuses sequence parallelism,
    zero-centred gamma, persistent and memory-efficient norms without APEX/TE; those change no
    parameter shape, so the torch norm is built with the same weight (and bias) and its
    parameters carry the sequence_parallel mark as megatron's fused norms do."""

    def __new__(cls, config, hidden_size, eps=1e-5, **kwargs):
        import torch

        kind = getattr(config, "normalization", "LayerNorm")
        norm_cls = torch.nn.RMSNorm if kind == "RMSNorm" else torch.nn.LayerNorm
        module = norm_cls(normalized_shape=hidden_size, eps=eps)
        for p in module.parameters():
            p.sequence_parallel = bool(getattr(config, "sequence_parallel", False))
        return module


NORM_FLAGS = ("sequence_parallel", "layernorm_zero_centered_gamma", "persist_layer_norm",
              "memory_efficient_layer_norm")


def spec_stand_ins(cfg, substitutions: list) -> dict:
    """{local module class: (stand-in, substitution entry)} that this config needs."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    table = {}
    cp = getattr(cfg, "context_parallel_size", 1) or 1
    if getattr(cfg, "multi_latent_attention", False) or cp > 1:
        why = ("megatron-core's local DotProductAttention "
               + ("rejects MLA's k_channels/v_channels" if cp == 1 else
                  "supports no context parallelism (TEDotProductAttention does)")
               + "; core attention has no parameters except a learnable softmax offset, "
               "which the stand-in keeps (no forward runs in a dry run)")
        table[DotProductAttention] = (_DryRunCoreAttention, {
            "field": "spec.core_attention", "plan": "DotProductAttention",
            "used": "parameter-free stand-in", "why": why})
    flags = [f for f in NORM_FLAGS if getattr(cfg, f, False)]
    if flags:
        table[WrappedTorchNorm] = (_DryRunTorchNorm, {
            "field": "spec.layer_norm", "plan": "WrappedTorchNorm",
            "used": "torch norm stand-in",
            "why": f"WrappedTorchNorm (APEX not installed, or RMSNorm on the local spec) refuses "
                   f"{', '.join(f'{f}=True' for f in flags)}; these change no parameter shape, "
                   "so the same torch norm is built without the check"})
    return table


def spec_hook(cfg, substitutions: list):
    """Rewrite layer specs (ModuleSpec / submodule dataclasses / functools.partial builders)
    so that the stand-ins replace what the local spec cannot construct; each replacement made
    is appended (once) to ``substitutions``."""
    table = spec_stand_ins(cfg, substitutions)
    if not table:
        return None

    def swap(value):
        if isinstance(value, type) and value in table:
            stand_in, entry = table[value]
            if entry not in substitutions:
                substitutions.append(entry)
            return stand_in
        return None

    def visit(node, seen):
        if node is None or isinstance(node, (str, int, float, bool, type)) or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, functools.partial):
            for key, value in list(node.keywords.items()):
                new = swap(value)
                if new is not None:
                    node.keywords[key] = new
                else:
                    visit(value, seen)
            for value in node.args:
                visit(value, seen)
            return
        if isinstance(node, list):
            for i, value in enumerate(node):
                new = swap(value)
                if new is not None:
                    node[i] = new
                else:
                    visit(value, seen)
            return
        if isinstance(node, tuple):
            for value in node:
                visit(value, seen)
            return
        if isinstance(node, dict):
            for key, value in list(node.items()):
                new = swap(value)
                if new is not None:
                    node[key] = new
                else:
                    visit(value, seen)
            return
        if callable(node) and not hasattr(node, "__dataclass_fields__") \
                and type(node).__name__ != "ModuleSpec":
            return  # functions, bound methods: nothing to rewrite
        for key, value in list(getattr(node, "__dict__", {}).items()):
            new = swap(value)
            if new is not None:
                object.__setattr__(node, key, new)
            else:
                visit(value, seen)

    def hook(spec):
        visit(spec, set())
        return spec

    return hook


class _DryRunLayerNormColumnParallelLinear:
    """Stand-in for TELayerNormColumnParallelLinear (norm fused into the projection), which the
    local spec lacks (its column_parallel_layer_norm_linear() is None): a ColumnParallelLinear
    plus the fused norm's parameters (layer_norm_weight, and layer_norm_bias for LayerNorm),
    the same parameters under the same names."""

    def __new__(cls, input_size, output_size, *, config, init_method, bias=False,
                gather_output=False, skip_bias_add=False, is_expert=False, tp_group=None,
                **kwargs):
        import torch
        from megatron.core.tensor_parallel.layers import ColumnParallelLinear

        module = ColumnParallelLinear(input_size, output_size, config=config,
                                      init_method=init_method, bias=bias,
                                      gather_output=gather_output, skip_bias_add=skip_bias_add,
                                      is_expert=is_expert, tp_group=tp_group)
        names = ["layer_norm_weight"] + (["layer_norm_bias"]
                                         if config.normalization == "LayerNorm" else [])
        for name in names:
            param = torch.nn.Parameter(torch.empty(input_size, dtype=config.params_dtype))
            param.sequence_parallel = bool(config.sequence_parallel)
            module.register_parameter(name, param)
        return module


def _fused_norm_linear_entry(fused_by: str) -> dict:
    return {"field": "spec.column_parallel_layer_norm_linear",
            "plan": "TELayerNormColumnParallelLinear", "used": "norm + ColumnParallelLinear",
            "why": f"{fused_by}, which only Transformer Engine provides; the stand-in holds the same "
                   "parameters (layer_norm_weight[, layer_norm_bias], weight)"}


def local_backend(cfg, substitutions: list):
    """megatron-core's LocalSpecProvider, plus the fused norm+linear stand-in that experimental
    attention variants (gated_delta_net) ask the backend for; None when not needed."""
    if not getattr(cfg, "experimental_attention_variant", None):
        return None
    from megatron.core.models.backends import LocalSpecProvider

    entry = _fused_norm_linear_entry(f"{cfg.experimental_attention_variant} fuses its input norm into in_proj")

    class DryRunLocalSpecProvider(LocalSpecProvider):
        def column_parallel_layer_norm_linear(self):
            if entry not in substitutions:
                substitutions.append(entry)
            return _DryRunLayerNormColumnParallelLinear

    return DryRunLocalSpecProvider()


@contextlib.contextmanager
def construction_stand_ins(cfg, substitutions: list):
    """Everything the local spec cannot construct for this config, allowed for the dry run's
    construction only (each stated) and restored afterwards."""
    with _gated_delta_net_without_fla(cfg, substitutions), _mla_query_norm_fused(cfg, substitutions):
        yield


@contextlib.contextmanager
def _mla_query_norm_fused(cfg, substitutions: list):
    """MLA with qk_layernorm and no query LoRA: megatron-core 0.19+ (transformer/
    mla_qk_norm_config.py) builds linear_q_proj as a fused norm + linear, which only Transformer
    Engine provides, and refuses the local spec's separate query norm.  The resolver is given the
    fused stand-in (same parameters as TELayerNormColumnParallelLinear) and a trivial query norm,
    so the dry run counts what the Transformer Engine spec builds; 0.16 has no such resolver and
    builds no query norm without a query LoRA."""
    try:
        from megatron.core.transformer import mla_qk_norm_config
    except ImportError:
        mla_qk_norm_config = None
    if mla_qk_norm_config is None or not getattr(cfg, "multi_latent_attention", False) \
            or not getattr(cfg, "qk_layernorm", False) or cfg.q_lora_rank is not None:
        yield
        return
    from megatron.core.transformer.identity_op import IdentityOp

    resolver = mla_qk_norm_config.QKNormConfigResolver
    real_init = resolver.__init__
    entry = _fused_norm_linear_entry("megatron-core 0.19+ fuses MLA's query norm into linear_q_proj "
                                     "when there is no query LoRA (mla_qk_norm_config.py)")

    def init(self, config, submodules):
        real_init(self, config, dataclasses.replace(submodules, q_layernorm=IdentityOp))
        self.fused_norm_linear_impl = _DryRunLayerNormColumnParallelLinear
        if entry not in substitutions:
            substitutions.append(entry)

    resolver.__init__ = init
    try:
        yield
    finally:
        resolver.__init__ = real_init


@contextlib.contextmanager
def _gated_delta_net_without_fla(cfg, substitutions: list):
    """Gated DeltaNet refuses construction without the flash-linear-attention (fla) kernels,
    which only its forward calls; a dry run never runs forward, so construction is allowed
    (stated) and the module's flag restored afterwards."""
    if getattr(cfg, "experimental_attention_variant", None) != "gated_delta_net":
        yield
        return
    from megatron.core.ssm.gated_delta_net import common as gdn
    from megatron.core.ssm.gated_delta_net import gdn as gdn_module

    if gdn.HAVE_FLA:
        yield
        return

    def no_kernel(*args, **kwargs):
        raise RuntimeError("moeforge.runtime.dryrun built GatedDeltaNet without fla; it cannot run")

    substitutions.append({
        "field": "gated_delta_net kernels", "plan": "fla (flash-linear-attention)",
        "used": "construction without fla",
        "why": "fla's kernels are used in forward only (not installed here); GatedDeltaNet's "
               "parameters (in_proj, conv1d, dt_bias, A_log, out_norm, out_proj) do not "
               "depend on them"})
    saved = gdn.HAVE_FLA, gdn_module.chunk_gated_delta_rule
    gdn.HAVE_FLA, gdn_module.chunk_gated_delta_rule = True, no_kernel
    try:
        yield
    finally:
        gdn.HAVE_FLA, gdn_module.chunk_gated_delta_rule = saved
