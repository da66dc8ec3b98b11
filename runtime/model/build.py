"""Build megatron-core's parallel state, TransformerConfig and MoE GPTModel chunks from a plan.

Why: this is the one place where plan values become megatron-core objects.  Field names differ
between megatron-core releases (e.g. ``cuda_graph_scope`` in 0.16 vs ``cuda_graph_modules`` in
0.19), so kwargs are filtered by the dataclass fields that exist - but a plan value that the
installed release cannot express is an error, never silently dropped; only empty values
(None/False/[]) of unknown fields are ignored, and they are listed in the report.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect

import torch

from ..errors import ConfigRejected, PlanError, stage
from ..plan.document import Plan

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE_FIELDS = ("params_dtype", "pipeline_dtype", "autocast_dtype")


def megatron_version() -> str:
    from megatron.core import package_info

    return package_info.__version__


TORCH_ACTIVATIONS = ("gelu", "silu", "relu")
# name -> the megatron-core module whose function Megatron-LM itself uses (core_transformer_config_from_args
# takes quick_gelu from fused_bias_geglu; TransformerConfig checks that very object for bias fusion)
MEGATRON_ACTIVATIONS = {"squared_relu": "megatron.core.activations",
                        "quick_gelu": "megatron.core.fusions.fused_bias_geglu",
                        "fast_gelu": "megatron.core.activations"}


def activation_from_name(name: str):
    """The plan's ``activation_func`` string -> the callable megatron-core expects: torch's
    F.gelu/F.silu/F.relu, or megatron-core's squared_relu/quick_gelu/fast_gelu (GPT-OSS uses
    quick_gelu, as Megatron-Bridge's GPTOSSBridge and Megatron-LM's --quick-geglu do)."""
    import importlib

    import torch.nn.functional as F

    if name in TORCH_ACTIVATIONS:
        return getattr(F, name)
    if name in MEGATRON_ACTIVATIONS:
        module = importlib.import_module(MEGATRON_ACTIVATIONS[name])
        if hasattr(module, name):
            return getattr(module, name)
    raise ConfigRejected(
        f"transformer_config.activation_func = {name!r}; "
        f"known: {sorted(TORCH_ACTIVATIONS + tuple(MEGATRON_ACTIVATIONS))}"
    )


def _is_empty(value) -> bool:
    return value is None or value is False or value == [] or value == {}


def split_known(values: dict, known: set, where: str) -> tuple[dict, list[str]]:
    """(kwargs megatron-core accepts, ignored empty unknown keys); error on meaningful unknowns."""
    kwargs, ignored, unsupported = {}, [], []
    for key, value in values.items():
        if key in known:
            kwargs[key] = value
        elif _is_empty(value):
            ignored.append(key)
        else:
            unsupported.append(f"{key} = {value!r}")
    if unsupported:
        raise ConfigRejected(
            f"{where} fields not present in megatron-core {megatron_version()}: "
            + ", ".join(unsupported)
            + " (recompile the plan for this megatron-core version)"
        )
    return kwargs, sorted(ignored)


def _means_int(annotation) -> bool:
    """A dataclass field annotated int or Optional[int] (as a type or as a string)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    text = str(text).replace("typing.", "").replace(" ", "")
    return text in ("int", "Optional[int]", "int|None", "None|int", "Union[int,NoneType]", "Union[int,None]")


def check_integers(values: dict, cls, where: str) -> None:
    """A float where megatron-core's dataclass declares an int is a bad plan (exit 2), not a crash later:
    ``num_layers: 2.0`` would reach range() and tensor shapes as a float."""
    for f in dataclasses.fields(cls):
        value = values.get(f.name)
        if isinstance(value, float) and _means_int(f.type):
            fix = f"write {int(value)}" if value.is_integer() else "give a whole number"
            raise PlanError(f"{where}.{f.name} = {value!r}: {cls.__name__} takes an integer here ({fix}, "
                            f"or recompile the recipe)")


def config_class(plan: Plan):
    """MLATransformerConfig for multi-latent attention, TransformerConfig otherwise."""
    if plan.transformer_config.get("multi_latent_attention"):
        from megatron.core.transformer.transformer_config import MLATransformerConfig

        return MLATransformerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig


def config_kwargs(plan: Plan, runtime_overrides: dict) -> tuple[dict, list[str]]:
    """TransformerConfig kwargs: plan values (dtype/activation strings resolved) + overrides."""
    cls = config_class(plan)
    known = {f.name for f in dataclasses.fields(cls)}
    values = dict(plan.transformer_config)
    for key in DTYPE_FIELDS:
        if isinstance(values.get(key), str):
            values[key] = DTYPES[values[key]]
    for f in dataclasses.fields(cls):  # enum fields (attention_backend) travel by name in the plan
        if isinstance(f.default, enum.Enum) and isinstance(values.get(f.name), str):
            try:
                values[f.name] = type(f.default)[values[f.name]]
            except KeyError:
                raise ConfigRejected(f"transformer_config.{f.name} = {values[f.name]!r}; known: "
                                     f"{[m.name for m in type(f.default)]}") from None
    if isinstance(values.get("activation_func"), str):
        values["activation_func"] = activation_from_name(values["activation_func"])
    if "transformer_impl" in known and "transformer_impl" not in values:
        values["transformer_impl"] = plan.runtime.get("transformer_impl", "local")
    kwargs, ignored = split_known(values, known, "transformer_config")
    check_integers(kwargs, cls, "transformer_config")
    kwargs.update({k: v for k, v in runtime_overrides.items() if k in known})
    return kwargs, ignored


def build_config(plan: Plan, runtime_overrides: dict | None = None):
    """Construct the config; megatron-core's own __post_init__ checks stop it as one message (errors.stage)."""
    kwargs, ignored = config_kwargs(plan, runtime_overrides or {})
    with stage("TransformerConfig"):
        cfg = config_class(plan)(**kwargs)
    apply_config_attributes(plan, cfg)
    return cfg, ignored


def apply_config_attributes(plan: Plan, cfg) -> None:
    """The plan's ``config_attributes``: values megatron-core reads from the config object
    without declaring them as dataclass fields (GPTModel reads ``config.yarn_*`` for YaRN on
    ordinary attention), set after construction as Megatron-Bridge's providers do."""
    attrs = plan.raw.get("config_attributes") or {}
    fields = {f.name for f in dataclasses.fields(cfg)}
    clash = sorted(k for k in attrs if k in fields)
    if clash:
        raise ConfigRejected(
            f"config_attributes {clash} are TransformerConfig fields in megatron-core "
            f"{megatron_version()}; the plan must state them in transformer_config")
    for key, value in attrs.items():
        setattr(cfg, key, value)


def init_parallel(plan: Plan, create_gloo_process_groups: bool = True) -> None:
    """megatron.core.parallel_state.initialize_model_parallel with the plan's folding."""
    from megatron.core import parallel_state

    layout = plan.layout
    wanted = dict(
        tensor_model_parallel_size=layout["tp"],
        pipeline_model_parallel_size=layout["pp"],
        virtual_pipeline_model_parallel_size=layout.get("vpp"),
        context_parallel_size=layout["cp"],
        expert_model_parallel_size=layout["ep"],
        expert_tensor_parallel_size=layout.get("etp"),
        create_gloo_process_groups=create_gloo_process_groups,
    )
    accepted = inspect.signature(parallel_state.initialize_model_parallel).parameters
    try:
        parallel_state.initialize_model_parallel(
            **{k: v for k, v in wanted.items() if k in accepted}
        )
    except (AssertionError, RuntimeError, ValueError) as exc:
        raise ConfigRejected(f"initialize_model_parallel: {exc}") from None


def use_transformer_engine(plan: Plan) -> bool:
    """TE spec when the plan asks for it (the gate has already proven TE imports)."""
    return plan.runtime.get("transformer_impl", "local") == "transformer_engine"


def layer_specs(cfg, plan: Plan, vp_stage: int | None, local_backend=None):
    """(decoder block spec for this pipeline stage/chunk, MTP block spec or None).

    ``experimental_attention_variant`` (e.g. Qwen3-Next's gated_delta_net) uses megatron-core's
    experimental block spec, which only the Transformer Engine backend supports; with the local
    spec it needs ``local_backend`` (the dry run's backend with stand-ins), otherwise it is
    refused with a clear message.
    """
    from megatron.core.models.gpt import gpt_layer_specs as specs

    use_te = use_transformer_engine(plan)
    if getattr(cfg, "experimental_attention_variant", None):
        return _experimental_layer_specs(cfg, vp_stage, use_te, local_backend)
    block = specs.get_gpt_decoder_block_spec(
        cfg, use_transformer_engine=use_te, normalization=cfg.normalization, vp_stage=vp_stage
    )
    mtp = None
    if getattr(cfg, "mtp_num_layers", None):
        last_layer = specs.get_gpt_decoder_layer_specs(
            cfg, use_transformer_engine=use_te, normalization=cfg.normalization
        )[-1]
        mtp = specs.get_gpt_mtp_block_spec(cfg, last_layer, use_transformer_engine=use_te,
                                           vp_stage=vp_stage)
    return block, mtp


def _experimental_layer_specs(cfg, vp_stage: int | None, use_te: bool, local_backend):
    """Block (and MTP) spec for an experimental attention variant; the MTP layer is built
    like the model's last decoder layer, as for the standard spec."""
    from megatron.core.models.gpt import experimental_attention_variant_module_specs as xspecs
    from megatron.core.models.gpt import gpt_layer_specs as specs

    variant = cfg.experimental_attention_variant
    if use_te:
        block = xspecs.get_transformer_block_with_experimental_attention_variant_spec(
            cfg, vp_stage=vp_stage)
        layers = (xspecs.get_transformer_layer_with_experimental_attention_variant_spec(cfg)
                  if getattr(cfg, "mtp_num_layers", None) else None)
    elif local_backend is None:
        raise ConfigRejected(
            f"transformer_config.experimental_attention_variant = {variant!r}: megatron-core "
            f"{megatron_version()} builds experimental attention variants only with the "
            "Transformer Engine spec (runtime.transformer_impl: transformer_engine); "
            "moeforge.runtime.dryrun --local-spec counts its parameters without TE")
    else:
        from megatron.core.transformer.enums import LayerType
        from megatron.core.transformer.transformer_block import (
            TransformerBlockSubmodules, get_num_layers_to_build)
        from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

        # megatron-core's helper for the variant's standard-attention layers takes the TE layer
        # spec whatever the backend; for the local backend they are the local spec's.
        def local_self_attention(config, backend=None):
            spec = specs.get_gpt_layer_local_spec(
                num_experts=config.num_moe_experts, moe_grouped_gemm=config.moe_grouped_gemm,
                qk_layernorm=config.qk_layernorm,
                multi_latent_attention=config.multi_latent_attention,
                normalization=config.normalization,
                qk_l2_norm=getattr(config, "qk_l2_norm", False)).submodules.self_attention
            spec.metainfo = dict(getattr(spec, "metainfo", None) or {},
                                 fuse_input_layernorm=False)
            return spec

        te_helper = xspecs._get_self_attention_module_spec
        xspecs._get_self_attention_module_spec = local_self_attention
        try:
            layers = xspecs.get_transformer_layer_with_experimental_attention_variant_spec(
                cfg, backend=local_backend)
        finally:
            xspecs._get_self_attention_module_spec = te_helper
        # The slicing of get_transformer_block_with_experimental_attention_variant_spec, which
        # takes no backend argument.
        layout = getattr(cfg, "pipeline_model_parallel_layout", None)
        if layout is not None:
            ids = layout.get_layer_id_list(layer_type=LayerType.decoder, vp_stage=vp_stage,
                                           pp_rank=None)
        else:
            offset = get_transformer_layer_offset(cfg, vp_stage=vp_stage)
            ids = range(offset, offset + get_num_layers_to_build(cfg, vp_stage=vp_stage))
        block = TransformerBlockSubmodules(
            layer_specs=[layers[i] for i in ids],
            layer_norm=local_backend.layer_norm(rms_norm=cfg.normalization == "RMSNorm",
                                                for_qk=False))
    mtp = None
    if getattr(cfg, "mtp_num_layers", None):
        mtp = specs.get_gpt_mtp_block_spec(cfg, layers[-1], use_transformer_engine=use_te,
                                           vp_stage=vp_stage)
    return block, mtp


def gpt_kwargs(plan: Plan) -> dict:
    from megatron.core.models.gpt import GPTModel

    known = set(inspect.signature(GPTModel.__init__).parameters) - {
        "self", "config", "transformer_layer_spec", "pre_process", "post_process",
        "mtp_block_spec", "vp_stage", "pg_collection"}
    kwargs, _ = split_known(dict(plan.model), known, "model")
    return kwargs


def build_model(plan: Plan, cfg, cast_dtype: bool = True, spec_hook=None,
                local_backend=None) -> list:
    """One GPTModel per virtual pipeline chunk on this rank (a list of one without VPP).

    ``spec_hook(spec)`` may rewrite the layer specs before construction and ``local_backend``
    builds experimental attention variants on the local spec (both dry run only).
    """
    from megatron.core import parallel_state

    vpp = plan.layout.get("vpp")
    chunks = []
    for vp_stage in range(vpp) if vpp else [None]:
        pre = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
        post = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
        chunks.append(build_chunk(plan, cfg, pre, post, vp_stage, cast_dtype=cast_dtype,
                                  spec_hook=spec_hook, local_backend=local_backend))
    return chunks


def build_chunk(plan: Plan, cfg, pre_process: bool, post_process: bool, vp_stage: int | None,
                cast_dtype: bool = True, spec_hook=None, local_backend=None):
    """One GPTModel chunk: the unit both entry points build (Megatron-LM's get_model calls
    moeforge.runtime.megatron's provider once per chunk with pre/post_process and vp_stage).

    ``cast_dtype`` casts to the plan's bf16/fp16 here (moeforge.runtime.train); under Megatron-LM its
    Float16Module does that instead.
    """
    from megatron.core.models.gpt import GPTModel

    block, mtp = layer_specs(cfg, plan, vp_stage, local_backend=local_backend)
    if spec_hook is not None:
        block, mtp = spec_hook(block), (spec_hook(mtp) if mtp is not None else None)
    with stage("GPTModel construction"):
        chunk = GPTModel(config=cfg, transformer_layer_spec=block, pre_process=pre_process,
                         post_process=post_process, mtp_block_spec=mtp, vp_stage=vp_stage,
                         **gpt_kwargs(plan))
    chunk.model_type = getattr(chunk, "model_type", None)
    if cast_dtype and cfg.bf16:
        chunk = chunk.bfloat16()  # the local spec's norms are created in fp32
    elif cast_dtype and cfg.fp16:
        chunk = chunk.half()
    return chunk


def count_parameters(chunks: list) -> dict:
    """Parameters on this rank, split into embedding/output, expert and dense (the rest)."""
    totals = {"total": 0, "embedding": 0, "expert": 0, "dense": 0}
    seen = set()
    for chunk in chunks:
        for name, p in chunk.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            n = p.numel()
            totals["total"] += n
            if name.startswith(("embedding.", "output_layer.")):
                totals["embedding"] += n
            elif not getattr(p, "allreduce", True) or ".experts." in name:
                totals["expert"] += n
            else:
                totals["dense"] += n
    return totals
