"""Kernel choices: fusions that keep the math but exist only under some conditions.

Megatron-LM turns its fusions on by default and off again where they cannot run; megatron-core
defaults them off. The plan states each one (moeforge.compiler.knobs.table, `kernels.*`), so what Megatron-LM
rewrites at start-up must be known here.
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.architecture import ACT, GATED
from moeforge.compiler.rules.cuda_graphs import FULL_ITER
from moeforge.compiler.rules.expr import F, AtLeast, IsSet, Not, Or, TE_INSTALLED

ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
FUSED = F("bias_activation_fusion").is_(True)
SWIGLU = (ACT == "silu") & GATED
TE_EXT = "megatron-core extensions/transformer_engine.py (built with the model)"
DENSE_LAYERS = Or(Not(IsSet(F("num_moe_experts"))), F("moe_layer_freq") != 1)
# Without Transformer Engine the runtime builds megatron-core's local layer spec, whose norms are the plain torch
# norm: always for RMSNorm, and for LayerNorm unless APEX is installed (models/backends.py LocalSpecProvider.layer_norm,
# gpt_layer_specs.py LNImpl: APEX's FusedLayerNorm). The platform says whether APEX is (platform.software.apex; unset:
# installed with TE, absent without, as in the environments moeforge's CPU runtime runs in).
LOCAL_SPEC = Not(TE_INSTALLED)
APEX = F("apex_installed").is_(True)
RMSNORM = F("normalization") == "RMSNorm"
TORCH_NORM_BUILT = LOCAL_SPEC & Or(Not(APEX), RMSNORM)
TORCH_NORM = ("megatron-core transformer/torch_norm.py WrappedTorchNorm (the local spec's norm: models/gpt/"
              "gpt_layer_specs.py LNImpl, models/backends.py LocalSpecProvider.layer_norm), when the model is built")
NO_TE_FIX = "use a platform with Transformer Engine (its layer spec builds TENorm)"
# ... and its core attention is megatron-core's DotProductAttention (TE's spec: TEDotProductAttention)
LOCAL_ATTENTION = ("megatron-core transformer/dot_product_attention.py DotProductAttention (the local spec's core "
                   "attention: models/backends.py LocalSpecProvider.core_attention), when the model is built")

RULES = (
    # WrappedTorchNorm's checks, in its order; no front-end checks them before the model is built
    Rule(id="TORCH_NORM_NO_ZERO_CENTERED_GAMMA", severity="error", when=TORCH_NORM_BUILT,
         require=Not(F("layernorm_zero_centered_gamma").is_(True)),
         message="without Transformer Engine the norms are megatron-core's torch norm, which has no zero-centred gamma",
         source=TORCH_NORM, fix=NO_TE_FIX, megatron_message="zero_centered_gamma not supported by torch LayerNorm"),
    Rule(id="TORCH_NORM_NO_PERSIST", severity="error", when=TORCH_NORM_BUILT,
         require=Not(F("persist_layer_norm").is_(True)),
         message="without Transformer Engine the norms are megatron-core's torch norm, which has no persistent kernel",
         source=TORCH_NORM, fix=f"set kernels.persist_layer_norm: false, or {NO_TE_FIX}",
         megatron_message="persist_layer_norm not supported by torch LayerNorm"),
    Rule(id="TORCH_NORM_NO_SEQUENCE_PARALLEL", severity="error", when=TORCH_NORM_BUILT,
         require=Not(F("sequence_parallel").is_(True)),
         message="without Transformer Engine the norms are megatron-core's torch norm, which refuses sequence "
                 "parallelism", source=TORCH_NORM, fix=f"set parallelism.sp: false, or {NO_TE_FIX}",
         megatron_message="sequence parallel not supported by torch LayerNorm"),
    # ... while with APEX the decoder block's final norm is gpt_layer_specs' LNImpl, APEX's FusedLayerNorm, for RMSNorm
    # too (get_gpt_decoder_block_spec without TE; the layers' own norms stay torch's)
    Rule(id="LOCAL_SPEC_APEX_NORM_NO_RMSNORM", severity="error", when=LOCAL_SPEC & APEX, require=Not(RMSNORM),
         message="without Transformer Engine and with APEX installed, megatron-core's local spec builds the decoder "
                 "block's final norm as APEX's FusedLayerNorm, which has no RMSNorm",
         source="megatron-core models/gpt/gpt_layer_specs.py get_gpt_decoder_block_spec (LNImpl) and "
                "fusions/fused_layer_norm.py FusedLayerNorm, when the model is built",
         fix=f"{NO_TE_FIX}, or state platform.software.apex: false where APEX is not installed",
         megatron_message="(RMSNorm) is not supported in FusedLayerNorm"),
    Rule(id="LOCAL_ATTENTION_NO_CONTEXT_PARALLEL", severity="error", when=LOCAL_SPEC,
         require=F("context_parallel_size") == 1,
         message="without Transformer Engine the core attention is megatron-core's DotProductAttention, which has no "
                 "context parallelism", source=LOCAL_ATTENTION,
         fix="set parallelism.cp: 1, or use a platform with Transformer Engine (TEDotProductAttention)",
         megatron_message="Context parallelism is only supported by TEDotProductAttention!"),
    # MultiLatentAttention builds its core attention with k_channels/v_channels (query/key and value head sizes
    # differ), which DotProductAttention.__init__ does not take: a TypeError of Python's, not a check of megatron's.
    # It comes first: 0.19's refusal of the local spec's separate query norm without a query LoRA
    # (transformer/mla_qk_norm_config.py) is only reached after it.
    Rule(id="LOCAL_ATTENTION_NO_MLA", severity="error", when=F("multi_latent_attention").is_(True),
         require=TE_INSTALLED,
         message="without Transformer Engine the core attention is megatron-core's DotProductAttention, which cannot "
                 "build multi-latent attention (it takes no separate key and value head sizes)", source=LOCAL_ATTENTION,
         fix="use a platform with Transformer Engine (TEDotProductAttention)", megatron_message=None, origin="moeforge"),
    # Megatron's own fused kernels are APEX's CUDA extensions (platform.software.apex, as for the local spec's norm).
    # The local attention's softmax takes its kernel for half precision at these shapes (ModuleNotFoundError at the
    # first forward step: no megatron text); with TE, TEDotProductAttention has its own.
    Rule(id="LOCAL_SOFTMAX_FUSION_NEEDS_APEX", severity="error",
         when=LOCAL_SPEC & Not(APEX) & F("masked_softmax_fusion").is_(True)
         & Or(F("bf16").is_(True), F("fp16").is_(True)) & IsSet(F("seq_length"))
         & (F("seq_length") > 16) & (F("seq_length") <= 4096) & (F("seq_length") % 4 == 0)
         & ((F("micro_batch_size") * F("num_attention_heads") // F("tensor_model_parallel_size")) % 4 == 0),
         require=F("masked_softmax_fusion").is_(False),
         message="without Transformer Engine the attention softmax fusion runs APEX's scaled_masked_softmax_cuda "
                 "kernel (16 < seq <= 4096, seq and micro-batch x heads per TP rank multiples of 4), which is not "
                 "installed",
         source="megatron-core fusions/fused_softmax.py FusedScaleMaskSoftmax.is_kernel_available (the local "
                "DotProductAttention's softmax), at the first forward step",
         fix="set kernels.masked_softmax_fusion: false, or use a platform with Transformer Engine (or with APEX's "
             "CUDA extensions: platform.software.apex: true)", megatron_message=None, origin="moeforge"),
    # the output layer is megatron-core's ColumnParallelLinear whatever the spec (TE's own layers fuse without APEX):
    # a pip environment with TE alone stops here (platform.software.apex: false)
    Rule(id="GRAD_ACC_FUSION_NEEDS_APEX", severity="error", when=Not(APEX),
         require=Not(F("gradient_accumulation_fusion").is_(True)),
         message="gradient accumulation fusion needs APEX's fused_weight_gradient_mlp_cuda in megatron-core's own "
                 "linear layers (the output layer, whatever the spec), and the platform has no APEX",
         source="megatron-core tensor_parallel/layers.py ColumnParallelLinear, when the model is built",
         fix="set training.gradient_accumulation_fusion: false, or install APEX with its CUDA extensions "
             "(platform.software.apex: true)",
         megatron_message="ColumnParallelLinear was called with gradient_accumulation_fusion set to True but the "
                          "custom CUDA extension fused_weight_gradient_mlp_cuda module is not found. To use "
                          "gradient_accumulation_fusion you must install APEX with --cpp_ext and --cuda_ext. For "
                          "example: pip install --global-option=\"--cpp_ext\" --global-option=\"--cuda_ext .\" Note "
                          "that the extension requires CUDA>=11. Otherwise, you must turn off gradient accumulation "
                          "fusion."),
    # Megatron-LM 0.19 refuses TE's fused cross entropy (Megatron-Bridge's DeepSeek recipes still use it)
    Rule(id="CROSS_ENTROPY_TE_FUSION_NOT_IN_MEGATRON_LM", severity="error",
         when=F("cross_entropy_loss_fusion").is_(True), require=F("cross_entropy_fusion_impl") != "te",
         message="Megatron-LM 0.19 refuses Transformer Engine's fused cross entropy (stability issues)", source=ARGS,
         fix="set kernels.cross_entropy_fusion_impl: native, or kernels.cross_entropy_loss_fusion: false",
         megatron_message="Transformer Engine cross entropy loss fusion is disabled due to stability issues. Use "
                          "--cross-entropy-fusion-impl native, or omit --cross-entropy-loss-fusion.",
         origin="megatron-lm", versions=(("megatron_core", ">=0.19.0"),)),
    Rule(id="ROPE_FUSION_NEEDS_PLAIN_ROPE", severity="warning", when=F("apply_rope_fusion").is_(True),
         require=F("position_embedding_type") == "rope",
         message="the fused RoPE kernel applies to plain RoPE only; Megatron-LM turns it off for other position "
                 "embeddings (YaRN, learned, none)", source=ARGS, fix="set kernels.apply_rope_fusion: false",
         megatron_message=None, origin="megatron-lm", silent={"apply_rope_fusion": False}),
    # validate_args reads args.spec[0]; moeforge never emits --spec (Megatron-LM's GPT builder imports a
    # <module function> pair from it, so no --spec value gives the local layer spec with this backend)
    Rule(id="ATTENTION_BACKEND_LOCAL_NOT_IN_MEGATRON_LM", severity="error", when=F("attention_backend") == "local",
         require=F("attention_backend") != "local",
         message="Megatron-LM accepts attention_backend local only with --spec local, which its GPT model builder "
                 "cannot load", source=ARGS,
         fix="set kernels.attention_backend: auto (or unfused for the non-fused kernel)",
         megatron_message="--attention-backend local is only supported with --spec local", origin="megatron-lm"),
    # the fused kernel is Transformer Engine's (rope_utils imports it from megatron.core.extensions); MLA only warns
    Rule(id="ROPE_FUSION_NEEDS_TE", severity="error", when=F("apply_rope_fusion").is_(True)
         & F("multi_latent_attention").is_(False), require=AtLeast("transformer_engine", "1.4.0"),
         message="the fused RoPE kernel is Transformer Engine's (>= 1.4)", source=TC,
         fix="set kernels.apply_rope_fusion: false, or use a platform with Transformer Engine >= 1.4",
         megatron_message="apply_rope_fusion is not available. Please install TE >= 1.4."),
    # validate_args asks torch.cuda for the compute capability (megatron-core itself falls back to SequentialMLP
    # on the local spec from 0.18, and TE's grouped GEMM runs on Ampere and later)
    Rule(id="MOE_GROUPED_GEMM_NEEDS_AMPERE_IN_MEGATRON_LM", severity="error", when=F("moe_grouped_gemm").is_(True),
         require=F("gpu_major") >= 8,
         message="Megatron-LM runs grouped-GEMM experts only on an Ampere or newer GPU (compute capability >= 8)",
         source=ARGS,
         fix="set moe.grouped_gemm: false (SequentialMLP experts), or use a platform with an Ampere or newer GPU",
         megatron_message="Unsupported compute capability for GroupedGEMM kernels.", origin="megatron-lm"),
    # raised at the first loss: TE's fused cross entropy inside a full-iteration graph (Bridge keeps TE's impl)
    Rule(id="CROSS_ENTROPY_TE_FUSION_FULL_ITERATION_NEEDS_TE_2_7", severity="error",
         when=F("cross_entropy_loss_fusion").is_(True) & (F("cross_entropy_fusion_impl") == "te")
         & FULL_ITER & TE_INSTALLED, require=AtLeast("transformer_engine", "2.7.0"),
         message="Transformer Engine's fused cross entropy inside a full-iteration CUDA graph needs TE >= 2.7.0",
         source="megatron-core models/common/language_module/language_module.py compute_language_model_loss",
         fix="set kernels.cross_entropy_fusion_impl: native, or use a platform with TE >= 2.7.0",
         megatron_message="CUDA graph compatible cross entropy requires TransformerEngine >= 2.7.0, but found version "
                          "{transformer_engine}. Please upgrade TransformerEngine or set cuda_graph_impl to a value "
                          "other than 'full_iteration'."),
    # raised while building the model (the TE layer spec's grouped experts), so no config check sees it;
    # Megatron-Bridge's GPT-OSS bridge turns the fusion off for this reason
    Rule(id="BIAS_DROPOUT_FUSION_NOT_WITH_BIASED_TE_GROUPED_EXPERTS", severity="error",
         when=F("add_bias_linear").is_(True) & F("moe_grouped_gemm").is_(True) & IsSet(F("num_moe_experts"))
         & F("moe_use_legacy_grouped_gemm").is_(False) & TE_INSTALLED, require=F("bias_dropout_fusion").is_(False),
         message="Transformer Engine's grouped experts (TEGroupedMLP) refuse the fused bias-dropout when the linear "
                 "layers have biases", source="megatron-core transformer/moe/experts.py TEGroupedMLP.__init__",
         fix="set kernels.bias_dropout_fusion: false (Megatron-Bridge's GPT-OSS bridge does)",
         megatron_message="bias_dropout_fusion is not supported in TEGroupedMLP when add_bias_linear=True"),
    # raised while building the model (SharedExpertMLP), whatever the layer spec
    Rule(id="SHARED_EXPERTS_NO_LINEAR_BIAS", severity="error",
         when=IsSet(F("num_moe_experts")) & IsSet(F("moe_shared_expert_intermediate_size")),
         require=F("add_bias_linear").is_(False),
         message="megatron-core's shared experts have no linear bias (a model with add_bias_linear cannot have them)",
         source="megatron-core transformer/moe/shared_experts.py SharedExpertMLP.__init__",
         fix="set model.architecture.add_bias_linear: false, or unset model.moe.shared_expert_intermediate_size",
         megatron_message="bias is not supported in the shared experts, "),
    Rule(id="SOFTMAX_TYPE_NEEDS_TE_2_8", severity="error", when=(F("softmax_type") != "vanilla") & TE_INSTALLED,
         require=AtLeast("transformer_engine", "2.8.0"),
         message="attention sinks (softmax_type other than vanilla) need Transformer Engine >= 2.8.0", source=TE_EXT,
         fix="use a platform with TE >= 2.8.0",
         megatron_message="Transformer-Engine v{transformer_engine} must be >= 2.8.0 to support`softmax_type`."),
    # the dense MLP layers under the op fuser are TEFusedMLP, whose activations are TE ops (SiLU from TE 2.8)
    Rule(id="TE_OP_FUSER_DENSE_MLP_ACTIVATION", severity="error",
         when=F("use_transformer_engine_op_fuser").is_(True) & TE_INSTALLED & DENSE_LAYERS,
         require=Or(ACT == "gelu", (ACT == "silu") & Or(GATED, AtLeast("transformer_engine", "2.8.0"))),
         message="Transformer Engine's op fuser builds the dense MLP layers from GELU, GEGLU, SwiGLU (and SiLU from "
                 "TE 2.8) only", source=TE_EXT, fix="set training.te_op_fuser: false",
         megatron_message="Transformer Engine operation-based API does not support activation_func={activation_func}, "
                          "gated_linear_unit={gated_linear_unit}"),
    # --- the fused bias + activation kernel (megatron-core 0.16-0.19): which activations it has
    Rule(id="BIAS_ACTIVATION_FUSION_ACTIVATION", severity="error", when=FUSED, require=ACT != "squared_relu",
         message="the fused bias-activation kernel exists for GELU, SwiGLU and quick-GEGLU only", source=TC,
         fix="set kernels.bias_activation_fusion: false",
         megatron_message="When bias_activation_fusion is True, activation function should be either gelu, swiglu, or "
                          "quick_geglu"),
    Rule(id="BIAS_GELU_FUSION_NEEDS_BIAS", severity="error", when=FUSED & (ACT == "gelu") & Not(GATED),
         require=F("add_bias_linear").is_(True),
         message="the fused bias-GELU kernel of a plain (not gated) MLP needs the linear bias", source=TC,
         fix="set kernels.bias_activation_fusion: false (or model.architecture.add_bias_linear: true)",
         megatron_message="When bias_activation_fusion is True, gated_linear_unit is False and activation function is "
                          "gelu, add_bias_linear must also be True."),
    Rule(id="BIAS_QUICK_GELU_FUSION_NEEDS_GLU", severity="error", when=FUSED & (ACT == "quick_gelu"), require=GATED,
         message="the fused bias-quick-GELU kernel is the gated one (quick-GEGLU)", source=TC,
         fix="set kernels.bias_activation_fusion: false (or model.architecture.gated_linear_unit: true)",
         megatron_message="When bias_activation_fusion is True and activation function is quick_gelu, "
                          "gated_linear_unit must be True."),
    Rule(id="BIAS_FUSION_GLU_OFFSET_NEEDS_QUICK_GELU", severity="error", when=FUSED & (F("glu_linear_offset") != 0.0),
         require=ACT == "quick_gelu", message="only the fused quick-GEGLU kernel adds the GLU linear offset", source=TC,
         fix="set kernels.bias_activation_fusion: false (or model.architecture.glu_linear_offset: 0)",
         megatron_message="When bias_activation_fusion is True and glu_linear_offset is non-zero, activation function "
                          "must be quick_gelu."),
    # validate_args: "Disable bias gelu fusion if we are disabling bias altogether"; every activation but
    # SwiGLU reads --bias-gelu-fusion (megatron/training/argument_utils.py core_transformer_config_from_args)
    Rule(id="BIAS_GELU_FUSION_OFF_WITHOUT_BIAS", severity="warning",
         when=FUSED & F("add_bias_linear").is_(False) & Not(SWIGLU), require=Not(FUSED),
         message="Megatron-LM turns the fused bias-activation kernel off when the model has no linear bias (except "
                 "for SwiGLU)", source=ARGS, fix="set kernels.bias_activation_fusion: false", megatron_message=None,
         origin="megatron-lm", silent={"bias_activation_fusion": False}),
)
