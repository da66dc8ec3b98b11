"""The platform's facts and the model document's own statements: rows of the one table (compiler/knobs/row.py) that
the rules read but the solver never chooses. Why a module of its own: they describe what the recipe runs on and
what the model is, not a setting; compiler/knobs/table.py re-exports them.
"""
from __future__ import annotations

from moeforge.compiler.knobs.row import Knob

_K = Knob
# megatron-core's activation functions by name (TransformerConfig.activation_func: F.gelu, F.silu,
# fusions.fused_bias_geglu.quick_gelu, activations.squared_relu)
ACTIVATION_FUNCS = ("gelu", "silu", "quick_gelu", "squared_relu")

# Platform facts: read from the platform document, never chosen by the solver.
GPU_PRODUCTS = ("none", "A100", "H100", "H200", "B100", "B200", "B300", "GB200", "GB300", "other")
FACTS: tuple[Knob, ...] = (
    _K("torch", "platform.software.torch", "version", None, doc="installed torch (0 when absent)"),
    _K("transformer_engine", "platform.software.transformer_engine", "version", None),
    _K("megatron_core", "platform.software.megatron_core", "version", None),
    _K("gpu_major", "platform.gpu.compute_capability", "int", 0, doc="compute capability major (0: no GPU)"),
    _K("gpu_product", "platform.gpu.name", "enum", "none", GPU_PRODUCTS),
    _K("gpu_name", "platform.gpu.name", "str", None, doc="the device name as torch reports it (Megatron's messages quote it)"),
    _K("gpus_per_node", "platform.gpus_per_node", "int", 8),
    _K("nvlink_domain", "platform.nvlink_domain", "int", 8),
    _K("deep_ep_installed", "platform.software.deep_ep", "bool", False),
    _K("hybrid_ep_installed", "platform.software.hybrid_ep", "bool", False),
    # unset on the platform: installed with Transformer Engine, absent without (moeforge.compiler.solver.inputs.facts)
    _K("apex_installed", "platform.software.apex", "bool", False,
       doc="APEX with its CUDA extensions (fused_weight_gradient_mlp_cuda, scaled_masked_softmax_cuda, "
           "fused_layer_norm_cuda) is installed"),
    _K("device", "platform.device", "enum", "cuda", ("cpu", "cuda")),
    # torch.distributed's backend (Megatron-LM --distributed-backend, default nccl; gloo on CPU)
    _K("distributed_backend", "platform.distributed_backend", "enum", "nccl", ("nccl", "gloo"),
       bridge="dist.distributed_backend"),
    # The MLP activation as megatron-core holds it (TransformerConfig.activation_func by name, and
    # gated_linear_unit), from the model document's activation (knobs.mlp_activation); fusion and
    # Megatron-LM's activation flags depend on the pair.
    _K("activation_func", "model.architecture.activation", "enum", "gelu", ACTIVATION_FUNCS, lm=None,
       doc="the MLP activation function (swiglu: silu, gated); Megatron-LM: --swiglu / --quick-geglu / --squared-relu"),
    _K("gated_linear_unit", "model.architecture.gated_linear_unit", "bool", False, lm=None,
       doc="a gated MLP (swiglu implies it); Megatron-LM: --swiglu / --quick-geglu"),
    # What the model document itself says, before a recipe or --set changes it: Megatron-Bridge's recipe for a
    # model builds the provider its checkpoint's architecture maps to, an MLA one only for an MLA model.
    _K("model_document_mla", "model.architecture.multi_latent_attention", "bool", False, lm=None,
       doc="the model document itself states multi-latent attention (Megatron-Bridge's recipe for it then "
           "builds an MLATransformerConfig provider)"),
    # Facts of the recipe's own values that no rule could compare otherwise (lists, floats); computed by
    # moeforge.compiler.solver.inputs.derived_facts, never chosen by the solver.
    _K("path_env_vars", None, "str", None,
       doc="the ${VAR} names in the recipe's paths, comma-separated (None: none); resolved at launch"),
    _K("data_blend_weights_positive", None, "bool", True, doc="every data.blend weight is > 0"),
    _K("min_lr_at_most_lr", None, "bool", True, doc="schedule.min_lr <= schedule.lr"),
    _K("last_layer_moe", None, "bool", True,
       doc="the model's last decoder layer is an MoE layer (model.moe.layer_freq); MTP layers take its spec"),
    _K("aux_loss_coeff_zero", None, "bool", True, doc="model.moe.aux_loss_coeff is 0 (every coefficient, for a list)"),
    _K("last_layer_linear_attention", None, "bool", False,
       doc="the model's last decoder layer is Gated DeltaNet (model.architecture.linear_attention_freq); MTP layers "
           "take its spec"),
    # a pattern's fit is decided here, not compared with num_layers in the solver: a free num_layers would then
    # be held by the pattern, and a conflict with the layer count (a model swap) would no longer name it
    _K("moe_layer_freq_fits", None, "bool", True,
       doc="model.moe.layer_freq is an integer or has one entry per decoder layer"),
    _K("linear_attention_freq_fits", None, "bool", True,
       doc="model.architecture.linear_attention_freq is an integer (or unset) or has one entry per decoder layer"),
    _K("moe_layer_freq_entries", None, "opt_int", None,
       doc="the entries of a per-layer model.moe.layer_freq list (None: an integer frequency); for messages"),
    _K("linear_attention_freq_entries", None, "opt_int", None,
       doc="the entries of a per-layer model.architecture.linear_attention_freq list (None: an integer or unset); "
           "for messages"),
    _K("dsa_indexer_stated", None, "bool", False,
       doc="the DSA indexer's sizes are stated (dsa_indexer_n_heads, dsa_indexer_head_dim, dsa_indexer_topk): a "
           "linted flat config can, the model schema has no fields for them"),
    # parallelism.pipeline_layout as megatron-core parses it (compiler/knobs/pipeline_layout.py; None: no layout)
    _K("pipeline_layout_stages", None, "opt_int", None, doc="virtual stages (pp x vpp) of the pipeline layout"),
    _K("pipeline_layout_decoder_layers", None, "opt_int", None, doc="decoder layers (t) in the pipeline layout"),
    _K("pipeline_layout_mtp_layers", None, "opt_int", None, doc="MTP layers (m) in the pipeline layout"),
    _K("pipeline_layout_stages_after_mtp", None, "opt_int", None,
       doc="virtual stages after the first one holding an MTP layer"),
    _K("pipeline_layout_problem", None, "str", None,
       doc="the layout's first structural problem, in megatron-core's words (None: none)"),
)
FACT_BY_FIELD: dict[str, Knob] = {k.field: k for k in FACTS}


class Backend:
    """A flex dispatcher backend that needs a package of its own: the module megatron-core imports (and a name it
    must export), what to install, and the platform fact that says it is installed."""

    __slots__ = ("module", "attribute", "package", "fact")

    def __init__(self, module: str, attribute: str | None, package: str, fact: str):
        self.module, self.attribute, self.package, self.fact = module, attribute, package, fact

    @property
    def software(self) -> str:
        """Its key in a platform's software block (platform.software.<key>)."""
        return FACT_BY_FIELD[self.fact].path.rsplit(".", 1)[-1]


# moe.flex_backend -> its package: the plan's runtime.requires (the runtime's gate imports it before building
# anything; runtime/plan/gate.py mirrors this, tests/compiler/test_targets.py says so), the rules' *_PACKAGE_INSTALLED
# and the planner's dispatchers read it here
FLEX_BACKENDS = {"deepep": Backend("deep_ep", None, "DeepEP", "deep_ep_installed"),
                 "hybridep": Backend("deep_ep", "HybridEPBuffer", "HybridEP (DeepEP's hybrid-ep branch)",
                                     "hybrid_ep_installed")}


def gpu_product(name: str | None) -> str:
    """Classify a GPU by its device name the way Megatron-Bridge does (name prefixes)."""
    if not name:
        return "none"
    upper = name.upper().replace("NVIDIA ", "")
    for product in ("GB300", "GB200", "B300", "B200", "B100", "H200", "H100", "A100"):
        if upper.startswith(product):
            return product
    return "other"
