"""The knob table's rows from the model document (model.architecture, model.moe, model.mtp_num_layers): the
architecture and MoE facts of TransformerConfig, GPTModel's own arguments and ordinary attention's YaRN.
compiler/knobs/table.py puts them into the one table (KNOBS) where this tuple stands.
"""
from __future__ import annotations

from moeforge.compiler.knobs.row import Knob
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
    _arch("num_layers", "int", None),
    _arch("hidden_size", "int", None),
    _arch("ffn_hidden_size", "opt_int", None, unset=("*", 4, "hidden_size")),  # TransformerConfig.__post_init__
    _arch("num_attention_heads", "int", None),
    _arch("num_query_groups", "opt_int", None, lm=None, unset=("*", 1, "num_attention_heads"),
          doc="Megatron-LM: --group-query-attention --num-query-groups (emitted together)"),
    _arch("kv_channels", "opt_int", None, unit="channels per head", unset=("//", "hidden_size", "num_attention_heads")),
    _arch("normalization", "enum", "LayerNorm", ("LayerNorm", "RMSNorm")),
    _arch("norm_epsilon", "float", 1e-5, field="layernorm_epsilon"),
    _arch("layernorm_zero_centered_gamma", "bool", False),
    _arch("add_bias_linear", "bool", True),
    _arch("add_qkv_bias", "bool", False),
    _arch("qk_layernorm", "bool", False),
    _arch("hidden_dropout", "float", 0.1, unit="probability"),
    _arch("attention_dropout", "float", 0.1, unit="probability"),
    _arch("init_method_std", "float", 0.02),
    _arch("glu_linear_offset", "float", 0.0),
    _arch("activation_func_clamp_value", "float", None),
    _arch("softmax_type", "enum", "vanilla", ("vanilla", "off-by-one", "learnable")),
    _arch("window_size", "str", None, doc="[left, right] attention window in tokens"),
    _arch("window_attn_skip_freq", "str", None),
    _arch("attention_output_gate", "bool", False),
    _arch("experimental_attention_variant", "enum", None, (None, "gated_delta_net", "dsa")),
    _arch("linear_attention_freq", "str", None),
    _arch("linear_conv_kernel_dim", "opt_int", 4),
    _arch("linear_key_head_dim", "opt_int", 128),
    _arch("linear_value_head_dim", "opt_int", 128),
    _arch("linear_num_key_heads", "opt_int", 16),
    _arch("linear_num_value_heads", "opt_int", 32),
    _arch("multi_latent_attention", "bool", False),
    _arch("q_lora_rank", "opt_int", None),
    _arch("kv_lora_rank", "opt_int", None),
    _arch("qk_head_dim", "opt_int", None),
    _arch("qk_pos_emb_head_dim", "opt_int", None),
    _arch("v_head_dim", "opt_int", None),
    # MLA's own YaRN fields (MLATransformerConfig); ordinary attention reads the yarn_* below
    _arch("rope_type", "enum", None, (None, "rope", "yarn")),
    _arch("rotary_scaling_factor", "float", None),
    _arch("original_max_position_embeddings", "opt_int", None, lm=None,
          doc="MLATransformerConfig only; Megatron-LM has no flag (its default 4096 applies)"),
    _arch("beta_fast", "float", None, lm=None, doc="MLATransformerConfig only; no Megatron-LM flag"),
    _arch("beta_slow", "float", None, lm=None, doc="MLATransformerConfig only; no Megatron-LM flag"),
    _arch("mscale", "float", None),
    _arch("mscale_all_dim", "float", None),
    _tc("mtp_num_layers", "model.mtp_num_layers", "opt_int", None),
    _tc("num_moe_experts", "model.moe.num_experts", "opt_int", None, lm="num_experts"),
    _moe("router_topk", "int", 2),
    _moe("ffn_hidden_size", "opt_int", None),
    _moe("shared_expert_intermediate_size", "opt_int", None),
    _moe("router_load_balancing_type", "enum", "aux_loss", LOAD_BALANCING_TYPES),
    _moe("aux_loss_coeff", "float", 0.0),
    _moe("router_score_function", "enum", "softmax", ("softmax", "sigmoid")),
    _moe("router_pre_softmax", "bool", False),
    _moe("router_enable_expert_bias", "bool", False),
    _moe("router_bias_update_rate", "float", 1e-3),
    _moe("router_num_groups", "opt_int", None),
    _moe("router_group_topk", "opt_int", None),
    _moe("router_topk_scaling_factor", "float", None),
    _moe("shared_expert_gate", "bool", False),
    # Llama-4 (Llama4TextMoe): each expert's input is multiplied by its router score, not its output; megatron-core
    # (moe/experts.py) takes top-1 routing only
    _moe("apply_probs_on_input", "bool", False),
    # --- GPTModel arguments -------------------------------------------------------------
    # Megatron-LM builds the model with --padded-vocab-size when given, else pads the tokenizer's vocab to
    # make_vocab_size_divisible_by x TP (core/tokenizers/utils/build_tokenizer.py _set_padded_vocab_size):
    # both are written, so Megatron-LM builds exactly the plan's vocab
    _gpt("vocab_size", "model.architecture.vocab_size", "opt_int", None, lm=("vocab_size", "padded_vocab_size")),
    _gpt("position_embedding_type", "model.architecture.position_embedding_type", "enum", "learned_absolute",
         ("learned_absolute", "rope", "yarn", "mrope", "none"),
         doc="megatron-core GPTModel and Megatron-LM default to learned absolute positions"),
    _gpt("rotary_base", "model.architecture.rotary_base", "opt_int", 10000),
    _gpt("rotary_percent", "model.architecture.rotary_percent", "float", 1.0),
    # Llama-3.1 RoPE frequency scaling: GPTModel arguments (Megatron-LM gpt_config_from_args passes
    # --use-rope-scaling and --rope-scaling-factor); unset is megatron-core's default (off), and the plan states
    # neither then
    _gpt("rope_scaling", "model.architecture.rope_scaling", "bool", None, lm="use_rope_scaling",
         doc="Llama-3.1 RoPE frequency scaling (megatron-core's default: off)"),
    _gpt("rope_scaling_factor", "model.architecture.rope_scaling_factor", "float", None,
         doc="the factor of that scaling (megatron-core's default 8.0)"),
    # ordinary attention's YaRN: config attributes GPTModel reads (not dataclass fields)
    _K("yarn_rotary_scaling_factor", "model.architecture.yarn_rotary_scaling_factor", "float", None,
       section="yarn", bridge="model.yarn_rotary_scaling_factor", lm="rotary_scaling_factor"),
    _K("yarn_original_max_position_embeddings", "model.architecture.yarn_original_max_position_embeddings",
       "opt_int", None, section="yarn", bridge="model.yarn_original_max_position_embeddings"),
    _K("yarn_beta_fast", "model.architecture.yarn_beta_fast", "float", None, section="yarn",
       bridge="model.yarn_beta_fast"),
    _K("yarn_beta_slow", "model.architecture.yarn_beta_slow", "float", None, section="yarn",
       bridge="model.yarn_beta_slow"),
    _K("yarn_mscale", "model.architecture.yarn_mscale", "float", None, section="yarn", bridge="model.yarn_mscale",
       lm="mscale"),
    _K("yarn_mscale_all_dim", "model.architecture.yarn_mscale_all_dim", "float", None, section="yarn",
       bridge="model.yarn_mscale_all_dim",
       lm="mscale_all_dim"),
    _K("yarn_correction_range_round_to_int", "model.architecture.yarn_correction_range_round_to_int", "bool",
       True, section="yarn", bridge="model.yarn_correction_range_round_to_int"),
)
