"""Activation recomputation (granularity, method, layers, selective modules) and fine-grained
activation offloading (recompute.offload).

megatron-core TransformerConfig.__post_init__ (all versions 0.16-0.19). megatron-core
normalises recompute_modules=None to ["core_attn"]; the rules treat None the same way.
The seeds: prefer selective recompute (layernorm, core_attn, moe_act, mlp, shared_experts,
mla_up_proj) before full recompute; TE-scoped CUDA graphs pair with selective recompute.
"""
from moeforge.compiler.knobs.table import CUDA_GRAPH_MODULES, OFFLOAD_MODULES
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.cuda_graphs import FULL_ITER, GRAPH_ANY, GRAPH_LOCAL, M
from moeforge.compiler.rules.expr import F, AtLeast, Has, IsSet, Not, Or, TE_INSTALLED

TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
GRAN, MODS = F("recompute_granularity"), F("recompute_modules")
FULL = GRAN == "full"
SELECTIVE = GRAN == "selective"
FP8 = IsSet(F("fp8"))
# recompute_modules=None means ["core_attn"] to megatron-core
CORE_ATTN = Or(Has(MODS, "core_attn"), Not(IsSet(MODS)))
OFFLOAD, OFF_MODS = F("fine_grained_activation_offloading").is_(True), F("offload_modules")
V19, BEFORE_V19 = (("megatron_core", ">=0.19.0"),), (("megatron_core", "<0.19.0"),)
V18, ONLY_V18 = (("megatron_core", ">=0.18.0"),), (("megatron_core", ">=0.18.0,<0.19.0"),)
LOCAL_OFFLOADABLE = ("expert_fc1", "moe_act", "fused_group_mlp")
LOCAL_PER_LAYER = GRAPH_LOCAL & Not(FULL_ITER)
ARGS = "Megatron-LM megatron/training/arguments.py validate_args"

RULES = (
    Rule(id="RECOMPUTE_FULL_NEEDS_METHOD", severity="error", when=FULL, require=IsSet(F("recompute_method")),
         message="full recompute needs recompute.method (uniform or block)", source=TC,
         fix="set recompute.method: uniform (or block)",
         megatron_message="Using recompute_granularity: {recompute_granularity} so recompute_method must be \"block\" "
                          "or \"uniform\""),
    Rule(id="RECOMPUTE_FULL_NEEDS_NUM_LAYERS", severity="error", when=FULL, require=IsSet(F("recompute_num_layers")),
         message="full recompute needs recompute.num_layers", source=TC,
         fix="set recompute.num_layers (1 .. layers per pipeline stage)",
         megatron_message="When using recompute_granularity: {recompute_granularity} recompute_num_layers must be "
                          "between 1 and num_layers_per_pipeline_rank: {num_layers_per_pipeline_rank}"),
    Rule(id="RECOMPUTE_SELECTIVE_NO_NUM_LAYERS", severity="error", when=SELECTIVE,
         require=Not(IsSet(F("recompute_num_layers"))), message="selective recompute takes no recompute.num_layers",
         source=TC, fix="remove recompute.num_layers",
         megatron_message="When using recompute_granularity: {recompute_granularity} recompute_num_layers must be "
                          "None."),
    # Megatron-LM only: megatron-core ignores the method for selective recompute, but the emitted
    # megatron-lm.args would carry it
    Rule(id="RECOMPUTE_SELECTIVE_NO_METHOD_IN_MEGATRON_LM", severity="error", when=SELECTIVE,
         require=Not(IsSet(F("recompute_method"))),
         message="selective recompute takes no recompute.method (Megatron-LM refuses it)", source=ARGS,
         fix="remove recompute.method",
         megatron_message="recompute method is not yet supported for selective recomputing granularity",
         origin="megatron-lm"),
    Rule(id="RECOMPUTE_MOE_ACT_NEEDS_GROUPED_GEMM", severity="error", when=SELECTIVE & Has(MODS, "moe_act"),
         require=F("moe_grouped_gemm").is_(True), message="recomputing moe_act needs grouped GEMM experts", source=TC,
         fix="set moe.grouped_gemm: true, or drop moe_act from recompute.modules",
         megatron_message="moe_act in recompute_modules is only supported with moe_grouped_gemm."),
    # CheckpointWithoutOutput (the layernorm and moe_act recompute) sets fp8 = (fp8 is not None), true by default,
    # and then reads Transformer Engine's FP8GlobalStateManager, imported only with TE: a NameError of Python's at
    # the first forward, not a check of megatron's (MLA's mla_up_proj passes its quantization, None in BF16)
    Rule(id="RECOMPUTE_OUTPUT_DISCARDING_NEEDS_TE", severity="error",
         when=SELECTIVE & Or(Has(MODS, "layernorm"), Has(MODS, "moe_act")), require=TE_INSTALLED,
         message="without Transformer Engine, recomputing layernorm or moe_act stops at the first forward step: "
                 "megatron-core's CheckpointWithoutOutput, which they use, reads Transformer Engine's FP8 state even "
                 "in BF16",
         source="megatron-core tensor_parallel/random.py CheckpointWithoutOutput (0.16-0.19), at the first forward "
                "step",
         fix="drop layernorm and moe_act from recompute.modules, or use a platform with Transformer Engine",
         megatron_message=None, origin="moeforge"),
    Rule(id="RECOMPUTE_MLA_UP_PROJ_NEEDS_MLA", severity="error", when=SELECTIVE & Has(MODS, "mla_up_proj"),
         require=F("multi_latent_attention").is_(True), message="recomputing mla_up_proj needs multi-latent attention",
         source=TC, fix="drop mla_up_proj from recompute.modules",
         megatron_message="mla_up_proj in recompute_modules is only supported with multi_latent_attention."),
    Rule(id="RECOMPUTE_SHARED_EXPERTS_NOT_WITH_OVERLAP", severity="error",
         when=SELECTIVE & Has(MODS, "shared_experts") & IsSet(F("moe_shared_expert_intermediate_size")),
         require=F("moe_shared_expert_overlap").is_(False),
         message="recomputing shared experts does not work with shared-expert overlap", source=TC,
         fix="set moe.overlap.shared_expert: false, or drop shared_experts from recompute.modules",
         megatron_message="shared_experts recompute cannot work with --moe-shared-expert-overlap."),
    Rule(id="RECOMPUTE_FP8_DELAYED_NO_MOE_ACT_LAYERNORM", severity="error",
         when=SELECTIVE & FP8 & Or(Has(MODS, "moe_act"), Has(MODS, "layernorm")), require=F("fp8_recipe") != "delayed",
         message="FP8 delayed scaling cannot recompute moe_act or layernorm", source=TC,
         fix="use precision.fp8_recipe: tensorwise/blockwise/mxfp8, or drop moe_act and layernorm from "
             "recompute.modules",
         megatron_message="Delayed scaling does not support moe_act and layernorm recompute for fp8."),
    Rule(id="RECOMPUTE_FP8_MOE_ACT_NEEDS_TE_2_6", severity="error",
         when=SELECTIVE & FP8 & Or(Has(MODS, "moe_act"), Has(MODS, "layernorm")) & (F("fp8_recipe") != "delayed"),
         require=AtLeast("transformer_engine", "2.6.0"),
         message="recomputing moe_act/layernorm under FP8 needs Transformer Engine >= 2.6.0", source=TC,
         fix="use a platform with TE >= 2.6.0, or drop moe_act and layernorm from recompute.modules",
         megatron_message="moe_act and layernorm recompute for fp8 needs transformer-engine>=2.6.0dev0, but your "
                          "version is {transformer_engine}."),
    Rule(id="RECOMPUTE_CORE_ATTN_WITH_TE", severity="advice", when=SELECTIVE & CORE_ATTN, require=Not(CORE_ATTN),
         message="recomputing core_attn (the default module list) is usually unnecessary with Transformer Engine's "
                 "fused attention", source=TC,
         fix="list the modules explicitly (e.g. recompute.modules: [layernorm, moe_act])",
         megatron_message="If you are using transformer_engine as the transformer implementation, the core_attn is "
                          "from transformer_engine and may be the fused version. For fused attention, you have no "
                          "need to set 'core_attn' to recompute. Please check that the core_attn recompute is really "
                          "needed."),
    Rule(id="RECOMPUTE_PREFER_SELECTIVE", severity="advice", when=FULL, require=Not(FULL),
         message="prefer selective recompute (layernorm, moe_act, mlp, shared_experts, mla_up_proj) before full "
                 "recompute; use full recompute only when the run still does not fit",
         source="seeds: perf-moe-optimization-workflow (Phase 1, recompute guidance)",
         fix="set recompute.granularity: selective with recompute.modules", megatron_message=None, origin="moeforge",
         evidence="fine-grained recompute usually recovers most of the memory while keeping throughput close to the "
                  "no-recompute baseline; full recompute also rules out EP overlap and TE-scoped CUDA graphs"),
    # --- fine-grained activation offloading (recompute.offload)
    Rule(id="OFFLOAD_NEEDS_MODULES", severity="error", when=OFFLOAD,
         require=Or(*[Has(OFF_MODS, m) for m in OFFLOAD_MODULES]),
         message="activation offloading needs the modules whose inputs it offloads", source=TC,
         fix="list them in recompute.offload.modules (e.g. [core_attn, attn_proj]), or set recompute.offload.enabled: "
             "false", megatron_message=None,
         # megatron-core's check is a bare `assert self.offload_modules is not None and len(...) > 0`: no text of
         # Megatron's to quote, so the words (and the origin) are moeforge's
         origin="moeforge"),
    Rule(id="OFFLOAD_ATTN_PROJ_NEEDS_CORE_ATTN", severity="error", when=OFFLOAD & Has(OFF_MODS, "attn_proj"),
         require=Has(OFF_MODS, "core_attn"),
         message="offloading attn_proj's input needs core_attn offloaded too (it is core_attn's output)", source=TC,
         fix="add core_attn to recompute.offload.modules, or drop attn_proj",
         megatron_message="attn_proj cannot be set to offload_modules alone without core_attn because the input of "
                          "attn_proj is the output of core_attn, which is needed in core_attn.backward()."),
    Rule(id="OFFLOAD_NOT_INSIDE_RECOMPUTED_MOE", severity="error", when=OFFLOAD & SELECTIVE & Has(MODS, "moe"),
         require=Not(Or(Has(OFF_MODS, "moe_act"), Has(OFF_MODS, "expert_fc1"), Has(OFF_MODS, "fused_group_mlp"))),
         message="activations inside a recomputed MoE layer cannot be offloaded", source=TC,
         fix="drop moe_act, expert_fc1 and fused_group_mlp from recompute.offload.modules, or moe from "
             "recompute.modules",
         megatron_message="Cannot offload {offload_inside_moe} while recomputing the entire MoE layer. 'moe' in "
                          "recompute_modules wraps the full MoE forward in a checkpoint, so offloading activations "
                          "inside it is redundant and will cause errors. Either remove 'moe' from --recompute-modules "
                          "or remove {offload_inside_moe} from --offload-modules.", versions=V19),
    Rule(id="OFFLOAD_FUSED_GROUP_MLP_NEEDS_MCORE_0_19", severity="error",
         when=OFFLOAD & Has(OFF_MODS, "fused_group_mlp"), require=Not(OFFLOAD),
         message="offloading fused_group_mlp needs megatron-core >= 0.19", source=TC,
         fix="use a platform with megatron-core >= 0.19, or offload expert_fc1/moe_act instead",
         megatron_message="Invalid choices for offload_modules: {invalid_modules}. Allowed modules are: "
                          "{allowed_modules}", versions=BEFORE_V19),
    Rule(id="OFFLOAD_FUSED_GROUP_MLP_NEEDS_OP_FUSER", severity="error", when=OFFLOAD & Has(OFF_MODS, "fused_group_mlp"),
         require=F("use_transformer_engine_op_fuser").is_(True),
         message="offloading fused_group_mlp needs Transformer Engine's op fuser", source=TC,
         fix="set training.te_op_fuser: true, or drop fused_group_mlp from recompute.offload.modules",
         megatron_message="fused_group_mlp requires use_transformer_engine_op_fuser.", versions=V19),
    Rule(id="OFFLOAD_FUSED_GROUP_MLP_ALONE", severity="error", when=OFFLOAD & Has(OFF_MODS, "fused_group_mlp"),
         require=Not(Or(Has(OFF_MODS, "expert_fc1"), Has(OFF_MODS, "moe_act"))),
         message="fused_group_mlp already offloads the whole grouped MLP: expert_fc1 and moe_act cannot be added",
         source=TC, fix="drop expert_fc1 and moe_act from recompute.offload.modules",
         megatron_message="fused_group_mlp offloads the whole fused grouped MLP and cannot be combined with "
                          "expert_fc1 or moe_act. Remove: {moe_partial_offload}", versions=V19),
    # --- offloading under CUDA graphs (megatron-core 0.18+; 0.19: local graphs of the MoE's inner modules)
    Rule(id="OFFLOAD_LOCAL_GRAPH_ONLY_EXPERT_MODULES", severity="error", when=OFFLOAD & LOCAL_PER_LAYER,
         require=Not(Or(*[Has(OFF_MODS, m) for m in OFFLOAD_MODULES if m not in LOCAL_OFFLOADABLE])),
         message="under per-layer local CUDA graphs only expert_fc1, moe_act and fused_group_mlp can be offloaded",
         source=TC,
         fix="set cuda_graph.impl: transformer_engine, or offload only expert_fc1 / moe_act / fused_group_mlp",
         megatron_message="fine-grained activation offloading with cuda_graph_impl='local' only supports "
                          "offload_modules 'expert_fc1', 'moe_act', and 'fused_group_mlp'. Unsupported "
                          "offload_modules: {local_unsupported_offload}.", versions=V19),
    Rule(id="OFFLOAD_LOCAL_GRAPH_NOT_WHOLE_LAYER", severity="error", when=OFFLOAD & LOCAL_PER_LAYER,
         require=Or(*[Has(M, m) for m in CUDA_GRAPH_MODULES if m != "full_iteration"]),
         message="offloading cannot run under local CUDA graphs of whole layers", source=TC,
         fix="list the captured modules in cuda_graph.modules, or set cuda_graph.impl: transformer_engine",
         megatron_message="fine-grained activation offloading with cuda_graph_impl='local' is not supported with "
                          "whole-layer CUDA graph capture.", versions=V19),
    Rule(id="OFFLOAD_LOCAL_GRAPH_NOT_OF_THE_MOE", severity="error", when=OFFLOAD & LOCAL_PER_LAYER,
         require=Not(Has(M, "moe")),
         message="offloading under local CUDA graphs needs the MoE module itself left out of the graphs", source=TC,
         fix="drop moe from cuda_graph.modules, or set cuda_graph.impl: transformer_engine",
         megatron_message="fine-grained activation offloading is only supported with transformer_engine CUDA graph "
                          "implementation or local CUDA graph implementation with partial MoE offload. Local partial "
                          "CUDA graphs are supported only for expert_fc1, moe_act, or fused_group_mlp offload when "
                          "the full MoE module is not captured.", versions=V19),
    Rule(id="OFFLOAD_GRAPHS_TE_OR_FULL_ITERATION_0_18", severity="error", when=OFFLOAD & LOCAL_PER_LAYER,
         require=Not(LOCAL_PER_LAYER),
         message="offloading under CUDA graphs needs Transformer Engine's graphs or a full-iteration graph "
                 "(megatron-core 0.18)", source=TC, fix="set cuda_graph.impl: transformer_engine",
         megatron_message="fine-grained activation offloading is only supported with transformer_engine CUDA graph "
                          "implementation or local CUDA graph implementation with full_iteration scope.",
         versions=ONLY_V18),
    Rule(id="OFFLOAD_GRAPHS_NOT_OF_THE_MOE", severity="error", when=OFFLOAD & GRAPH_ANY, require=Not(Has(M, "moe")),
         message="offloading cannot run with the MoE module inside a CUDA graph", source=TC,
         fix="drop moe from cuda_graph.modules, or set recompute.offload.enabled: false",
         megatron_message="Token-drop MoE is temporarily not supported with activation offloading.", versions=V18),
    # megatron-core leaves the in-flight limit unset (None); moeforge cannot set it, so a recipe cannot do this
    Rule(id="OFFLOAD_FULL_ITERATION_NEEDS_INFLIGHT_LIMIT", severity="error", when=OFFLOAD & FULL_ITER,
         require=IsSet(F("fine_grained_offloading_max_inflight_offloads"))
         & (F("fine_grained_offloading_max_inflight_offloads") >= 0),
         message="offloading under a full-iteration CUDA graph needs fine_grained_offloading_max_inflight_offloads, "
                 "which recipes cannot set", source=TC,
         fix="set cuda_graph.impl: transformer_engine, or recompute.offload.enabled: false",
         megatron_message="fine_grained_offloading_max_inflight_offloads must be a non-negative integer when using "
                          "fine-grained activation offloading with full-iteration CUDA graphs", versions=V19),
    Rule(id="OFFLOAD_NEEDS_TE", severity="error", when=OFFLOAD, require=TE_INSTALLED,
         message="activation offloading needs the Transformer Engine layer spec", source=ARGS,
         fix="use a platform with Transformer Engine, or set recompute.offload.enabled: false",
         megatron_message="Fine-grained activation offloading is only supported with transformer_engine implementation",
         origin="megatron-lm", also=(("Megatron-Bridge training/config.py _validate_fine_grained_activation_offloading",
                                      "Fine-grained activation offloading is only supported with transformer_engine implementation. "
                                      "Current transformer_impl: {model_cfg.transformer_impl}"),)),
)
