"""The Hugging Face families `moeforge import config.json` reads: model_type -> how its config.json says each
model fact. Data, in one place: compiler/importer/hf/reader.py holds the one reader every family shares (most
families are the same keys under other names), compiler/data/hf_class_defaults.json the transformers classes'
defaults for keys a config.json leaves out (generated: tests/fidelity/hf_class_defaults.py).

A family's `constants` are facts its modelling code fixes rather than its config (each with the code that says
so); `refuse` names what moeforge's runtime cannot build, each with why, so such a model is refused by name rather
than approximated. `judge` says what tests/fidelity/test_hf_import_judged.py compares the import with: Megatron-Bridge
0.6.2's own conversion where it has a bridge, else the transformers modelling code's module tree."""
from __future__ import annotations

from dataclasses import dataclass

# Keys no model document reads: generation, tokenizer ids, caching, serialization and training-loop switches.
NOT_ARCHITECTURE = frozenset({
    "_name_or_path", "_source", "transformers_version", "architectures", "model_type", "auto_map", "torch_dtype",
    "dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "output_router_logits",
    "router_jitter_noise", "return_dict", "output_hidden_states", "output_attentions", "chunk_size_feed_forward",
    "is_encoder_decoder", "problem_type", "id2label", "label2id", "tie_word_embeddings_", "pretraining_tp",
    "initial_context_length", "max_window_layers", "quantization_config", "text_config", "vision_config",
    "generation_config", "use_return_dict", "tokenizer_class", "keys_to_ignore_at_inference", "ep_size",
    "moe_norm_min", "mtp_use_dedicated_embeddings", "use_flash_attn", "torchscript", "tie_encoder_decoder",
})

# The experts, and the experts per token, under every name a family uses (transformers' attribute_map aliases)
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOPK = ("num_experts_per_tok", "experts_per_token", "moe_k")

# quantization_config.quant_method: the checkpoint's storage format. The architecture is the same model; what a
# recipe trains in is its own precision (the note says how). Other methods are post-training quantisations.
QUANTIZATION = {
    "fp8": "its weights are stored in FP8{blocks}; the model document is the same model, and a recipe trains in "
           "precision.dtype (set precision.fp8: e4m3 with precision.fp8_recipe: blockwise to train FP8 as these "
           "weights are scaled)",
    "fbgemm_fp8": "its weights are stored in FP8 (fbgemm, per channel); the model document is the same model, and a "
                  "recipe trains in precision.dtype",
    "mxfp4": "its expert weights are stored in MXFP4; the model document is the same model, trained in "
             "precision.dtype (Megatron-Bridge dequantizes MXFP4 weights when it loads them)",
}


@dataclass(frozen=True)
class Family:
    name: str                    # moeforge's family name (the model document's `family`)
    model_types: tuple           # config.json model_type values (a multimodal config's text_config included)
    config_class: str            # the transformers configuration class (auto_map's AutoConfig names it)
    architectures: tuple         # the *ForCausalLM classes
    judge: str                   # "bridge": Megatron-Bridge 0.6.2 converts it; "modelling": transformers' modules
    features: frozenset = frozenset()   # reader switches: mla, gated_delta_net, sinks_swa, window_all, shared_gate,
    #                                     expert_bias
    constants: tuple = ()        # (model path, value, the modelling code that fixes it)
    score: tuple = ("softmax", "the router scores experts with a softmax")   # (score function, the code that says so)
    # softmax scores: are the top-k weights renormalised? "norm_topk_prob" (the key says), "always", or
    # "topk_then_softmax" (a softmax over the top-k logits: the same weights)
    router: str = "norm_topk_prob"
    expert_width: str = "moe_intermediate_size"   # the key of one expert's MLP width
    # (load-balancing type and why, the key of its coefficient, the coefficient when config.json and the class have
    # none and why): config.json states a coefficient at most; the loss is the training's choice
    balancing: tuple = ("aux_loss", "transformers' load_balancing_loss_func", "router_aux_loss_coef", None, "")
    # the router's dtype, Megatron-Bridge's policy for the family (value for the recipe's moe.router.dtype, or None:
    # megatron-core's default, the training dtype; and why), said in the model document and applied by the recipe
    router_dtype: tuple = (None, "Megatron-Bridge's conversion of this family leaves moe_router_dtype unset: the "
                                 "router runs in the training dtype (megatron-core's default)")
    refuse: tuple = ()           # (key or "", predicate, message): what moeforge's runtime cannot build
    inert: tuple = ()            # (key, why it changes nothing moeforge builds): read, and said in a note


QWEN_WINDOW = (("sliding_window", "read by transformers only with use_sliding_window true"),)
QWEN_ATTENTION = (("architecture.qk_layernorm", True, "Qwen3*Attention: q_norm / k_norm, RMSNorm over each head"),)
MLA = (("architecture.qk_layernorm", True,
        "DeepseekV*Attention: q_a_layernorm / kv_a_layernorm on the compressed latents (megatron-core MLA's "
        "qk_layernorm)"),
       ("architecture.multi_latent_attention", True, "DeepseekV*Attention: Multi-head Latent Attention"))
MLA_INERT = (("head_dim", "the RoPE part of an MLA head (qk_rope_head_dim): megatron-core's MLA is sized by "
                         "qk_head_dim, qk_pos_emb_head_dim and v_head_dim"),
             ("qk_head_dim", "qk_nope_head_dim + qk_rope_head_dim"))
SIGMOID = ("sigmoid", "the router scores experts with a sigmoid")


def _fp32_router(bridge: str) -> tuple:
    return ("fp32", f"Megatron-Bridge's {bridge} sets moe_router_dtype fp32 for this family (its router's scores, "
                    "top-k and load-balancing statistics over many experts are computed in FP32, not BF16)")

FAMILIES: tuple[Family, ...] = (
    Family("mixtral", ("mixtral",), "MixtralConfig", ("MixtralForCausalLM",), "modelling",
           router="always", expert_width="intermediate_size", features=frozenset({"window_all"}),
           score=("softmax", "MixtralTopKRouter: softmax over all experts")),
    Family("qwen2-moe", ("qwen2_moe",), "Qwen2MoeConfig", ("Qwen2MoeForCausalLM",), "modelling",
           features=frozenset({"shared_gate"}),
           refuse=(("use_sliding_window", "true", "sliding-window attention on the layers from max_window_layers "
                                                  "(use_sliding_window true): no model document field states it"),),
           inert=QWEN_WINDOW),
    Family("qwen3-moe", ("qwen3_moe",), "Qwen3MoeConfig", ("Qwen3MoeForCausalLM",), "bridge",
           constants=QWEN_ATTENTION, inert=QWEN_WINDOW,
           refuse=(("use_sliding_window", "true", "sliding-window attention on the layers from max_window_layers "
                                                  "(use_sliding_window true): no model document field states it"),)),
    Family("qwen3-next", ("qwen3_next",), "Qwen3NextConfig", ("Qwen3NextForCausalLM",), "bridge",
           features=frozenset({"gated_delta_net", "shared_gate"}),
           router_dtype=_fp32_router("Qwen3NextBridge (models/qwen/qwen3_next_bridge.py)"),
           balancing=("global_aux_loss", "Megatron-Bridge Qwen3NextBridge: global-batch load balancing",
                      "router_aux_loss_coef", None, ""),
           constants=QWEN_ATTENTION + (
               ("architecture.layernorm_zero_centered_gamma", True, "Qwen3NextRMSNorm scales by (1 + weight)"),
               ("architecture.attention_output_gate", True,
                "Qwen3NextAttention: a sigmoid gate from q_proj's second half on the attention output"))),
    Family("deepseek-v2", ("deepseek_v2",), "DeepseekV2Config", ("DeepseekV2ForCausalLM",), "bridge",
           features=frozenset({"mla"}), inert=MLA_INERT,
           router_dtype=_fp32_router("DeepSeekV2Bridge (models/deepseek/deepseek_v2_bridge.py)"),
           balancing=("seq_aux_loss", "DeepSeek-V2's sequence-wise balance loss (seq_aux)", "aux_loss_alpha", None, ""),
           score=("softmax", "DeepseekV2Moe: softmax over all experts"), constants=MLA),
    Family("deepseek-v3", ("deepseek_v3",), "DeepseekV3Config", ("DeepseekV3ForCausalLM",), "bridge",
           features=frozenset({"mla", "expert_bias"}),  # Kimi-K2 too (model_type kimi_k2: KimiK2Bridge, the same)
           router_dtype=_fp32_router("DeepSeekV3Bridge (models/deepseek/deepseek_v3_bridge.py; KimiK2Bridge too)"),
           inert=MLA_INERT + (("rope_interleave", "RoPE on interleaved channel pairs, as megatron-core's MLA "
                                                  "applies it (rope_utils: mla_rotary_interleaved)"),),
           refuse=(("rope_interleave", "false", "RoPE on the channel halves (rope_interleave false): megatron-core's "
                                                "MLA always pairs interleaved channels"),),
           balancing=("seq_aux_loss", "DeepSeek-V3's complementary sequence-wise balance loss (seq_aux)",
                      "aux_loss_alpha", 0.0001, "DeepSeek-V3 technical report 4.2: balance factor 0.0001"),
           score=SIGMOID, constants=MLA),
    Family("gpt-oss", ("gpt_oss",), "GptOssConfig", ("GptOssForCausalLM",), "bridge",
           features=frozenset({"sinks_swa"}), router="topk_then_softmax", expert_width="intermediate_size",
           balancing=("none", "Megatron-Bridge GPTOSSBridge: no auxiliary loss (transformers computes one only with "
                              "output_router_logits)", "router_aux_loss_coef", None, ""),
           score=("softmax", "GptOssTopKRouter: top-k of the logits, then a softmax"),
           constants=(
               ("architecture.add_bias_linear", True, "GptOssAttention / GptOssExperts: every projection has a bias"),
               ("architecture.activation", "quick_gelu",
                "GptOssExperts: (up + 1) * gate * sigmoid(1.702 * gate), megatron-core's gated quick_gelu"),
               ("architecture.glu_linear_offset", 1.0, "GptOssExperts: the +1 on the linear half"),
               ("architecture.softmax_type", "learnable", "GptOssAttention.sinks: a learned logit per head"))),
    Family("glm4-moe", ("glm4_moe",), "Glm4MoeConfig", ("Glm4MoeForCausalLM",), "bridge",
           features=frozenset({"expert_bias"}), score=SIGMOID,
           router_dtype=_fp32_router("GLM45Bridge (models/glm/glm45_bridge.py)"),
           balancing=("seq_aux_loss", "Megatron-Bridge GLM45Bridge: sequence-wise balance loss beside the expert bias",
                      None, 0.001, "Megatron-Bridge GLM45Bridge (config.json states none)")),
    Family("qwen3-vl-moe", ("qwen3_vl_moe_text",), "Qwen3VLMoeTextConfig", ("Qwen3VLMoeForConditionalGeneration",),
           "modelling", router="always", constants=QWEN_ATTENTION,
           score=("softmax", "Qwen3VLMoeTextTopKRouter: softmax over all experts")),
    Family("olmoe", ("olmoe",), "OlmoeConfig", ("OlmoeForCausalLM",), "bridge", expert_width="intermediate_size",
           refuse=(("", "always", "OlmoeAttention normalises q and k over the whole projection (q_norm over "
                                  "num_heads x head_dim): megatron-core's qk_layernorm normalises each head "
                                  "(Megatron-Bridge builds it with its own OLMoESelfAttention layer spec)"),)),
    Family("ernie4.5-moe", ("ernie4_5_moe",), "Ernie4_5_MoeConfig", ("Ernie4_5_MoeForCausalLM",), "bridge",
           refuse=(("", "always", "Ernie4_5_MoeTopKRouter scores experts with a softmax and selects them with a "
                                  "learned bias (moe_statics.e_score_correction_bias): megatron-core's expert bias "
                                  "takes sigmoid scores only (Megatron-Bridge 0.6.2 substitutes a sigmoid router)"),
                   ("", "always", "interleaved RoPE (Ernie4_5_MoeRotaryEmbedding): no model document field states "
                                  "megatron-core's rotary_interleaved"))),
    Family("llama4", ("llama4_text",), "Llama4TextConfig", ("Llama4ForCausalLM",), "modelling",
           refuse=(("attention_chunk_size", "set", "chunked attention (attention_chunk_size {value}: "
                                                   "chunked_attention layers): megatron-core has none"),
                   ("no_rope_layers", "has0", "NoPE layers (no_rope_layers: layers without RoPE): no model "
                                              "document field states megatron-core's no_rope_freq"),
                   ("use_qk_norm", "true", "L2-normalised q and k (use_qk_norm, Llama4TextL2Norm): no model "
                                           "document field states megatron-core's qk_l2_norm"),
                   ("attn_temperature_tuning", "true", "attention temperature tuning (attn_temperature_tuning: "
                                                       "query scaling by position): megatron-core has none")),
           # megatron-core's moe_apply_probs_on_input, the model document's moe.apply_probs_on_input: read, but the
           # refusals above stand (no runtime builds the rest of Llama-4's attention)
           constants=(("moe.apply_probs_on_input", True,
                       "Llama4TextMoe multiplies each expert's input by its router score (megatron-core "
                       "moe_apply_probs_on_input)"),)),
)

BY_MODEL_TYPE = {t: f for f in FAMILIES for t in f.model_types}
BY_CONFIG_CLASS = {f.config_class: f for f in FAMILIES}
BY_ARCHITECTURE = {a: f for f in FAMILIES for a in f.architectures}
