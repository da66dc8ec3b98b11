"""CUDA graphs: implementation, capture scopes, and what they exclude.

The canonical knobs are cuda_graph_impl and cuda_graph_modules (megatron-core 0.18+
names; 0.16-0.17 call the latter cuda_graph_scope, and express full-iteration graphs as
impl=local with scope [full_iteration]; lint-config maps cuda_graph_scope onto
cuda_graph_modules). enable_cuda_graph / external_cuda_graph are the deprecated
spellings of impl=local / impl=transformer_engine, which megatron-core rewrites before
its checks, so the expressions below treat them as the same thing.

For dropless MoE the seeds recommend partial TE-scoped graphs (attn, moe_router,
moe_preprocess) and full-iteration graphs only for static shapes (drop-and-pad).
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, AtLeast, Has, IsSet, Not, Or

TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
TC16 = f"{TC} (0.16-0.17)"
TC18 = f"{TC} (0.18+)"
CGC = "megatron-core transformer/cuda_graph_config.py validate_deprecated_cuda_graph_modules_migration_inputs (0.18+)"
BRIDGE_GPT = "Megatron-Bridge models/gpt_provider.py GPTModelProvider.provide"
BRIDGE_CG = "Megatron-Bridge utils/cuda_graph.py validate_cuda_graph_configuration"

IMPL, M = F("cuda_graph_impl"), F("cuda_graph_modules")
ENABLE, EXTERNAL = F("enable_cuda_graph").is_(True), F("external_cuda_graph").is_(True)
GRAPH_TE = Or(IMPL == "transformer_engine", EXTERNAL)
GRAPH_LOCAL = Or(IMPL == "local", ENABLE)
GRAPH_ANY = Or(IMPL != "none", ENABLE, EXTERNAL)
PER_LAYER = Or(GRAPH_TE, GRAPH_LOCAL)
FULL_ITER = Or(IMPL == "full_iteration", GRAPH_LOCAL & Has(M, "full_iteration"))
MOE_MODEL = F("num_moe_experts") > 1
DROP_PAD = IsSet(F("moe_expert_capacity_factor")) & F("moe_pad_expert_input_to_capacity").is_(True)
# the local implementation graphs moe_router and moe_preprocess together
ROUTER = Or(Has(M, "moe_router"), GRAPH_LOCAL & Has(M, "moe_preprocess"))
PREPROCESS = Or(Has(M, "moe_preprocess"), GRAPH_LOCAL & Has(M, "moe_router"))
LAYER_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
WHOLE_LAYER = Or(FULL_ITER, Not(Or(*[Has(M, m) for m in LAYER_SCOPES])))
V18 = (("megatron_core", ">=0.18.0"),)
V_OLD = (("megatron_core", "<0.18.0"),)

RULES = (
    Rule(id="CUDA_GRAPH_NEEDS_GPU", severity="error", when=GRAPH_ANY, require=F("device") == "cuda",
         message="CUDA graphs need a GPU platform", source="moeforge (CUDA graphs capture CUDA kernels)",
         fix="set cuda_graph.impl: none", megatron_message=None, origin="moeforge"),
    Rule(id="CUDA_GRAPH_TE_NEEDS_TE", severity="error", when=GRAPH_TE, require=AtLeast("transformer_engine", "1.0.0"),
         message="transformer_engine CUDA graphs need Transformer Engine installed",
         source="megatron-core transformer/cuda_graphs.py TECudaGraphHelper (imports transformer_engine)",
         fix="set cuda_graph.impl: none or local, or use a platform with Transformer Engine", megatron_message=None,
         origin="moeforge"),
    Rule(id="CUDA_GRAPH_LEGACY_FLAGS_WITH_IMPL", severity="error", when=Or(ENABLE, EXTERNAL), require=IMPL == "none",
         message="enable_cuda_graph / external_cuda_graph cannot be combined with cuda_graph_impl", source=TC,
         fix="drop enable_cuda_graph / external_cuda_graph and keep cuda_graph_impl",
         megatron_message="Do not use enable_cuda_graph or external_cuda_graph with cuda_graph_impl.", lint_only=True),
    Rule(id="CUDA_GRAPH_LEGACY_FLAGS_EXCLUSIVE", severity="error", when=ENABLE, require=Not(EXTERNAL),
         message="enable_cuda_graph and external_cuda_graph are mutually exclusive", source=TC,
         fix="use cuda_graph_impl: local or transformer_engine instead of both flags",
         megatron_message="enable_cuda_graph and external_cuda_graph cannot be enabled at the same time.",
         lint_only=True),
    Rule(id="CUDA_GRAPH_ENABLE_DEPRECATED", severity="warning", when=ENABLE, require=F("enable_cuda_graph").is_(False),
         message="enable_cuda_graph is deprecated (megatron-core rewrites it to cuda_graph_impl=local)", source=TC,
         fix="set cuda_graph_impl: local instead",
         megatron_message="enable_cuda_graph is deprecated, use cuda_graph_impl=local instead.", lint_only=True),
    Rule(id="CUDA_GRAPH_EXTERNAL_DEPRECATED", severity="warning", when=EXTERNAL,
         require=F("external_cuda_graph").is_(False),
         message="external_cuda_graph is deprecated (megatron-core rewrites it to cuda_graph_impl=transformer_engine)",
         source=TC, fix="set cuda_graph_impl: transformer_engine instead",
         megatron_message="external_cuda_graph is deprecated, use cuda_graph_impl=transformer_engine instead.",
         lint_only=True),
    Rule(id="CUDA_GRAPH_FULL_ITERATION_IMPL_NEEDS_0_18", severity="error", when=IMPL == "full_iteration",
         require=IMPL != "full_iteration", message="cuda_graph_impl=full_iteration exists from megatron-core 0.18 on",
         source=TC16,
         fix="on megatron-core < 0.18 use cuda_graph.impl: local with cuda_graph.modules: [full_iteration]",
         megatron_message="Invalid cuda graph implementation: {cuda_graph_impl}", versions=V_OLD),
    Rule(id="CUDA_GRAPH_FULL_ITERATION_NOT_TE", severity="error", when=GRAPH_TE, require=Not(Has(M, "full_iteration")),
         message="a full-iteration CUDA graph cannot use the transformer_engine implementation",
         source=f"{TC16}; {CGC}",
         fix="use cuda_graph.impl: full_iteration (megatron-core >= 0.18) or local with [full_iteration] (< 0.18)",
         megatron_message="cuda_graph_modules='full_iteration' cannot be combined with "
                          "cuda_graph_impl='transformer_engine'.",
         variants=((V_OLD, "To use full iteration cuda graph, please use cuda_graph_impl=local instead of "
                           "cuda_graph_impl=transformer_engine."),)),
    Rule(id="CUDA_GRAPH_FULL_ITERATION_NO_MODULES", severity="error", when=IMPL == "full_iteration",
         require=Not(Or(*[Has(M, m) for m in LAYER_SCOPES])),
         message="cuda_graph_impl=full_iteration captures the whole iteration; per-layer modules must be empty",
         source=TC18, fix="set cuda_graph.modules: [] (or null)",
         megatron_message="cuda_graph_modules must be empty when cuda_graph_impl=\"full_iteration\".", versions=V18),
    # a recipe's launches turn the check off themselves (moeforge.compiler.targets.plan.nan_check); lint-config only
    Rule(id="CUDA_GRAPH_FULL_ITERATION_NO_NAN_CHECK", severity="error", when=FULL_ITER,
         require=F("check_for_nan_in_loss_and_grad").is_(False),
         message="a full-iteration CUDA graph cannot run Megatron-LM's per-step NaN check of loss and gradients",
         source="Megatron-LM megatron/training/arguments.py validate_args (0.17+)",
         fix="set check_for_nan_in_loss_and_grad: false (--no-check-for-nan-in-loss-and-grad)",
         megatron_message="--no-check-for-nan-in-loss-and-grad should be set with --cuda-graph-impl=full_iteration "
                          "for training.", origin="megatron-lm", lint_only=True,
         versions=(("megatron_core", ">=0.17.0"),),
         variants=((V_OLD, "--no-check-for-nan-in-loss-and-grad should be set with --cuda-graph-scope=full_iteration "
                           "for training. Note: If you are trying to use full_iteration CUDA graphs for inference, "
                           "please use --cuda-graph-scope full_iteration_inference instead"),),
         also=(("Megatron-Bridge training/config.py ConfigContainer.validate",
                "check_for_nan_in_loss must be disabled when using full_iteration CUDA graph. "
                "Set rerun_state_machine.check_for_nan_in_loss=False."),)),
    Rule(id="CUDA_GRAPH_MOE_AND_ROUTER_EXCLUSIVE", severity="error", when=PER_LAYER & Has(M, "moe"),
         require=Not(ROUTER), message="the moe and moe_router CUDA-graph scopes are mutually exclusive", source=TC,
         fix="keep either moe (drop-and-pad MoE) or moe_router/moe_preprocess (dropless MoE)",
         megatron_message="cuda_graph_modules must not contain both moe and moe_router.",
         variants=((V_OLD, "cuda_graph_scope must not contain both moe and moe_router."),)),
    Rule(id="CUDA_GRAPH_PREPROCESS_NEEDS_ROUTER", severity="error",
         when=GRAPH_TE & Not(GRAPH_LOCAL) & Has(M, "moe_preprocess"), require=Has(M, "moe_router"),
         message="the moe_preprocess CUDA-graph scope needs the moe_router scope", source=TC,
         fix="add moe_router to cuda_graph.modules",
         megatron_message="moe_preprocess cuda graph is only supported with moe_router cuda graph."),
    Rule(id="CUDA_GRAPH_MOE_SCOPES_NEED_MOE", severity="error", when=PER_LAYER & Not(MOE_MODEL),
         require=Not(Has(M, "moe")) & Not(ROUTER), message="the moe / moe_router CUDA-graph scopes need an MoE model",
         source=TC, fix="drop moe, moe_router and moe_preprocess from cuda_graph.modules",
         megatron_message="moe cuda graph is only supported for MoE."),
    Rule(id="CUDA_GRAPH_MLP_NEEDS_DENSE_LAYERS", severity="error",
         when=PER_LAYER & MOE_MODEL & (F("moe_layer_freq") == 1), require=Not(Has(M, "mlp")),
         message="the mlp CUDA-graph scope needs dense layers, and every layer of this model is MoE", source=TC,
         fix="drop mlp from cuda_graph.modules (use attn, moe_router, moe_preprocess)",
         megatron_message="mlp cuda graph is only supported for dense layers, but not found in the model.",
         lint_only=True),
    Rule(id="CUDA_GRAPH_MOE_SCOPE_NEEDS_DROP_PAD", severity="error", when=PER_LAYER & MOE_MODEL & Not(DROP_PAD),
         require=Not(Has(M, "moe")),
         message="the moe CUDA-graph scope needs drop-and-pad MoE (static shapes); dropless MoE uses attn, "
                 "moe_router, moe_preprocess", source=TC,
         fix="replace moe with moe_router and moe_preprocess in cuda_graph.modules, or set moe.expert_capacity_factor "
             "and moe.pad_expert_input_to_capacity",
         megatron_message="moe cuda graph is only supported with drop-padding MoE."),
    Rule(id="CUDA_GRAPH_PREPROCESS_NO_DTOH_SYNC", severity="error",
         when=PER_LAYER & MOE_MODEL & Not(DROP_PAD) & (F("moe_token_dispatcher_type") == "alltoall")
         & Or(IsSet(F("moe_expert_capacity_factor")), F("moe_router_padding_for_fp8").is_(True)),
         require=Not(PREPROCESS),
         message="the moe_preprocess CUDA-graph scope cannot capture alltoall preprocessing with a capacity factor "
                 "(it copies to the host)", source=TC,
         fix="drop moe_preprocess from cuda_graph.modules, or unset moe.expert_capacity_factor",
         megatron_message="moe_preprocess cuda graph is not supported when there are DtoH copies and synchronizations "
                          "in the preprocess step."),
    Rule(id="CUDA_GRAPH_FULL_RECOMPUTE_NEEDS_FULL_ITERATION", severity="error",
         when=GRAPH_ANY & (F("recompute_granularity") == "full"), require=FULL_ITER,
         message="full activation recompute only works with a full-iteration CUDA graph", source=TC,
         fix="use recompute.granularity: selective with TE-scoped graphs, or a full-iteration graph",
         megatron_message="full recompute is only supported with full iteration CUDA graph."),
    Rule(id="CUDA_GRAPH_MOE_RECOMPUTE_VS_ROUTER", severity="error",
         when=GRAPH_TE & (F("recompute_granularity") == "selective") & Has(F("recompute_modules"), "moe"),
         require=Not(Has(M, "moe_router")), message="recomputing whole MoE layers cannot cover a graphed moe_router",
         source=TC,
         fix="replace moe with moe_act in recompute.modules, or drop moe_router/moe_preprocess from cuda_graph.modules",
         # the rest of the intended message is a separate string statement in the source
         megatron_message="moe recompute is not supported with moe_router CUDA graph with: "),
    # Graphed recompute modules cannot draw random numbers (dropout). megatron-core's default
    # dropouts are 0.1; "whole layer" = no per-layer module listed (or a full-iteration graph).
    Rule(id="CUDA_GRAPH_ATTN_DROPOUT_RECOMPUTE", severity="error",
         when=GRAPH_ANY & (F("recompute_granularity") == "selective") & (F("attention_dropout") != 0.0)
         & Or(Has(F("recompute_modules"), "core_attn"), Not(IsSet(F("recompute_modules")))),
         require=Not(WHOLE_LAYER) & Not(Has(M, "attn")),
         message="recomputed core attention cannot be inside a CUDA graph while attention dropout is on", source=TC,
         fix="set attention_dropout: 0.0, drop core_attn from recompute.modules, or keep attn out of the graph",
         megatron_message="attention dropout is not supported with graphed attention recomputation."),
    Rule(id="CUDA_GRAPH_HIDDEN_DROPOUT_RECOMPUTE", severity="error",
         when=GRAPH_ANY & (F("recompute_granularity") == "selective") & (F("hidden_dropout") != 0.0),
         require=Or(Not(WHOLE_LAYER) & Not(Has(M, "mlp")), Not(Has(F("recompute_modules"), "mlp")))
         & Or(Not(WHOLE_LAYER) & Not(Has(M, "moe")), Not(Has(F("recompute_modules"), "moe"))),
         message="recomputed MLP/MoE modules cannot be inside a CUDA graph while hidden dropout is on", source=TC,
         fix="set hidden_dropout: 0.0, drop mlp/moe from recompute.modules, or graph only attn/moe_router",
         megatron_message="hidden dropout is not supported with graphed MLP/MoE recomputation."),
    # graphs on through any switch: megatron-core turns the deprecated two into cuda_graph_impl first
    Rule(id="CUDA_GRAPH_NEEDS_TE_RNG_TRACKER", severity="error", when=Or(IMPL != "none", ENABLE, EXTERNAL),
         require=F("use_te_rng_tracker").is_(True), message="CUDA graphs need Transformer Engine's RNG tracker",
         source=BRIDGE_GPT, fix="set cuda_graph.te_rng_tracker: true (or leave it auto)",
         megatron_message="Transformer engine's RNG tracker is required for cudagraphs, it can be enabled with "
                          "use_te_rng_tracker=True'.", origin="megatron-bridge",
         also=(("Megatron-LM arguments.py (turns it on, warning)",
                "te_rng_tracker is not enabled, enabling it for CUDA graphs."),)),
    Rule(id="CUDA_GRAPH_LOCAL_ONLY_FULL_ITERATION_IN_BRIDGE", severity="warning",
         when=(IMPL == "local") & Not(Has(M, "full_iteration")), require=IMPL != "local",
         message="Megatron-Bridge only accepts cuda_graph_impl=local for full-iteration graphs (Megatron-LM accepts "
                 "per-layer local graphs)", source=BRIDGE_CG,
         fix="use cuda_graph.impl: transformer_engine for scoped capture",
         megatron_message="Megatron Bridge supports model.cuda_graph_impl=\"local\" only for full-iteration CUDA "
                          "graphs{cuda_graph_scopes_msg}. Use model.cuda_graph_impl=\"transformer_engine\" for scoped "
                          "CUDA graph capture such as \"attn\" or \"mlp\".", origin="megatron-bridge"),
    Rule(id="CUDA_GRAPH_MODULES_WITHOUT_IMPL", severity="warning",
         when=(IMPL == "none") & Not(ENABLE) & Not(EXTERNAL) & Or(*[Has(M, m) for m in LAYER_SCOPES]),
         require=IMPL != "none",
         message="cuda_graph.modules is set but cuda_graph.impl is none: nothing is captured (Megatron-Bridge clears "
                 "the modules, yet still reads them for the delayed-wgrad checks)",
         source=f"{BRIDGE_CG}; Megatron-Bridge training/comm_overlap.py has_cuda_graph_module",
         fix="set cuda_graph.impl: transformer_engine, or clear cuda_graph.modules", megatron_message=None,
         origin="moeforge"),
    Rule(id="CUDA_GRAPH_FULL_ITERATION_STATIC_SHAPES", severity="advice",
         when=FULL_ITER & MOE_MODEL & Not(DROP_PAD) & Not(IsSet(F("moe_expert_rank_capacity_factor"))),
         require=Not(FULL_ITER),
         message="full-iteration CUDA graphs need static shapes; dropless MoE routes a different number of tokens "
                 "each step", source="seeds: perf-moe-optimization-workflow (CUDA graphs for MoE)",
         fix="for dropless MoE use TE-scoped graphs (attn, moe_router, moe_preprocess); keep full-iteration graphs "
             "for drop-and-pad or a fixed per-rank capacity (moe.expert_rank_capacity_factor)", megatron_message=None,
         origin="moeforge"),
)
