"""The canonical knobs: one table from Megatron's field name to its place in a recipe.

Rules, the solver, lint-config and the emitters all speak these names (megatron-core
TransformerConfig / ModelParallelConfig / DDP field names, Megatron-LM training arguments,
and a few moeforge facts), so a rule reads like the Megatron check it mirrors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AUTO = "auto"


@dataclass(frozen=True)
class Knob:
    field: str                 # Megatron's spelling; the canonical name
    path: str | None           # where a recipe sets it (dotted); None: derived or fact
    kind: str                  # bool | int | opt_int | enum | set | float | str
    default: Any = None        # megatron-core's default (what lint-config assumes)
    domain: tuple = ()         # enum values (None allowed when listed) / set universe
    auto: bool = False         # may be left to the solver
    doc: str = ""
    bound: str | None = None   # another field this one never exceeds (e.g. layers per stage <= num_layers)

    @property
    def solvable(self) -> bool:
        return self.kind in ("bool", "int", "opt_int", "enum", "set")


RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")
OFFLOAD_MODULES = ("core_attn", "attn_proj", "expert_fc1", "moe_act", "attn_norm", "mlp_norm", "qkv_linear",
                   "fused_group_mlp")
LOAD_BALANCING_TYPES = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none")

_K = Knob
KNOBS: tuple[Knob, ...] = (
    # --- parallel layout -------------------------------------------------------------
    _K("tensor_model_parallel_size", "parallelism.tp", "int", 1),
    _K("pipeline_model_parallel_size", "parallelism.pp", "int", 1),
    _K("virtual_pipeline_model_parallel_size", "parallelism.vpp", "opt_int", None, auto=True, bound="num_layers"),
    _K("context_parallel_size", "parallelism.cp", "int", 1),
    _K("expert_model_parallel_size", "parallelism.ep", "int", 1),
    _K("expert_tensor_parallel_size", "parallelism.etp", "opt_int", None, auto=True,
       doc="None means megatron-core uses TP; Megatron-Bridge sets 1 when EP > 1"),
    _K("sequence_parallel", "parallelism.sp", "bool", False, auto=True),
    _K("num_nodes", "resources.nodes", "int", 1),
    _K("world_size", None, "opt_int", None, doc="nodes x GPUs per node"),
    _K("data_parallel_size", None, "opt_int", None, doc="world / (TP x CP x PP)"),
    _K("expert_data_parallel_size", None, "opt_int", None, doc="world / (ETP x EP x PP)"),
    # --- training shape --------------------------------------------------------------
    _K("micro_batch_size", "training.micro_batch_size", "int", 1),
    _K("global_batch_size", "training.global_batch_size", "opt_int", None),
    _K("seq_length", "training.seq_length", "int", 4096),
    _K("train_iters", "training.train_iters", "int", 10),
    _K("seed", "training.seed", "int", 1234),
    _K("lr", "training.lr", "float", 1e-4),
    # --- precision -------------------------------------------------------------------
    _K("bf16", None, "bool", False, doc="from precision.dtype"),
    _K("fp16", None, "bool", False, doc="from precision.dtype"),
    _K("fp8", "precision.fp8", "enum", None, (None, "e4m3", "hybrid")),
    _K("fp8_recipe", "precision.fp8_recipe", "enum", "delayed",
       ("delayed", "tensorwise", "mxfp8", "blockwise", "custom")),
    _K("fp4", "precision.fp4", "enum", None, (None, "e2m1")),
    _K("fp4_recipe", "precision.fp4_recipe", "enum", "nvfp4", ("nvfp4", "custom")),
    _K("fp8_param", "precision.fp8_param", "bool", False),
    _K("fp4_param", "precision.fp4_param", "bool", False),
    _K("moe_router_dtype", "moe.router.dtype", "enum", None, (None, "fp32", "fp64")),
    # --- model architecture (from the model document) ---------------------------------
    _K("num_layers", "model.architecture.num_layers", "int", None),
    _K("hidden_size", "model.architecture.hidden_size", "int", None),
    _K("ffn_hidden_size", "model.architecture.ffn_hidden_size", "opt_int", None),
    _K("num_attention_heads", "model.architecture.num_attention_heads", "int", None),
    _K("num_query_groups", "model.architecture.num_query_groups", "opt_int", None),
    _K("add_bias_linear", "model.architecture.add_bias_linear", "bool", True),
    _K("add_qkv_bias", "model.architecture.add_qkv_bias", "bool", False),
    _K("num_moe_experts", "model.moe.num_experts", "opt_int", None),
    _K("moe_router_topk", "model.moe.router_topk", "int", 2),
    _K("moe_ffn_hidden_size", "model.moe.ffn_hidden_size", "opt_int", None),
    _K("moe_shared_expert_intermediate_size", "model.moe.shared_expert_intermediate_size", "opt_int", None),
    _K("mtp_num_layers", "model.mtp_num_layers", "opt_int", None),
    _K("multi_latent_attention", "model.architecture.multi_latent_attention", "bool", False),
    _K("moe_router_load_balancing_type", "model.moe.router_load_balancing_type", "enum", "aux_loss",
       LOAD_BALANCING_TYPES),
    # --- MoE dispatch and overlap ----------------------------------------------------
    _K("moe_token_dispatcher_type", "moe.dispatcher", "enum", "allgather",
       ("allgather", "alltoall", "flex"), auto=True),
    _K("moe_flex_dispatcher_backend", "moe.flex_backend", "enum", "deepep",
       (None, "deepep", "hybridep", "ncclep"), auto=True),
    _K("moe_flex_dispatcher_num_sms", "moe.flex_num_sms", "opt_int", None, auto=True,
       doc="0.16: moe_deepep_num_sms (20) / moe_hybridep_num_sms (16)"),
    _K("hybridep_ranks_per_nvlink_domain", "moe.hybridep_ranks_per_nvlink_domain", "opt_int", None,
       auto=True, doc="NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"),
    _K("overlap_moe_expert_parallel_comm", "moe.overlap.ep_comm", "bool", False, auto=True),
    _K("delay_wgrad_compute", "moe.overlap.delay_wgrad", "bool", False, auto=True),
    _K("moe_shared_expert_overlap", "moe.overlap.shared_expert", "bool", False, auto=True),
    _K("moe_router_force_load_balancing", "moe.router.force_load_balancing", "bool", False),
    _K("moe_permute_fusion", "moe.permute_fusion", "bool", False),
    _K("moe_grouped_gemm", "moe.grouped_gemm", "bool", False),
    _K("moe_pad_expert_input_to_capacity", "moe.pad_expert_input_to_capacity", "bool", False),
    _K("moe_expert_capacity_factor", "moe.expert_capacity_factor", "float", None),
    _K("moe_router_padding_for_quantization", "moe.router.padding_for_quantization", "bool", False),
    _K("moe_expert_rank_capacity_factor", "moe.expert_rank_capacity_factor", "float", None,
       doc="megatron-core 0.18+: per-rank token budget (hybridep; 0.19 also ncclep)"),
    _K("overlap_dispatch_backward_with_experts_wgrad", "moe.overlap.dispatch_backward_with_wgrad", "bool", False,
       doc="megatron-core 0.18+; the alternative to EP overlap + delayed wgrad"),
    _K("ep_overlap_early_attn_memory_release", "moe.overlap.early_attn_memory_release", "bool", False),
    _K("use_transformer_engine_op_fuser", "training.te_op_fuser", "bool", False,
       doc="megatron-core 0.18+"),
    # --- recompute -------------------------------------------------------------------
    _K("recompute_granularity", "recompute.granularity", "enum", None, (None, "full", "selective")),
    _K("recompute_method", "recompute.method", "enum", None, (None, "uniform", "block")),
    _K("recompute_num_layers", "recompute.num_layers", "opt_int", None, bound="num_layers"),
    _K("recompute_modules", "recompute.modules", "set", None, RECOMPUTE_MODULES),
    _K("fine_grained_activation_offloading", "recompute.offload.enabled", "bool", False),
    _K("offload_modules", "recompute.offload.modules", "set", None, OFFLOAD_MODULES),
    # --- CUDA graphs -----------------------------------------------------------------
    _K("cuda_graph_impl", "cuda_graph.impl", "enum", "none",
       ("none", "local", "transformer_engine", "full_iteration"), auto=True),
    _K("cuda_graph_modules", "cuda_graph.modules", "set", None, CUDA_GRAPH_MODULES, auto=True,
       doc="megatron-core < 0.18 names it cuda_graph_scope"),
    _K("use_te_rng_tracker", "cuda_graph.te_rng_tracker", "bool", False, auto=True,
       doc="Megatron-Bridge requires it for any CUDA graph; Megatron-LM turns it on with a warning"),
    # --- TP / PP / DP overlap --------------------------------------------------------
    _K("tp_comm_overlap", "overlap.tp_comm", "bool", False, auto=True),
    _K("overlap_p2p_comm", "overlap.p2p", "bool", False, auto=True),
    _K("overlap_grad_reduce", "overlap.grad_reduce", "bool", False, auto=True),
    _K("overlap_param_gather", "overlap.param_gather", "bool", False, auto=True),
    _K("use_distributed_optimizer", "optimizer.distributed", "bool", False, auto=True),
    _K("gradient_accumulation_fusion", "training.gradient_accumulation_fusion", "bool", False, auto=True),
    _K("use_megatron_fsdp", "optimizer.megatron_fsdp", "bool", False),
    # --- lint-config only --------------------------------------------------------------
    # Megatron fields a recipe cannot set (deprecated spellings, list/str-valued layout
    # knobs). lint-config reads them; for recipes the rules see megatron-core's default
    # (compiler.rules specialises the catalogue), see LINT_ONLY below.
    _K("moe_layer_freq", None, "int", 1,  # computed for recipes from model.moe.layer_freq
       doc="int N: every Nth layer is MoE; lint-config reads a list as 1 (all MoE) or 2 (some dense)"),
    _K("pipeline_model_parallel_layout", "parallelism.pipeline_layout", "str", None,
       doc="uneven pipeline layout, e.g. 'Et|(tt|)*30mL'"),
    _K("num_layers_in_first_pipeline_stage", "parallelism.first_stage_layers", "opt_int", None, bound="num_layers"),
    _K("num_layers_in_last_pipeline_stage", "parallelism.last_stage_layers", "opt_int", None, bound="num_layers"),
    _K("account_for_embedding_in_pipeline_split", "parallelism.account_for_embedding", "bool", False),
    _K("account_for_loss_in_pipeline_split", "parallelism.account_for_loss", "bool", False),
    _K("moe_enable_deepep", None, "bool", False, doc="deprecated: flex + moe_flex_dispatcher_backend=deepep"),
    _K("moe_deepep_num_sms", None, "opt_int", None, doc="0.16-0.18: int, default 20; 0.19: deprecated"),
    _K("moe_hybridep_num_sms", None, "opt_int", None, doc="0.16-0.17: int, default 16; 0.19: deprecated"),
    _K("enable_cuda_graph", None, "bool", False, doc="deprecated: cuda_graph_impl=local"),
    _K("external_cuda_graph", None, "bool", False, doc="deprecated: cuda_graph_impl=transformer_engine"),
    _K("cuda_graph_scope", None, "set", None, CUDA_GRAPH_MODULES,
       doc="megatron-core < 0.18 name of cuda_graph_modules (lint-config maps it)"),
    _K("moe_use_legacy_grouped_gemm", None, "bool", False, doc="megatron-core 0.16 only"),
    _K("moe_router_padding_for_fp8", None, "bool", False, doc="deprecated: moe_router_padding_for_quantization"),
    _K("variable_seq_lengths", None, "bool", False),
    _K("hidden_dropout", None, "float", 0.1),
    _K("attention_dropout", None, "float", 0.1),
)

BY_FIELD: dict[str, Knob] = {k.field: k for k in KNOBS}
BY_PATH: dict[str, Knob] = {k.path: k for k in KNOBS if k.path}

# Knobs without a recipe path that the compiler still fills in for a recipe: bf16/fp16
# from precision.dtype, the world and data-parallel sizes from resources and layout.
COMPUTED = frozenset({"bf16", "fp16", "world_size", "data_parallel_size", "expert_data_parallel_size",
                      "moe_layer_freq"})
# Megatron fields only lint-config reads; a recipe always has megatron-core's default.
LINT_ONLY = frozenset(k.field for k in KNOBS if k.path is None and k.field not in COMPUTED)


def knob(field: str) -> Knob:
    return BY_FIELD[field]


def display(field: str) -> str:
    """How a recipe author knows this knob (its recipe path), else Megatron's name."""
    k = BY_FIELD.get(field)
    return k.path if k and k.path else field


# Platform facts: read from the platform document, never chosen by the solver.
GPU_PRODUCTS = ("none", "A100", "H100", "H200", "B100", "B200", "B300", "GB200", "GB300", "other")
FACTS: tuple[Knob, ...] = (
    _K("torch", "platform.software.torch", "version", None, doc="installed torch (0 when absent)"),
    _K("transformer_engine", "platform.software.transformer_engine", "version", None),
    _K("megatron_core", "platform.software.megatron_core", "version", None),
    _K("gpu_major", "platform.gpu.compute_capability", "int", 0, doc="compute capability major (0: no GPU)"),
    _K("gpu_product", "platform.gpu.name", "enum", "none", GPU_PRODUCTS),
    _K("gpus_per_node", "platform.gpus_per_node", "int", 8),
    _K("nvlink_domain", "platform.nvlink_domain", "int", 8),
    _K("deep_ep_installed", "platform.software.deep_ep", "bool", False),
    _K("hybrid_ep_installed", "platform.software.hybrid_ep", "bool", False),
    _K("device", "platform.device", "enum", "cuda", ("cpu", "cuda")),
)
FACT_BY_FIELD: dict[str, Knob] = {k.field: k for k in FACTS}


def gpu_product(name: str | None) -> str:
    """Classify a GPU by its device name the way Megatron-Bridge does (name prefixes)."""
    if not name:
        return "none"
    upper = name.upper().replace("NVIDIA ", "")
    for product in ("GB300", "GB200", "B300", "B200", "B100", "H200", "H100", "A100"):
        if upper.startswith(product):
            return product
    return "other"
