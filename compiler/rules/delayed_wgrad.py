"""Delayed expert weight-gradient computation (delay_wgrad_compute).

Only meaningful on top of EP overlap. Transformer Engine version gates come from
Megatron-Bridge CommOverlapConfig (TE >= 2.7.0 with grad-reduce overlap or gradient
accumulation fusion; TE >= 2.12.0, gradient accumulation fusion and no attention bias when
the delayed wgrad would be captured in a CUDA graph), megatron-core TransformerConfig
(TE >= 2.10.0 with partial TE CUDA graphs; 0.16: not with the legacy grouped GEMM) and
Megatron-LM's validate_args (TE >= 2.8.0 with grad-reduce overlap; TE >= 2.7.0 with the
gradient accumulation fusion off).

Bridge decides "captured in a graph" from the configured modules alone, ignoring
cuda_graph_impl: wgrad_in_graph = attn or (moe_router and shared experts without
shared-expert overlap).
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.cuda_graphs import GRAPH_TE
from moeforge.compiler.rules.expr import F, AtLeast, Has, IsSet, Not, Or, TE_INSTALLED

MCORE = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__ (0.14+)"
BRIDGE = "Megatron-Bridge training/comm_overlap.py CommOverlapConfig._get_model_comm_overlap_cfgs"
LM_ARGS = "Megatron-LM megatron/training/arguments.py validate_args"

DWG = F("delay_wgrad_compute").is_(True)
EP_OVERLAP = F("overlap_moe_expert_parallel_comm").is_(True)
M = F("cuda_graph_modules")
ATTN_GRAPHED = Has(M, "attn")
WGRAD_IN_GRAPH = Or(ATTN_GRAPHED,
                    Has(M, "moe_router") & IsSet(F("moe_shared_expert_intermediate_size"))
                    & F("moe_shared_expert_overlap").is_(False))
OFF = "or set moe.overlap.delay_wgrad: false"

RULES = (
    Rule(id="DELAY_WGRAD_NEEDS_EP_OVERLAP", severity="error", when=DWG, require=EP_OVERLAP,
         message="delayed wgrad needs EP overlap", source=f"{MCORE}; {BRIDGE}",
         fix="set moe.overlap.ep_comm: true, or moe.overlap.delay_wgrad: false",
         megatron_message="overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute",
         also=(("megatron-bridge CommOverlapConfig",
                "overlap_moe_expert_parallel_comm is required for delay_wgrad_compute"),)),
    Rule(id="DELAY_WGRAD_GRAD_REDUCE_NEEDS_TE_2_7", severity="error", when=DWG & F("overlap_grad_reduce").is_(True),
         require=AtLeast("transformer_engine", "2.7.0"),
         message="delayed wgrad with grad-reduce overlap needs Transformer Engine >= 2.7.0", source=BRIDGE,
         fix=f"use a platform with TE >= 2.7.0, or set overlap.grad_reduce: false, {OFF}",
         # Bridge's f-string pieces join without a space ("usingdelay_wgrad_compute").
         megatron_message="TE version >= 2.7.0 is required for overlap_grad_reduce when usingdelay_wgrad_compute. "
                          "Current TE version: {transformer_engine}", origin="megatron-bridge"),
    Rule(id="DELAY_WGRAD_GRAD_ACC_FUSION_NEEDS_TE_2_7", severity="error",
         when=DWG & F("gradient_accumulation_fusion").is_(True), require=AtLeast("transformer_engine", "2.7.0"),
         message="delayed wgrad with gradient accumulation fusion needs Transformer Engine >= 2.7.0", source=BRIDGE,
         fix=f"use a platform with TE >= 2.7.0, or set training.gradient_accumulation_fusion: false, {OFF}",
         megatron_message="TE version >= 2.7.0 is required for gradient_accumulation_fusion when "
                          "usingdelay_wgrad_compute. Current TE version: {transformer_engine}",
         origin="megatron-bridge"),
    Rule(id="DELAY_WGRAD_CUDA_GRAPH_NEEDS_TE_2_12", severity="error", when=DWG & WGRAD_IN_GRAPH,
         require=AtLeast("transformer_engine", "2.12.0"),
         message="delayed wgrad inside a CUDA graph (attn scope, or moe_router with non-overlapped shared experts) "
                 "needs Transformer Engine >= 2.12.0", source=BRIDGE,
         fix=f"use a platform with TE >= 2.12.0, drop attn (and moe_router) from cuda_graph.modules, {OFF}",
         megatron_message="CUDA graph with delay_wgrad_compute requires TE version >= 2.12.0.",
         origin="megatron-bridge"),
    Rule(id="DELAY_WGRAD_CUDA_GRAPH_NEEDS_GRAD_ACC_FUSION", severity="error", when=DWG & WGRAD_IN_GRAPH,
         require=F("gradient_accumulation_fusion").is_(True),
         message="delayed wgrad inside a CUDA graph needs gradient accumulation fusion (static main-grad addresses)",
         source=BRIDGE,
         fix=f"set training.gradient_accumulation_fusion: true, drop attn from cuda_graph.modules, {OFF}",
         megatron_message="CUDA graph with delay_wgrad_compute requires gradient_accumulation_fusion to be enabled. "
                          "This is because default gradient accumulation does not use static memory addresses, which "
                          "breaks CUDA graph requirements.", origin="megatron-bridge"),
    Rule(id="DELAY_WGRAD_CUDA_GRAPH_NO_ATTN_BIAS", severity="error", when=DWG & ATTN_GRAPHED,
         require=F("add_bias_linear").is_(False) & F("add_qkv_bias").is_(False),
         message="delayed wgrad with a graphed attention cannot have attention biases", source=BRIDGE,
         fix=f"drop attn from cuda_graph.modules, use a model without linear/QKV bias, {OFF}",
         megatron_message="CUDA graph with delay_wgrad_compute does not support attention bias for now.",
         origin="megatron-bridge"),
    Rule(id="DELAY_WGRAD_PARTIAL_CUDA_GRAPH_NEEDS_TE_2_10", severity="error", when=DWG & GRAPH_TE,
         require=AtLeast("transformer_engine", "2.10.0"),
         message="delayed wgrad with transformer_engine (partial) CUDA graphs needs Transformer Engine >= 2.10.0",
         source=MCORE, fix=f"use a platform with TE >= 2.10.0, or set cuda_graph.impl: none, {OFF}",
         megatron_message="TE version >= 2.10.0 is required for delay_wgrad_compute with partial cuda graph"),
    Rule(id="DELAY_WGRAD_NO_LEGACY_GROUPED_GEMM", severity="error", when=DWG,
         require=F("moe_use_legacy_grouped_gemm").is_(False),
         message="delayed wgrad does not work with the legacy grouped GEMM",
         source="megatron-core 0.16 transformer/transformer_config.py TransformerConfig.__post_init__",
         fix="drop moe_use_legacy_grouped_gemm",
         megatron_message="delay_wgrad_compute is not supported with legacy groupedgemm implementation",
         versions=(("megatron_core", "<0.17.0"),), lint_only=True),
    Rule(id="DELAY_WGRAD_NEEDS_TE_BACKWARD_DW", severity="error", when=DWG,
         require=Or(AtLeast("megatron_core", "0.17.0"), TE_INSTALLED),
         message="delayed wgrad needs Transformer Engine on megatron-core 0.16 (its local linear layers have no "
                 "backward_dw)",
         source="measured: megatron-core 0.16.1 without TE raises AttributeError \"'RowParallelLinear' object has no "
                "attribute 'backward_dw'\" (shared/reference/megatron-core-on-cpu.md)",
         fix="set moe.overlap.delay_wgrad: false, or use a platform with Transformer Engine", megatron_message=None,
         origin="moeforge"),
    # from megatron-core 0.17 the local layers have backward_dw, but Megatron-LM still refuses the local spec
    Rule(id="DELAY_WGRAD_NEEDS_TE_IN_MEGATRON_LM", severity="error", when=DWG, require=TE_INSTALLED,
         message="delayed wgrad needs the Transformer Engine layer spec in Megatron-LM", source=LM_ARGS,
         fix="set moe.overlap.delay_wgrad: false, or use a platform with Transformer Engine",
         megatron_message="Delaying wgrad compute is only supported with transformer_engine implementation",
         origin="megatron-lm", versions=(("megatron_core", ">=0.17.0"),)),
    # validate_args' own TE gates (Megatron-LM 0.16-0.19), stricter than Bridge's: grad-reduce overlap from TE 2.8,
    # and gradient accumulation fusion off only from TE 2.7, where Bridge allows fusion on only from TE 2.7; so
    # below TE 2.7 no setting of the fusion passes both front-ends, and delayed wgrad needs a newer TE.  Without
    # TE at all the rules above that want TE speak (one reason, one fix)
    Rule(id="DELAY_WGRAD_GRAD_REDUCE_NEEDS_TE_2_8_IN_MEGATRON_LM", severity="error",
         when=DWG & TE_INSTALLED & F("overlap_grad_reduce").is_(True), require=AtLeast("transformer_engine", "2.8.0"),
         message="delayed wgrad with grad-reduce overlap needs Transformer Engine >= 2.8.0 in Megatron-LM",
         source=LM_ARGS, fix=f"use a platform with TE >= 2.8.0, or set overlap.grad_reduce: false, {OFF}",
         megatron_message="overlap_grad_reduce is only supported with TE >= 2.8.0 when enabling delay_wgrad_compute",
         origin="megatron-lm"),
    Rule(id="DELAY_WGRAD_NO_GRAD_ACC_FUSION_NEEDS_TE_2_7_IN_MEGATRON_LM", severity="error",
         when=DWG & TE_INSTALLED & F("gradient_accumulation_fusion").is_(False),
         require=AtLeast("transformer_engine", "2.7.0"),
         message="delayed wgrad without gradient accumulation fusion needs Transformer Engine >= 2.7.0 in Megatron-LM "
                 "(and Megatron-Bridge refuses the fusion with delayed wgrad below TE 2.7.0)", source=LM_ARGS,
         fix=f"use a platform with TE >= 2.7.0, {OFF}",
         megatron_message="disabling gradient_accumulation_fusion is only supported with TE >= 2.7.0 when enabling "
                          "delay_wgrad_compute", origin="megatron-lm"),
    # megatron-core 0.18+: the other way of hiding the dispatch backward behind expert wgrad
    Rule(id="DISPATCH_BWD_OVERLAP_NEEDS_MCORE_0_18", severity="error",
         when=F("overlap_dispatch_backward_with_experts_wgrad").is_(True), require=AtLeast("megatron_core", "0.18.0"),
         message="overlap_dispatch_backward_with_experts_wgrad exists from megatron-core 0.18 on",
         source="megatron-core model_parallel_config.py (field added in 0.18)",
         fix="set moe.overlap.dispatch_backward_with_wgrad: false, or use megatron-core >= 0.18", megatron_message=None,
         origin="moeforge"),
    Rule(id="DISPATCH_BWD_OVERLAP_NOT_WITH_EP_OVERLAP", severity="error",
         when=F("overlap_dispatch_backward_with_experts_wgrad").is_(True), require=Not(EP_OVERLAP),
         message="overlap_dispatch_backward_with_experts_wgrad and EP overlap are alternatives",
         source=f"{MCORE.replace('(0.14+)', '(0.18+)')}",
         fix="set moe.overlap.ep_comm: false, or moe.overlap.dispatch_backward_with_wgrad: false",
         megatron_message="overlap_moe_expert_parallel_comm must be disabled when enabling "
                          "overlap_dispatch_backward_with_experts_wgrad.", versions=(("megatron_core", ">=0.18.0"),)),
    Rule(id="DISPATCH_BWD_OVERLAP_NEEDS_TE_2_3", severity="error",
         when=F("overlap_dispatch_backward_with_experts_wgrad").is_(True),
         require=AtLeast("transformer_engine", "2.3.0"),
         message="overlap_dispatch_backward_with_experts_wgrad needs Transformer Engine >= 2.3.0",
         source=f"{MCORE.replace('(0.14+)', '(0.18+)')}",
         fix="use a platform with TE >= 2.3.0, or set moe.overlap.dispatch_backward_with_wgrad: false",
         megatron_message="TE version >= 2.3.0 is required for overlap_dispatch_backward_with_experts_wgrad",
         versions=(("megatron_core", ">=0.18.0"),)),
    Rule(id="DISPATCH_BWD_OVERLAP_NOT_WITH_DELAY_WGRAD", severity="error",
         when=F("overlap_dispatch_backward_with_experts_wgrad").is_(True), require=Not(DWG),
         message="overlap_dispatch_backward_with_experts_wgrad and delayed wgrad are mutually exclusive",
         source=f"{MCORE.replace('(0.14+)', '(0.18+)')}",
         fix="keep only one of moe.overlap.dispatch_backward_with_wgrad and moe.overlap.delay_wgrad",
         megatron_message="delay_wgrad_compute and overlap_dispatch_backward_with_experts_wgrad are mutually "
                          "exclusive; use only one", versions=(("megatron_core", ">=0.18.0"),)),
)
