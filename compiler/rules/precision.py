"""Precision: bf16/fp16, FP8 and FP4 recipes, the router's dtype, quantization padding.

megatron-core TransformerConfig.__post_init__ for the hard checks; the seeds' FP8 decision
table (Hopper: FP8 blockwise; Blackwell: MXFP8; NVFP4 on Blackwell once BF16/FP8 is
stable; keep the router in FP32) for the advice. MXFP8 and NVFP4 are Blackwell
(compute capability 10.x) tensor-core formats.
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, AtLeast, IsSet, Or, TE_INSTALLED

TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
SEEDS = "seeds: perf-moe-optimization-workflow (FP8 recipe quick decision)"
FP8, FP4 = IsSet(F("fp8")), IsSet(F("fp4"))
ON_GPU = F("device") == "cuda"
MOE = IsSet(F("num_moe_experts"))
BF16_ENDS = FP8 & F("first_last_layers_bf16").is_(True)  # megatron-core checks these under fp8 only
REUSE = F("reuse_grad_buf_for_mxfp8_param_ag").is_(True)
PAD_Q = Or(F("moe_router_padding_for_quantization").is_(True), F("moe_router_padding_for_fp8").is_(True))

# the Transformer Engine release with the fused MoE permutation kernels (moe_utils.fused_permute)
PERMUTE_FUSION_TE = "2.1.0"

RULES = (
    Rule(id="PRECISION_BF16_FP16_EXCLUSIVE", severity="error", when=F("bf16").is_(True), require=F("fp16").is_(False),
         message="bf16 and fp16 are mutually exclusive", source=TC, fix="set precision.dtype to one of bf16, fp16",
         megatron_message="Only one of self.fp16: {fp16} and self.bf16 {bf16} should be True.",
         also=(("megatron-bridge training/config.py _validate_mixed_precision_consistency",
                "Model config cannot have both bf16=True and fp16=True. Please set only one precision mode."),)),
    Rule(id="PRECISION_FP8_FP4_EXCLUSIVE", severity="error", when=FP4, require=~FP8,
         message="FP8 and FP4 are mutually exclusive", source=TC, fix="set only one of precision.fp8 and precision.fp4",
         megatron_message="fp4 and fp8 cannot be used simultaneously. Please choose one."),
    Rule(id="PRECISION_FP8_PARAM_NEEDS_FP8", severity="error", when=F("fp8_param").is_(True), require=FP8,
         message="FP8 parameters need FP8 mode", source=TC, fix="set precision.fp8, or precision.fp8_param: false",
         megatron_message="fp8_param must be used together with fp8 mode."),
    Rule(id="PRECISION_FP4_PARAM_NEEDS_FP4", severity="error", when=F("fp4_param").is_(True), require=FP4,
         message="FP4 parameters need FP4 mode", source=TC, fix="set precision.fp4, or precision.fp4_param: false",
         megatron_message="fp4_param must be used together with fp4 mode."),
    Rule(id="PRECISION_LOW_NEEDS_TE", severity="error", when=Or(FP8, FP4), require=TE_INSTALLED,
         message="FP8/FP4 training needs Transformer Engine",
         source="Transformer Engine (megatron-core uses TE for FP8/FP4)",
         fix="use a platform with Transformer Engine, or unset precision.fp8/fp4", megatron_message=None,
         origin="moeforge"),
    Rule(id="PRECISION_FP8_PARAM_NEEDS_DIST_OPT_IN_MEGATRON_LM", severity="error", when=F("fp8_param").is_(True),
         require=Or(F("use_distributed_optimizer").is_(True), F("use_megatron_fsdp").is_(True)),
         message="FP8 parameters need the distributed optimizer in Megatron-LM (it gathers them in FP8)",
         source="Megatron-LM megatron/training/arguments.py validate_args",
         fix="set optimizer.distributed: true, or precision.fp8_param: false",
         megatron_message="--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp, "
                          "or inference mode", origin="megatron-lm"),
    Rule(id="PRECISION_FP4_NEEDS_TE_2_7", severity="error", when=FP4 & TE_INSTALLED,
         require=AtLeast("transformer_engine", "2.7.0"),
         message="FP4 (NVFP4BlockScaling) needs Transformer Engine >= 2.7.0",
         source="Megatron-LM megatron/training/arguments.py validate_args",
         fix="use a platform with TE >= 2.7.0, or unset precision.fp4",
         megatron_message="--fp4-format requires Transformer Engine >= 2.7.0.dev0 for NVFP4BlockScaling support.",
         origin="megatron-lm", also=(("Megatron-Bridge training/mixed_precision.py MixedPrecisionConfig.finalize",
                                      "fp4 requires Transformer Engine >= 2.7.0.dev0 for NVFP4BlockScaling support."),)),
    Rule(id="PRECISION_MOE_FP8_NEEDS_TE_1_7", severity="error", when=MOE & FP8,
         require=AtLeast("transformer_engine", "1.7.0"), message="MoE FP8 training needs Transformer Engine >= 1.7.0",
         source=TC, fix="use a platform with TE >= 1.7.0",
         megatron_message="Only transformer-engine>=1.7.0 supports MoE FP8 training, but your version is "
                          "{transformer_engine}."),
    Rule(id="PRECISION_FP8_GROUPED_GEMM_NEEDS_TE_1_11", severity="error",
         when=MOE & FP8 & F("moe_grouped_gemm").is_(True), require=AtLeast("transformer_engine", "1.11.0"),
         message="FP8 grouped GEMM needs Transformer Engine >= 1.11.0", source=TC,
         fix="use a platform with TE >= 1.11.0",
         megatron_message="Only transformer-engine>=1.11.0 supports FP8 grouped gemm, but your version is "
                          "{transformer_engine}."),
    Rule(id="PRECISION_FP8_DELAYED_NO_BF16_FIRST_LAST", severity="error", when=BF16_ENDS,
         require=F("fp8_recipe") != "delayed",
         message="delayed-scaling FP8 cannot keep the first and last layers in BF16", source=TC,
         fix="set precision.fp8_recipe to tensorwise, blockwise or mxfp8, or first_last_layers_bf16: false",
         megatron_message="Delayed scaling does not support first / last layer in BF16."),
    *[Rule(id=f"PRECISION_BF16_{end.upper()}_LAYERS_PER_STAGE", severity="error", when=BF16_ENDS,
           require=(F(f"num_layers_at_{end}_in_bf16") >= 0)
           & (F(f"num_layers_at_{end}_in_bf16") * F("pipeline_model_parallel_size") <= F("num_layers")),
           message=f"the BF16 layers at the {end} must fit in one pipeline stage", source=TC,
           fix=f"set precision.num_layers_at_{end}_in_bf16 between 0 and num_layers / pp",
           megatron_message=f"num_layers_at_{end}_in_bf16 ({{num_layers_at_{end}_in_bf16}}) must be between 0 and number of layers "
           "per pipeline stage ({num_layers_per_pipeline_rank}).") for end in ("start", "end")],
    # a custom recipe builds its quantizers from a factory no front-end can be given (Megatron-LM 0.19 and
    # Megatron-Bridge have no argument for it): for a recipe, custom is refused
    *[Rule(id=f"PRECISION_{q.upper()}_CUSTOM_RECIPE_NEEDS_QUANTIZER_FACTORY", severity="error",
           when=IsSet(F(q)) & (F(f"{q}_recipe") == "custom"), require=IsSet(F(f"{q}_quantizer_factory")),
           message=f"a custom {q.upper()} recipe needs {q}_quantizer_factory, which neither Megatron-LM nor Megatron-Bridge "
           "can pass", source=TC, fix=f"set precision.{q}_recipe to a built-in recipe",
           megatron_message=f"{q}_quantizer_factory must be provided when {q}_recipe is 'custom'. Specify a Python import path "
           f"(e.g., package.module.quantizer_factory) via --{q}-quantizer-factory.")
      for q in ("fp8", "fp4")],
    Rule(id="PRECISION_REUSE_GRAD_BUF_NEEDS_FP8_PARAM", severity="error", when=REUSE, require=F("fp8_param").is_(True),
         message="the gradient buffer carries the parameter all-gather only for FP8 (MXFP8) parameters",
         source="megatron-core distributed/distributed_data_parallel_config.py "
                "DistributedDataParallelConfig.__post_init__",
         fix="set precision.fp8_param: true, or precision.reuse_grad_buf_for_mxfp8_param_ag: false",
         megatron_message="Reuse grad buffer only when keeping params in MXFP8."),
    Rule(id="PRECISION_MXFP8_WITHOUT_GRAD_BUF_REUSE_COSTS_MEMORY", severity="warning",
         when=FP8 & (F("fp8_recipe") == "mxfp8"), require=REUSE,
         message="MXFP8 without FP8 parameters gathered through the gradient buffer keeps extra copies of the "
                 "weights: significantly more GPU memory",
         source="megatron-core optimizer/optimizer_config.py OptimizerConfig.__post_init__",
         fix="set precision.fp8_param: true (the solver then reuses the gradient buffer for their all-gather)",
         # Megatron's words, run together as its source concatenates them
         megatron_message="mxfp8 without using reuse_grad_buf_for_mxfp8_param_ag and fp8_param_gatherwill use "
                          "significant amount additional GPU memory.Setting --reuse-grad-buf-for-mxfp8-param-ag and "
                          "--fp8-param-gather is recommended for mxfp8 training."),
    Rule(id="PRECISION_MXFP8_PARAM_NEEDS_REUSE_GRAD_BUF_IN_BRIDGE", severity="error",
         when=FP8 & (F("fp8_recipe") == "mxfp8") & F("fp8_param").is_(True)
         & F("use_megatron_fsdp").is_(False), require=REUSE,
         message="FP8 parameters under MXFP8 need their all-gather through the gradient buffer in Megatron-Bridge",
         source="Megatron-Bridge training/config.py ConfigContainer.validate",
         fix="set precision.reuse_grad_buf_for_mxfp8_param_ag: true (Bridge's MXFP8 presets do), or "
             "precision.fp8_param: false",
         megatron_message="When fp8_param_gather=True and fp8_recipe='mxfp8', reuse_grad_buf_for_mxfp8_param_ag must "
                          "be set to True", origin="megatron-bridge"),
    Rule(id="PRECISION_MXFP8_NEEDS_BLACKWELL", severity="error", when=FP8 & (F("fp8_recipe") == "mxfp8") & ON_GPU,
         require=F("gpu_major") >= 10, message="MXFP8 needs a Blackwell GPU (compute capability 10.x)",
         source=f"Transformer Engine MXFP8BlockScaling; {SEEDS}",
         fix="use precision.fp8_recipe: blockwise (Hopper) or tensorwise", megatron_message=None, origin="moeforge"),
    Rule(id="PRECISION_NVFP4_NEEDS_BLACKWELL", severity="error", when=FP4 & (F("fp4_recipe") == "nvfp4") & ON_GPU,
         require=F("gpu_major") >= 10, message="NVFP4 needs a Blackwell GPU (compute capability 10.x)",
         source=f"Transformer Engine NVFP4BlockScaling; {SEEDS}", fix="unset precision.fp4 (use FP8 on Hopper)",
         megatron_message=None, origin="moeforge"),
    Rule(id="PRECISION_FP8_NEEDS_HOPPER", severity="warning", when=FP8 & ON_GPU, require=F("gpu_major") >= 9,
         message="FP8 tensor cores need Hopper or newer (Ada 8.9 is not modelled)",
         source="Transformer Engine (FP8 needs compute capability >= 8.9)", fix="unset precision.fp8 on this GPU",
         megatron_message=None, origin="moeforge"),
    Rule(id="PRECISION_FP8_RECIPE_FOR_HOPPER", severity="advice", when=FP8 & (F("gpu_major") == 9),
         require=F("fp8_recipe") == "blockwise", message="on Hopper the recommended FP8 starting recipe is blockwise",
         source=SEEDS, fix="set precision.fp8_recipe: blockwise", megatron_message=None, origin="moeforge"),
    Rule(id="PRECISION_FP8_RECIPE_FOR_BLACKWELL", severity="advice", when=FP8 & (F("gpu_major") >= 10),
         require=F("fp8_recipe") == "mxfp8", message="on Blackwell the recommended FP8 starting recipe is MXFP8",
         source=SEEDS, fix="set precision.fp8_recipe: mxfp8", megatron_message=None, origin="moeforge"),
    # One concern, one rule: from 32 experts on megatron-core itself warns (PRECISION_ROUTER_DTYPE_MANY_EXPERTS,
    # below); the seeds' advice covers the MoE models under that.
    Rule(id="PRECISION_ROUTER_FP32", severity="advice", when=MOE & ON_GPU & (F("num_moe_experts") < 32),
         require=IsSet(F("moe_router_dtype")),
         message="keep the MoE router in FP32 (the big wins come from expert GEMMs, not from quantizing the router)",
         source=SEEDS, fix="set moe.router.dtype: fp32", megatron_message=None, origin="moeforge"),
    Rule(id="PRECISION_ROUTER_DTYPE_MANY_EXPERTS", severity="warning", when=F("num_moe_experts") >= 32,
         require=IsSet(F("moe_router_dtype")), message="32 or more experts without an FP32 router", source=TC,
         fix="set moe.router.dtype: fp32",
         megatron_message="Using a large number of experts (e.g. >=32) without fp32 routing. Consider enabling "
                          "moe_router_dtype for better numerical stability."),
    Rule(id="ROUTER_PADDING_NEEDS_FP8_OR_FP4", severity="error", when=PAD_Q, require=Or(FP8, FP4),
         message="router padding for quantization needs FP8 or FP4", source=TC,
         fix="set precision.fp8 (or fp4), or moe.router.padding_for_quantization: false",
         megatron_message="fp8/fp4 must be specified when moe_router_padding_for_quantization is True."),
    Rule(id="ROUTER_PADDING_NOT_ALLGATHER", severity="error", when=PAD_Q,
         require=F("moe_token_dispatcher_type") != "allgather",
         message="router padding for quantization does not work with the allgather dispatcher", source=TC,
         fix="set moe.dispatcher: alltoall or flex",
         megatron_message="allgather and alltoall_seq dispatcher does not support moe_router_padding_for_quantization."),
    Rule(id="ROUTER_PADDING_FP8_DEPRECATED", severity="warning", when=F("moe_router_padding_for_fp8").is_(True),
         require=F("moe_router_padding_for_fp8").is_(False), message="moe_router_padding_for_fp8 is deprecated",
         source=TC, fix="use moe_router_padding_for_quantization",
         megatron_message="--moe-router-padding-for-fp8 is going to be deprecated. Use "
                          "--moe-router-padding-for-quantization instead.", lint_only=True),
    Rule(id="PERMUTE_FUSION_NEEDS_TE_2_1", severity="error", when=F("moe_permute_fusion").is_(True),
         require=AtLeast("transformer_engine", PERMUTE_FUSION_TE),
         message="fused MoE permutation needs Transformer Engine >= 2.1.0", source=TC,
         fix="set moe.permute_fusion: false, or use a platform with TE >= 2.1.0",
         megatron_message="fused permutation is not available. Please install TE >= 2.1.0."),
    # the fused router kernels are Transformer Engine's; the router asks for them at its first forward step
    Rule(id="ROUTER_FUSION_NEEDS_TE_2_6", severity="error", when=F("moe_router_fusion").is_(True),
         require=AtLeast("transformer_engine", "2.6.0"),
         message="the fused MoE router (moe_router_fusion) needs Transformer Engine >= 2.6.0",
         source="megatron-core transformer/moe/moe_utils.py topk_routing_with_score_function (the router's first "
                "forward)", fix="set kernels.moe_router_fusion: false, or use a platform with TE >= 2.6.0",
         megatron_message="fused_topk_with_score_function is not available. Please install TE >= 2.6.0."),
)
