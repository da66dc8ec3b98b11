"""Precision: bf16/fp16, FP8 and FP4 recipes, the router's dtype, quantization padding.

megatron-core TransformerConfig.__post_init__ for the hard checks; the seeds' FP8 decision
table (Hopper: FP8 blockwise; Blackwell: MXFP8; NVFP4 on Blackwell once BF16/FP8 is
stable; keep the router in FP32) for the advice. MXFP8 and NVFP4 are Blackwell
(compute capability 10.x) tensor-core formats.
"""
from compiler.rules import Rule
from compiler.rules.expr import F, AtLeast, IsSet, Or, TE_INSTALLED

TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
SEEDS = "seeds: perf-moe-optimization-workflow (FP8 recipe quick decision)"
FP8, FP4 = IsSet(F("fp8")), IsSet(F("fp4"))
ON_GPU = F("device") == "cuda"
MOE = IsSet(F("num_moe_experts"))
BF16_ENDS = FP8 & (F("first_last_layers_bf16") == True)  # noqa: E712 - megatron-core checks these under fp8 only
REUSE = F("reuse_grad_buf_for_mxfp8_param_ag") == True  # noqa: E712
PAD_Q = Or(F("moe_router_padding_for_quantization") == True, F("moe_router_padding_for_fp8") == True)  # noqa: E712

# the Transformer Engine release with the fused MoE permutation kernels (moe_utils.fused_permute)
PERMUTE_FUSION_TE = "2.1.0"

RULES = (
    Rule("PRECISION_BF16_FP16_EXCLUSIVE", "error", F("bf16") == True, F("fp16") == False,  # noqa: E712
         "bf16 and fp16 are mutually exclusive", TC, "set precision.dtype to one of bf16, fp16",
         "Only one of self.fp16: {fp16} and self.bf16 {bf16} should be True.",
         also=(("megatron-bridge training/config.py _validate_mixed_precision_consistency",
                "Model config cannot have both bf16=True and fp16=True. Please set only one precision mode."),)),
    Rule("PRECISION_FP8_FP4_EXCLUSIVE", "error", FP4, ~FP8,
         "FP8 and FP4 are mutually exclusive", TC, "set only one of precision.fp8 and precision.fp4",
         "fp4 and fp8 cannot be used simultaneously. Please choose one."),
    Rule("PRECISION_FP8_PARAM_NEEDS_FP8", "error", F("fp8_param") == True, FP8,  # noqa: E712
         "FP8 parameters need FP8 mode", TC, "set precision.fp8, or precision.fp8_param: false",
         "fp8_param must be used together with fp8 mode."),
    Rule("PRECISION_FP4_PARAM_NEEDS_FP4", "error", F("fp4_param") == True, FP4,  # noqa: E712
         "FP4 parameters need FP4 mode", TC, "set precision.fp4, or precision.fp4_param: false",
         "fp4_param must be used together with fp4 mode."),
    Rule("PRECISION_LOW_NEEDS_TE", "error", Or(FP8, FP4), TE_INSTALLED,
         "FP8/FP4 training needs Transformer Engine", "Transformer Engine (megatron-core uses TE for FP8/FP4)",
         "use a platform with Transformer Engine, or unset precision.fp8/fp4", None, origin="moeforge"),
    Rule("PRECISION_FP8_PARAM_NEEDS_DIST_OPT_IN_MEGATRON_LM", "error", F("fp8_param") == True,  # noqa: E712
         Or(F("use_distributed_optimizer") == True, F("use_megatron_fsdp") == True),  # noqa: E712
         "FP8 parameters need the distributed optimizer in Megatron-LM (it gathers them in FP8)",
         "Megatron-LM megatron/training/arguments.py validate_args", "set optimizer.distributed: true, or "
         "precision.fp8_param: false",
         "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp, or inference mode",
         origin="megatron-lm"),
    Rule("PRECISION_FP4_NEEDS_TE_2_7", "error", FP4 & TE_INSTALLED,
         AtLeast("transformer_engine", "2.7.0"),
         "FP4 (NVFP4BlockScaling) needs Transformer Engine >= 2.7.0", "Megatron-LM megatron/training/arguments.py "
         "validate_args",
         "use a platform with TE >= 2.7.0, or unset precision.fp4",
         "--fp4-format requires Transformer Engine >= 2.7.0.dev0 for NVFP4BlockScaling support.", origin="megatron-lm",
         also=(("Megatron-Bridge training/mixed_precision.py MixedPrecisionConfig.finalize",
                "fp4 requires Transformer Engine >= 2.7.0.dev0 for NVFP4BlockScaling support."),)),
    Rule("PRECISION_MOE_FP8_NEEDS_TE_1_7", "error", MOE & FP8, AtLeast("transformer_engine", "1.7.0"),
         "MoE FP8 training needs Transformer Engine >= 1.7.0", TC, "use a platform with TE >= 1.7.0",
         "Only transformer-engine>=1.7.0 supports MoE FP8 training, but your version is {transformer_engine}."),
    Rule("PRECISION_FP8_GROUPED_GEMM_NEEDS_TE_1_11", "error", MOE & FP8 & (F("moe_grouped_gemm") == True),  # noqa: E712
         AtLeast("transformer_engine", "1.11.0"),
         "FP8 grouped GEMM needs Transformer Engine >= 1.11.0", TC, "use a platform with TE >= 1.11.0",
         "Only transformer-engine>=1.11.0 supports FP8 grouped gemm, but your version is {transformer_engine}."),
    Rule("PRECISION_FP8_DELAYED_NO_BF16_FIRST_LAST", "error", BF16_ENDS, F("fp8_recipe") != "delayed",
         "delayed-scaling FP8 cannot keep the first and last layers in BF16", TC,
         "set precision.fp8_recipe to tensorwise, blockwise or mxfp8, or first_last_layers_bf16: false",
         "Delayed scaling does not support first / last layer in BF16."),
    *[Rule(f"PRECISION_BF16_{end.upper()}_LAYERS_PER_STAGE", "error", BF16_ENDS,
           (F(f"num_layers_at_{end}_in_bf16") >= 0)
           & (F(f"num_layers_at_{end}_in_bf16") * F("pipeline_model_parallel_size") <= F("num_layers")),
           f"the BF16 layers at the {end} must fit in one pipeline stage", TC,
           f"set precision.num_layers_at_{end}_in_bf16 between 0 and num_layers / pp",
           f"num_layers_at_{end}_in_bf16 ({{num_layers_at_{end}_in_bf16}}) must be between 0 and number of layers "
           "per pipeline stage ({num_layers_per_pipeline_rank}).") for end in ("start", "end")],
    # a custom recipe builds its quantizers from a factory no front-end can be given (Megatron-LM 0.19 and
    # Megatron-Bridge have no argument for it): for a recipe, custom is refused
    *[Rule(f"PRECISION_{q.upper()}_CUSTOM_RECIPE_NEEDS_QUANTIZER_FACTORY", "error",
           IsSet(F(q)) & (F(f"{q}_recipe") == "custom"), IsSet(F(f"{q}_quantizer_factory")),
           f"a custom {q.upper()} recipe needs {q}_quantizer_factory, which neither Megatron-LM nor Megatron-Bridge "
           "can pass", TC, f"set precision.{q}_recipe to a built-in recipe",
           f"{q}_quantizer_factory must be provided when {q}_recipe is 'custom'. Specify a Python import path "
           f"(e.g., package.module.quantizer_factory) via --{q}-quantizer-factory.")
      for q in ("fp8", "fp4")],
    Rule("PRECISION_REUSE_GRAD_BUF_NEEDS_FP8_PARAM", "error", REUSE, F("fp8_param") == True,  # noqa: E712
         "the gradient buffer carries the parameter all-gather only for FP8 (MXFP8) parameters",
         "megatron-core distributed/distributed_data_parallel_config.py DistributedDataParallelConfig.__post_init__",
         "set precision.fp8_param: true, or precision.reuse_grad_buf_for_mxfp8_param_ag: false",
         "Reuse grad buffer only when keeping params in MXFP8."),
    Rule("PRECISION_MXFP8_WITHOUT_GRAD_BUF_REUSE_COSTS_MEMORY", "warning", FP8 & (F("fp8_recipe") == "mxfp8"),
         REUSE, "MXFP8 without FP8 parameters gathered through the gradient buffer keeps extra copies of the "
         "weights: significantly more GPU memory", "megatron-core optimizer/optimizer_config.py "
         "OptimizerConfig.__post_init__",
         "set precision.fp8_param: true (the solver then reuses the gradient buffer for their all-gather)",
         "mxfp8 without using reuse_grad_buf_for_mxfp8_param_ag and fp8_param_gatherwill use significant amount "
         "additional GPU memory.Setting --reuse-grad-buf-for-mxfp8-param-ag and --fp8-param-gather is recommended "
         "for mxfp8 training."),  # Megatron's words, run together as its source concatenates them
    Rule("PRECISION_MXFP8_PARAM_NEEDS_REUSE_GRAD_BUF_IN_BRIDGE", "error",
         FP8 & (F("fp8_recipe") == "mxfp8") & (F("fp8_param") == True)  # noqa: E712
         & (F("use_megatron_fsdp") == False),  # noqa: E712
         REUSE, "FP8 parameters under MXFP8 need their all-gather through the gradient buffer in Megatron-Bridge",
         "Megatron-Bridge training/config.py ConfigContainer.validate",
         "set precision.reuse_grad_buf_for_mxfp8_param_ag: true (Bridge's MXFP8 presets do), or "
         "precision.fp8_param: false",
         "When fp8_param_gather=True and fp8_recipe='mxfp8', reuse_grad_buf_for_mxfp8_param_ag must be set to True",
         origin="megatron-bridge"),
    Rule("PRECISION_MXFP8_NEEDS_BLACKWELL", "error", FP8 & (F("fp8_recipe") == "mxfp8") & ON_GPU,
         F("gpu_major") >= 10,
         "MXFP8 needs a Blackwell GPU (compute capability 10.x)", f"Transformer Engine MXFP8BlockScaling; {SEEDS}",
         "use precision.fp8_recipe: blockwise (Hopper) or tensorwise", None, origin="moeforge"),
    Rule("PRECISION_NVFP4_NEEDS_BLACKWELL", "error", FP4 & (F("fp4_recipe") == "nvfp4") & ON_GPU,
         F("gpu_major") >= 10,
         "NVFP4 needs a Blackwell GPU (compute capability 10.x)", f"Transformer Engine NVFP4BlockScaling; {SEEDS}",
         "unset precision.fp4 (use FP8 on Hopper)", None, origin="moeforge"),
    Rule("PRECISION_FP8_NEEDS_HOPPER", "warning", FP8 & ON_GPU, F("gpu_major") >= 9,
         "FP8 tensor cores need Hopper or newer (Ada 8.9 is not modelled)",
         "Transformer Engine (FP8 needs compute capability >= 8.9)",
         "unset precision.fp8 on this GPU", None, origin="moeforge"),
    Rule("PRECISION_FP8_RECIPE_FOR_HOPPER", "advice", FP8 & (F("gpu_major") == 9), F("fp8_recipe") == "blockwise",
         "on Hopper the recommended FP8 starting recipe is blockwise", SEEDS,
         "set precision.fp8_recipe: blockwise", None, origin="moeforge"),
    Rule("PRECISION_FP8_RECIPE_FOR_BLACKWELL", "advice", FP8 & (F("gpu_major") >= 10), F("fp8_recipe") == "mxfp8",
         "on Blackwell the recommended FP8 starting recipe is MXFP8", SEEDS,
         "set precision.fp8_recipe: mxfp8", None, origin="moeforge"),
    # One concern, one rule: from 32 experts on megatron-core itself warns (PRECISION_ROUTER_DTYPE_MANY_EXPERTS,
    # below); the seeds' advice covers the MoE models under that.
    Rule("PRECISION_ROUTER_FP32", "advice", MOE & ON_GPU & (F("num_moe_experts") < 32), IsSet(F("moe_router_dtype")),
         "keep the MoE router in FP32 (the big wins come from expert GEMMs, not from quantizing the router)",
         SEEDS, "set moe.router.dtype: fp32", None, origin="moeforge"),
    Rule("PRECISION_ROUTER_DTYPE_MANY_EXPERTS", "warning", F("num_moe_experts") >= 32, IsSet(F("moe_router_dtype")),
         "32 or more experts without an FP32 router", TC, "set moe.router.dtype: fp32",
         "Using a large number of experts (e.g. >=32) without fp32 routing. Consider enabling "
         "moe_router_dtype for better numerical stability."),
    Rule("ROUTER_PADDING_NEEDS_FP8_OR_FP4", "error", PAD_Q, Or(FP8, FP4),
         "router padding for quantization needs FP8 or FP4", TC,
         "set precision.fp8 (or fp4), or moe.router.padding_for_quantization: false",
         "fp8/fp4 must be specified when moe_router_padding_for_quantization is True."),
    Rule("ROUTER_PADDING_NOT_ALLGATHER", "error", PAD_Q, F("moe_token_dispatcher_type") != "allgather",
         "router padding for quantization does not work with the allgather dispatcher", TC,
         "set moe.dispatcher: alltoall or flex",
         "allgather and alltoall_seq dispatcher does not support moe_router_padding_for_quantization."),
    Rule("ROUTER_PADDING_FP8_DEPRECATED", "warning", F("moe_router_padding_for_fp8") == True,  # noqa: E712
         F("moe_router_padding_for_fp8") == False,  # noqa: E712
         "moe_router_padding_for_fp8 is deprecated", TC, "use moe_router_padding_for_quantization",
         "--moe-router-padding-for-fp8 is going to be deprecated. Use --moe-router-padding-for-quantization "
         "instead.", lint_only=True),
    Rule("PERMUTE_FUSION_NEEDS_TE_2_1", "error", F("moe_permute_fusion") == True,  # noqa: E712
         AtLeast("transformer_engine", PERMUTE_FUSION_TE),
         "fused MoE permutation needs Transformer Engine >= 2.1.0", TC,
         "set moe.permute_fusion: false, or use a platform with TE >= 2.1.0",
         "fused permutation is not available. Please install TE >= 2.1.0."),
    # the fused router kernels are Transformer Engine's; the router asks for them at its first forward step
    Rule("ROUTER_FUSION_NEEDS_TE_2_6", "error", F("moe_router_fusion") == True,  # noqa: E712
         AtLeast("transformer_engine", "2.6.0"),
         "the fused MoE router (moe_router_fusion) needs Transformer Engine >= 2.6.0",
         "megatron-core transformer/moe/moe_utils.py topk_routing_with_score_function (the router's first forward)",
         "set kernels.moe_router_fusion: false, or use a platform with TE >= 2.6.0",
         "fused_topk_with_score_function is not available. Please install TE >= 2.6.0."),
)
