"""Build megatron-core's parallel state, TransformerConfig and MoE GPTModel chunks from a plan.

Why: this is the one place where plan values become megatron-core objects.  Field names differ
between megatron-core releases (e.g. ``cuda_graph_scope`` in 0.16 vs ``cuda_graph_modules`` in
0.19), so kwargs are filtered by the dataclass fields that exist - but a plan value that the
installed release cannot express is an error, never silently dropped; only empty values
(None/False/[]) of unknown fields are ignored, and they are listed in the report.
"""

from __future__ import annotations

import dataclasses
import inspect

import torch

from .errors import ConfigRejected
from .plan import Plan

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE_FIELDS = ("params_dtype", "pipeline_dtype", "autocast_dtype")


def megatron_version() -> str:
    from megatron.core import package_info

    return package_info.__version__


def _activation(name: str):
    import torch.nn.functional as F

    table = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu}
    if name == "squared_relu":
        from megatron.core.activations import squared_relu

        return squared_relu
    if name not in table:
        raise ConfigRejected(
            f"transformer_config.activation_func = {name!r}; "
            f"known: {sorted(table) + ['squared_relu']}"
        )
    return table[name]


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
    if isinstance(values.get("activation_func"), str):
        values["activation_func"] = _activation(values["activation_func"])
    if "transformer_impl" in known and "transformer_impl" not in values:
        values["transformer_impl"] = plan.runtime.get("transformer_impl", "local")
    kwargs, ignored = split_known(values, known, "transformer_config")
    kwargs.update({k: v for k, v in runtime_overrides.items() if k in known})
    return kwargs, ignored


def build_config(plan: Plan, runtime_overrides: dict | None = None):
    """Construct the config; megatron-core's own __post_init__ checks become ConfigRejected."""
    kwargs, ignored = config_kwargs(plan, runtime_overrides or {})
    try:
        cfg = config_class(plan)(**kwargs)
    except (AssertionError, ValueError, TypeError, NotImplementedError, ImportError) as exc:
        raise ConfigRejected(f"{type(exc).__name__}: {exc}") from None
    return cfg, ignored


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


def layer_specs(cfg, plan: Plan, vp_stage: int | None):
    """(decoder block spec for this pipeline stage/chunk, MTP block spec or None)."""
    from megatron.core.models.gpt import gpt_layer_specs as specs

    use_te = use_transformer_engine(plan)
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


def gpt_kwargs(plan: Plan) -> dict:
    from megatron.core.models.gpt import GPTModel

    known = set(inspect.signature(GPTModel.__init__).parameters) - {
        "self", "config", "transformer_layer_spec", "pre_process", "post_process",
        "mtp_block_spec", "vp_stage", "pg_collection"}
    kwargs, _ = split_known(dict(plan.model), known, "model")
    return kwargs


def build_model(plan: Plan, cfg, cast_dtype: bool = True, spec_hook=None) -> list:
    """One GPTModel per virtual pipeline chunk on this rank (a list of one without VPP).

    ``spec_hook(spec)`` may rewrite the layer specs before construction (dry run only).
    """
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel

    vpp = plan.layout.get("vpp")
    kwargs = gpt_kwargs(plan)
    chunks = []
    for vp_stage in range(vpp) if vpp else [None]:
        pre = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
        post = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
        block, mtp = layer_specs(cfg, plan, vp_stage)
        if spec_hook is not None:
            block, mtp = spec_hook(block), (spec_hook(mtp) if mtp is not None else None)
        try:
            chunk = GPTModel(config=cfg, transformer_layer_spec=block, pre_process=pre,
                             post_process=post, mtp_block_spec=mtp, vp_stage=vp_stage, **kwargs)
        except (AssertionError, ValueError, NotImplementedError, ImportError) as exc:
            raise ConfigRejected(f"GPTModel construction: {type(exc).__name__}: {exc}") from None
        chunk.model_type = getattr(chunk, "model_type", None)
        if cast_dtype and cfg.bf16:
            chunk = chunk.bfloat16()  # the local spec's norms are created in fp32
        elif cast_dtype and cfg.fp16:
            chunk = chunk.half()
        chunks.append(chunk)
    return chunks


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
