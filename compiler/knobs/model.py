"""The knob table's rows from the model document (model.architecture, model.moe, model.mtp_num_layers): the
architecture and MoE facts of TransformerConfig, GPTModel's own arguments and ordinary attention's YaRN.
compiler/knobs/table.py puts them into the one table (KNOBS) where this tuple stands.
"""
from __future__ import annotations

from moeforge.compiler.knobs.row import Form, Knob
from moeforge.compiler.knobs.row import tc as _tc

_K = Knob
LOAD_BALANCING_TYPES = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none")


def _arch(key, kind, default=None, domain=(), field=None, **kw) -> Knob:
    """An architecture fact from the model document (model.architecture.<key>)."""
    return _tc(field or key, f"model.architecture.{key}", kind, default, domain, **kw)


def _moe(key, kind, default=None, domain=(), **kw) -> Knob:
    """An MoE fact from the model document (model.moe.<key> is megatron-core's moe_<key>)."""
    return _tc(f"moe_{key}", f"model.moe.{key}", kind, default, domain, **kw)


def _gpt(field, path, kind, default=None, domain=(), **kw) -> Knob:
    """A GPTModel constructor argument (plan section `model`)."""
    return Knob(field, path, kind, default, domain, section="model", **kw)


MODEL_KNOBS: tuple[Knob, ...] = (
    # --- model architecture (from the model document) ---------------------------------
    _arch("num_layers", "int", None,
        form=Form(minimum=1)),
    _arch("hidden_size", "int", None,
        form=Form(minimum=1)),
    _arch("ffn_hidden_size", "opt_int", None, unset=("*", 4, "hidden_size"),
        form=Form(nullable=False, minimum=1)),  # TransformerConfig.__post_init__
    _arch("num_attention_heads", "int", None,
        form=Form(minimum=1)),
    _arch("num_query_groups", "opt_int", None, lm=None, unset=("*", 1, "num_attention_heads"),
          doc="Megatron-LM: --group-query-attention --num-query-groups (emitted together)",
        form=Form(nullable=False, minimum=1)),
    _arch("kv_channels", "opt_int", None, unit="channels per head", unset=("//", "hidden_size", "num_attention_heads"),
        form=Form(minimum=1)),
    _arch("normalization", "enum", "LayerNorm", ("LayerNorm", "RMSNorm")),
    _arch("norm_epsilon", "float", 1e-5, field="layernorm_epsilon",
        form=Form(maximum=0.1, exclusive_minimum=0,
                  description="Epsilon added to the variance in every LayerNorm/RMSNorm (unitless). megatron-core "
                              "TransformerConfig.layernorm_epsilon (default 1e-5); Megatron-LM --norm-epsilon; "
                              "Megatron-Bridge layernorm_epsilon; Hugging Face rms_norm_eps.")),
    _arch("layernorm_zero_centered_gamma", "bool", False,
        form=Form(description="Zero-centred norm weight: the norm multiplies by (1 + gamma) and gamma is "
                              "initialised to 0 (Qwen3-Next's zero-centred RMSNorm). megatron-core "
                              "TransformerConfig.layernorm_zero_centered_gamma (default false); Megatron-LM "
                              "--apply-layernorm-1p.")),
    _arch("add_bias_linear", "bool", True),
    _arch("add_qkv_bias", "bool", False),
    _arch("qk_layernorm", "bool", False),
    _arch("hidden_dropout", "float", 0.1, unit="probability",
        form=Form(minimum=0, maximum=1,
                  description="Dropout probability on the transformer hidden state (after attention and MLP, before "
                              "the residual add); a probability in [0, 1]. megatron-core "
                              "TransformerConfig.hidden_dropout (default 0.1); Megatron-LM --hidden-dropout "
                              "(default 0.1).")),
    _arch("attention_dropout", "float", 0.1, unit="probability",
        form=Form(minimum=0, maximum=1,
                  description="Dropout probability on the attention probabilities; a probability in [0, 1]. "
                              "megatron-core TransformerConfig.attention_dropout (default 0.1); Megatron-LM "
                              "--attention-dropout (default 0.1); Hugging Face attention_dropout.")),
    _arch("init_method_std", "float", 0.02,
        form=Form(exclusive_minimum=0,
                  description="Standard deviation of the zero-mean normal initialisation of weights (unitless; "
                              "output projections use init_method_std / sqrt(2 * num_layers)). megatron-core "
                              "TransformerConfig.init_method_std (default 0.02); Megatron-LM --init-method-std; "
                              "Hugging Face initializer_range.")),
    _arch("glu_linear_offset", "float", 0.0,
        form=Form(description="Offset added to the linear half of a gated linear unit: act(x_gate) * (x_linear + "
                              "offset) (unitless; only with gated_linear_unit). megatron-core "
                              "TransformerConfig.glu_linear_offset (default 0.0); Megatron-LM --glu-linear-offset. "
                              "GPT-OSS: 1.0.")),
    _arch("activation_func_clamp_value", "float", None,
        form=Form(exclusive_minimum=0,
                  description="Clamp limit of the gated MLP input: the gate half is clamped to at most the value, "
                              "the linear half to [-value, value] (unitless; null: no clamp). megatron-core "
                              "TransformerConfig.activation_func_clamp_value (default null; fused paths apply it "
                              "only with activation quick_gelu); Megatron-LM --activation-func-clamp-value; Hugging "
                              "Face swiglu_limit.")),
    _arch("softmax_type", "enum", "vanilla", ("vanilla", "off-by-one", "learnable"),
        form=Form(description="Attention softmax variant: 'vanilla'; 'off-by-one' (a fixed +1 in the denominator); "
                              "'learnable' (a learned per-head sink logit, GPT-OSS attention sinks). megatron-core "
                              "TransformerConfig.softmax_type (default 'vanilla'); Megatron-LM --softmax-type.")),
    _arch("window_size", "str", None, doc="[left, right] attention window in tokens",
        form=Form(shape='window',
                  description="Sliding-window attention as [left, right] in tokens (-1: unbounded; null: full "
                              "attention everywhere). A query attends to at most `left` earlier tokens besides "
                              "itself, so a Hugging Face sliding_window of W is [W - 1, 0]. megatron-core "
                              "TransformerConfig.window_size (a tuple; default null); Megatron-LM --window-size "
                              "L,R.")),
    _arch("window_attn_skip_freq", "str", None,
        form=Form(shape='layer pattern',
                  description="Which layers use the sliding window (only with window_size). An integer N: 1-based "
                              "layer l is full attention when l % N == 0, sliding-window otherwise ((N-1) window "
                              "layers then 1 full layer); a list with one entry per layer: 1 sliding-window, 0 "
                              "full. megatron-core TransformerConfig.window_attn_skip_freq (default null: every "
                              "layer uses the window); Megatron-LM --window-attn-skip-freq.")),
    _arch("attention_output_gate", "bool", False,
        form=Form(description="Gated attention: the attention output is multiplied element-wise by sigmoid(a gate "
                              "projected from the layer input) before the output projection (Qwen3-Next). "
                              "megatron-core TransformerConfig.attention_output_gate (default false; not with "
                              "multi-latent attention); Megatron-LM --attention-output-gate.")),
    _arch("experimental_attention_variant", "enum", None, (None, "gated_delta_net", "dsa"),
        form=Form(values=('gated_delta_net', 'dsa', None),
                  description="Attention variant of the non-softmax layers: 'gated_delta_net' (Gated DeltaNet "
                              "linear attention, Qwen3-Next) or 'dsa' (DeepSeek sparse attention: refused for now, "
                              "its indexer's sizes have no fields here, rule DSA_NEEDS_INDEXER_SIZES). "
                              "megatron-core TransformerConfig.experimental_attention_variant (default null); "
                              "Megatron-LM --experimental-attention-variant.")),
    _arch("linear_attention_freq", "str", None,
        form=Form(shape='layer pattern',
                  description="Which layers are linear attention. An integer N: 1-based layer l is softmax "
                              "attention when l % N == 0, linear otherwise ((N-1) linear then 1 softmax); a list "
                              "with one entry per layer: 1 linear, 0 softmax. megatron-core "
                              "TransformerConfig.linear_attention_freq (default null; required with "
                              "gated_delta_net); Megatron-LM --linear-attention-freq; Hugging Face "
                              "full_attention_interval / layer_types.")),
    _arch("linear_conv_kernel_dim", "opt_int", 4,
        form=Form(nullable=False, minimum=1,
                  description="Gated DeltaNet causal-convolution kernel width (tokens). megatron-core "
                              "TransformerConfig.linear_conv_kernel_dim (default 4); Megatron-LM "
                              "--linear-conv-kernel-dim.")),
    _arch("linear_key_head_dim", "opt_int", 128,
        form=Form(nullable=False, minimum=1,
                  description="Gated DeltaNet query/key head dimension (channels). megatron-core "
                              "TransformerConfig.linear_key_head_dim (default 128); Megatron-LM "
                              "--linear-key-head-dim.")),
    _arch("linear_value_head_dim", "opt_int", 128,
        form=Form(nullable=False, minimum=1,
                  description="Gated DeltaNet value/gate head dimension (channels). megatron-core "
                              "TransformerConfig.linear_value_head_dim (default 128); Megatron-LM "
                              "--linear-value-head-dim.")),
    _arch("linear_num_key_heads", "opt_int", 16,
        form=Form(nullable=False, minimum=1,
                  description="Gated DeltaNet query/key heads. megatron-core TransformerConfig.linear_num_key_heads "
                              "(default 16); Megatron-LM --linear-num-key-heads.")),
    _arch("linear_num_value_heads", "opt_int", 32,
        form=Form(nullable=False, minimum=1,
                  description="Gated DeltaNet value/gate heads (a multiple of linear_num_key_heads). megatron-core "
                              "TransformerConfig.linear_num_value_heads (default 32); Megatron-LM "
                              "--linear-num-value-heads.")),
    _arch("multi_latent_attention", "bool", False),
    _arch("q_lora_rank", "opt_int", None,
        form=Form(minimum=1)),
    _arch("kv_lora_rank", "opt_int", None,
        form=Form(minimum=1)),
    _arch("qk_head_dim", "opt_int", None,
        form=Form(minimum=1)),
    _arch("qk_pos_emb_head_dim", "opt_int", None,
        form=Form(minimum=1)),
    _arch("v_head_dim", "opt_int", None,
        form=Form(minimum=1)),
    # MLA's own YaRN fields (MLATransformerConfig); ordinary attention reads the yarn_* below
    _arch("rope_type", "enum", None, (None, "rope", "yarn"),
        form=Form(values=('rope', 'yarn'),
                  description="Multi-latent attention only: RoPE flavour, 'rope' or 'yarn'. megatron-core "
                              "MLATransformerConfig.rope_type (default 'yarn'); Megatron-LM --rope-type (default "
                              "unset: the config default).")),
    _arch("rotary_scaling_factor", "float", None,
        form=Form(nullable=False, minimum=1,
                  description="Multi-latent attention only: YaRN context-extension factor (rope_scaling.factor; "
                              "unitless). megatron-core MLATransformerConfig.rotary_scaling_factor (default 40, "
                              "DeepSeek-V3's); Megatron-LM --rotary-scaling-factor (default 1.0, which overrides "
                              "40).")),
    _arch("original_max_position_embeddings", "opt_int", None, lm=None,
          doc="MLATransformerConfig only; Megatron-LM has no flag (its default 4096 applies)",
        form=Form(nullable=False, minimum=1,
                  description="Multi-latent attention only: pre-training context length in tokens before YaRN "
                              "(rope_scaling.original_max_position_embeddings). megatron-core "
                              "MLATransformerConfig.original_max_position_embeddings (default 4096); no Megatron-LM "
                              "flag.")),
    _arch("beta_fast", "float", None, lm=None, doc="MLATransformerConfig only; no Megatron-LM flag",
        form=Form(nullable=False,
                  description="Multi-latent attention only: YaRN beta_fast (rotations). megatron-core "
                              "MLATransformerConfig.beta_fast (default 32); no Megatron-LM flag.")),
    _arch("beta_slow", "float", None, lm=None, doc="MLATransformerConfig only; no Megatron-LM flag",
        form=Form(nullable=False,
                  description="Multi-latent attention only: YaRN beta_slow (rotations). megatron-core "
                              "MLATransformerConfig.beta_slow (default 1); no Megatron-LM flag.")),
    _arch("mscale", "float", None,
        form=Form(nullable=False,
                  description="Multi-latent attention only: YaRN mscale (unitless). megatron-core "
                              "MLATransformerConfig.mscale (default 1.0); Megatron-LM --mscale (default 1.0).")),
    _arch("mscale_all_dim", "float", None,
        form=Form(nullable=False,
                  description="Multi-latent attention only: YaRN mscale_all_dim (unitless; also scales the softmax "
                              "by its mscale squared). megatron-core MLATransformerConfig.mscale_all_dim (default "
                              "0.0); Megatron-LM --mscale-all-dim (default 0.0).")),
    _tc("mtp_num_layers", "model.mtp_num_layers", "opt_int", None,
        form=Form(minimum=0)),
    _tc("num_moe_experts", "model.moe.num_experts", "opt_int", None, lm="num_experts",
        form=Form(nullable=False, minimum=1)),
    _moe("router_topk", "int", 2,
        form=Form(minimum=1)),
    _moe("ffn_hidden_size", "opt_int", None,
        form=Form(nullable=False, minimum=1)),
    _moe("shared_expert_intermediate_size", "opt_int", None,
        form=Form(minimum=1)),
    _moe("router_load_balancing_type", "enum", "aux_loss", LOAD_BALANCING_TYPES),
    _moe("aux_loss_coeff", "float", 0.0,
        form=Form(minimum=0)),
    _moe("router_score_function", "enum", "softmax", ("softmax", "sigmoid")),
    _moe("router_pre_softmax", "bool", False,
        form=Form(description="Softmax routing: apply the softmax over all experts before the top-k (true; Hugging "
                              "Face norm_topk_prob false) or over the k selected logits (false; norm_topk_prob "
                              "true). No effect with sigmoid scoring. megatron-core "
                              "TransformerConfig.moe_router_pre_softmax (default false); Megatron-LM "
                              "--moe-router-pre-softmax.")),
    _moe("router_enable_expert_bias", "bool", False),
    _moe("router_bias_update_rate", "float", 1e-3,
        form=Form(minimum=0,
                  description="Aux-loss-free load balancing: the step by which each expert's routing bias moves per "
                              "optimizer step towards balance (DeepSeek-V3's bias update speed gamma; unitless, "
                              "only with router_enable_expert_bias). megatron-core "
                              "TransformerConfig.moe_router_bias_update_rate (default 1e-3); Megatron-LM "
                              "--moe-router-bias-update-rate.")),
    _moe("router_num_groups", "opt_int", None,
        form=Form(minimum=1)),
    _moe("router_group_topk", "opt_int", None,
        form=Form(minimum=1)),
    _moe("router_topk_scaling_factor", "float", None),
    _moe("shared_expert_gate", "bool", False),
    _moe("apply_probs_on_input", "bool", False,
        form=Form(description="Multiply each expert's input by its router score instead of its output (Llama-4's "
                              "Llama4TextMoe). megatron-core TransformerConfig.moe_apply_probs_on_input (default "
                              "false); top-1 routing only (megatron/core/transformer/moe/experts.py).")),
    # --- GPTModel arguments -------------------------------------------------------------
    # Megatron-LM builds the model with --padded-vocab-size when given, else pads the tokenizer's vocab to
    # make_vocab_size_divisible_by x TP (core/tokenizers/utils/build_tokenizer.py _set_padded_vocab_size):
    # both are written, so Megatron-LM builds exactly the plan's vocab
    _gpt("vocab_size", "model.architecture.vocab_size", "opt_int", None, lm=("vocab_size", "padded_vocab_size"),
        form=Form(nullable=False, minimum=1)),
    _gpt("position_embedding_type", "model.architecture.position_embedding_type", "enum", "learned_absolute",
         ("learned_absolute", "rope", "yarn", "mrope", "none"),
         doc="megatron-core GPTModel and Megatron-LM default to learned absolute positions",
        form=Form(values=('rope', 'learned_absolute', 'none', 'yarn'))),
    _gpt("rotary_base", "model.architecture.rotary_base", "opt_int", 10000,
        form=Form(nullable=False)),
    _gpt("rotary_percent", "model.architecture.rotary_percent", "float", 1.0,
        form=Form(maximum=1, exclusive_minimum=0,
                  description="Fraction of each head's dimension that is rotated by RoPE (Hugging Face "
                              "partial_rotary_factor), in (0, 1]. megatron-core GPTModel(rotary_percent=) (default "
                              "1.0) and, for multi-latent attention, MLATransformerConfig.rotary_percent; "
                              "Megatron-LM --rotary-percent (default 1.0).")),
    # Llama-3.1 RoPE frequency scaling: GPTModel arguments (Megatron-LM gpt_config_from_args passes
    # --use-rope-scaling and --rope-scaling-factor); unset is megatron-core's default (off), and the plan states
    # neither then
    _gpt("rope_scaling", "model.architecture.rope_scaling", "bool", None, lm="use_rope_scaling",
         doc="Llama-3.1 RoPE frequency scaling (megatron-core's default: off)",
        form=Form(nullable=True,
                  description="Llama-3.1-style RoPE frequency scaling (Hugging Face rope_scaling.rope_type "
                              "'llama3'): megatron-core GPTModel(rope_scaling=) (default false); Megatron-LM "
                              "--use-rope-scaling; Megatron-Bridge GPTModelProvider.rope_scaling.")),
    _gpt("rope_scaling_factor", "model.architecture.rope_scaling_factor", "float", None,
         doc="the factor of that scaling (megatron-core's default 8.0)",
        form=Form(exclusive_minimum=0,
                  description="The factor of that scaling (Hugging Face rope_scaling.factor): megatron-core "
                              "GPTModel(rope_scaling_factor=) (default 8.0, read only with rope_scaling); "
                              "Megatron-LM --rope-scaling-factor.")),
    # ordinary attention's YaRN: config attributes GPTModel reads (not dataclass fields)
    _K("yarn_rotary_scaling_factor", "model.architecture.yarn_rotary_scaling_factor", "float", None,
       section="yarn", bridge="model.yarn_rotary_scaling_factor", lm="rotary_scaling_factor",
        form=Form(minimum=1,
                  description="YaRN context-extension factor (Hugging Face rope_scaling.factor; unitless) for "
                              "position_embedding_type 'yarn' (attention without MLA). Read by megatron-core "
                              "GPTModel from the config attribute yarn_rotary_scaling_factor (not a "
                              "TransformerConfig dataclass field; YarnRotaryEmbedding default 1.0); Megatron-LM "
                              "--rotary-scaling-factor (default 1.0); Megatron-Bridge "
                              "GPTModelProvider.yarn_rotary_scaling_factor.")),
    _K("yarn_original_max_position_embeddings", "model.architecture.yarn_original_max_position_embeddings",
       "opt_int", None, section="yarn", bridge="model.yarn_original_max_position_embeddings",
        form=Form(minimum=1,
                  description="Context length in tokens the model was pre-trained with before YaRN "
                              "(rope_scaling.original_max_position_embeddings), for position_embedding_type 'yarn'. "
                              "Config attribute yarn_original_max_position_embeddings (default 4096); Megatron-LM "
                              "--yarn-original-max-position-embeddings (0.19+).")),
    _K("yarn_beta_fast", "model.architecture.yarn_beta_fast", "float", None, section="yarn",
       bridge="model.yarn_beta_fast",
        form=Form(description="YaRN beta_fast: rotations above which frequencies are left unscaled "
                              "(rope_scaling.beta_fast), for position_embedding_type 'yarn'. Config attribute "
                              "yarn_beta_fast (default 32); Megatron-LM --yarn-beta-fast (0.19+).")),
    _K("yarn_beta_slow", "model.architecture.yarn_beta_slow", "float", None, section="yarn",
       bridge="model.yarn_beta_slow",
        form=Form(description="YaRN beta_slow: rotations below which frequencies are fully interpolated "
                              "(rope_scaling.beta_slow), for position_embedding_type 'yarn'. Config attribute "
                              "yarn_beta_slow (default 1); Megatron-LM --yarn-beta-slow (0.19+).")),
    _K("yarn_mscale", "model.architecture.yarn_mscale", "float", None, section="yarn", bridge="model.yarn_mscale",
       lm="mscale",
        form=Form(description="YaRN mscale (attention-temperature coefficient, unitless), for "
                              "position_embedding_type 'yarn'. Config attribute yarn_mscale (default 1.0); "
                              "Megatron-LM --mscale (default 1.0). null (with yarn_mscale_all_dim null) means the "
                              "plain YaRN factor 0.1 * ln(factor) + 1, which 1.0 / 0.0 also give.")),
    _K("yarn_mscale_all_dim", "model.architecture.yarn_mscale_all_dim", "float", None, section="yarn",
       bridge="model.yarn_mscale_all_dim",
       lm="mscale_all_dim",
        form=Form(description="YaRN mscale_all_dim (unitless), for position_embedding_type 'yarn'. Config attribute "
                              "yarn_mscale_all_dim (default 0.0); Megatron-LM --mscale-all-dim (default 0.0).")),
    _K("yarn_correction_range_round_to_int", "model.architecture.yarn_correction_range_round_to_int", "bool",
       True, section="yarn", bridge="model.yarn_correction_range_round_to_int",
        form=Form(nullable=True,
                  description="Whether YaRN rounds its correction-range bounds to integers (Hugging Face "
                              "rope_scaling.truncate), for position_embedding_type 'yarn'. Config attribute "
                              "yarn_correction_range_round_to_int (default true); Megatron-LM "
                              "--no-yarn-correction-range-round-to-int (0.19+).")),
)
