"""The model document's own consistency: attention and routing facts that megatron-core and Megatron-LM
check whatever the layout (group-limited routing, MLA's exclusions, MTP's position embeddings, heads).

megatron-core TransformerConfig / MLATransformerConfig.__post_init__ (0.16-0.19) and Megatron-LM
validate_args.  A catalogue model passes them all; a new or edited model document is checked here before
a launch would be refused.
"""
from compiler.knobs import table as K
from compiler.rules import Rule
from compiler.rules.expr import F, IsSet, Not, Or

TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
MLA_TC = "megatron-core transformer/transformer_config.py MLATransformerConfig.__post_init__"
ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
LM_CONFIG = "Megatron-LM megatron/training/argument_utils.py core_transformer_config_from_args"
SPECS = "megatron-core models/gpt/gpt_layer_specs.py get_gpt_decoder_block_spec"
MTP_LAYER = "megatron-core transformer/multi_token_prediction.py MultiTokenPredictionLayer.__init__"
VARIANT_SPECS = "megatron-core models/gpt/experimental_attention_variant_module_specs.py get_linear_attention_pattern"

GROUPS, GROUP_TOPK = F("moe_router_num_groups"), F("moe_router_group_topk")
GROUP_ROUTING = IsSet(GROUP_TOPK) & (GROUP_TOPK > 0)
MLA = F("multi_latent_attention") == True  # noqa: E712
HEADS, QUERY_GROUPS = F("num_attention_heads"), F("num_query_groups")
MTP = IsSet(F("mtp_num_layers")) & (F("mtp_num_layers") > 0)
DSA = F("experimental_attention_variant") == "dsa"
BEFORE_V17, BEFORE_V18 = (("megatron_core", "<0.17.0"),), (("megatron_core", "<0.18.0"),)
V19, BEFORE_V19 = (("megatron_core", ">=0.19.0"),), (("megatron_core", "<0.19.0"),)
ACT, GATED = F("activation_func"), F("gated_linear_unit") == True  # noqa: E712
MODEL_MLA = F("model_document_mla") == True  # noqa: E712
MLA_YARN = MLA & (F("rope_type") != "rope")  # MLATransformerConfig.rope_type defaults to yarn
VIA_LM = F("entrypoint") == "megatron-lm"


def _not_in_megatron_lm(rule_id: str, when, require, what: str, fix: str) -> tuple:
    """A model Megatron-LM's flags cannot state: Megatron-LM raises nothing, it builds another model.  An
    error when the launch runs Megatron-LM (moeforge's words: Megatron says nothing); otherwise a warning
    that megatron-lm.args, which every compile writes, would not build the plan's model."""
    return (Rule(rule_id, "error", VIA_LM & when, require, f"the launch runs Megatron-LM, which {what}", LM_CONFIG,
                 fix + ", or use runtime.entrypoint: moeforge", None, origin="moeforge"),
            Rule(rule_id + "_ARGS", "warning", Not(VIA_LM) & when, require,
                 f"megatron-lm.args cannot state this model: Megatron-LM {what}", LM_CONFIG, fix, None,
                 origin="megatron-lm"))


RULES = (
    Rule("ROUTER_GROUP_TOPK_NEEDS_NUM_GROUPS", "error", GROUP_ROUTING, IsSet(GROUPS) & (GROUPS > 0),
         "group-limited routing (moe.router_group_topk) needs the number of expert groups", TC,
         "set model.moe.router_num_groups (it must divide the experts), or unset model.moe.router_group_topk",
         "When using group limited routing, moe_router_num_groups must be specified."),
    Rule("ROUTER_EXPERTS_DIVISIBLE_BY_GROUPS", "error", GROUP_ROUTING & IsSet(GROUPS) & (GROUPS > 0),
         F("num_moe_experts") % GROUPS == 0,
         "the experts must split evenly into the router's expert groups", TC,
         "choose model.moe.router_num_groups dividing model.moe.num_experts",
         "num_moe_experts ({num_moe_experts}) should be divisible by moe_router_num_groups "
         "({moe_router_num_groups})."),
    Rule("ROUTER_GROUP_TOPK_AT_MOST_NUM_GROUPS", "error", GROUP_ROUTING & IsSet(GROUPS) & (GROUPS > 0),
         GROUP_TOPK <= GROUPS,
         "a token cannot pick more expert groups than there are", TC,
         "set model.moe.router_group_topk <= model.moe.router_num_groups",
         "moe_router_group_topk ({moe_router_group_topk}) should be smaller than moe_router_num_groups "
         "({moe_router_num_groups})."),
    # raised at the router's first forward (TopKRouter.sinkhorn_load_balancing), after every front-end accepted it
    Rule("SINKHORN_NO_AUX_LOSS", "error", F("moe_router_load_balancing_type") == "sinkhorn",
         F("aux_loss_coeff_zero") == True,  # noqa: E712
         "Sinkhorn load balancing takes no auxiliary loss", "megatron-core transformer/moe/router.py "
         "TopKRouter.sinkhorn_load_balancing, at the router's first forward",
         "set model.moe.aux_loss_coeff: 0, or another model.moe.router_load_balancing_type",
         "Sinkhorn routing does not support aux loss."),
    # softmax over a single selected logit is constant: its gradient is zero
    Rule("ROUTER_TOP1_SOFTMAX_NEEDS_PRE_SOFTMAX", "error",
         (F("moe_router_topk") == 1) & (F("moe_router_score_function") == "softmax")
         & (F("moe_router_load_balancing_type") != "sinkhorn"),
         F("moe_router_pre_softmax") == True,  # noqa: E712
         "top-1 routing with softmax scores needs the softmax before the top-k", TC,
         "set model.moe.router_pre_softmax: true (or router_score_function: sigmoid)",
         "Please use --moe-router-pre-softmax when topk is 1."),
    Rule("MLA_NO_ATTENTION_OUTPUT_GATE", "error", MLA, F("attention_output_gate") == False,  # noqa: E712
         "multi-latent attention has no output gate", MLA_TC,
         "set model.architecture.attention_output_gate: false (or multi_latent_attention: false)",
         "Output gate is not supported for MLA yet."),
    Rule("MLA_ROPE_FUSION_NEEDS_YARN", "error", MLA & (F("apply_rope_fusion") == True),  # noqa: E712
         F("rope_type") != "rope",
         "multi-latent attention fuses RoPE only in its YaRN flavour", MLA_TC,
         "set kernels.apply_rope_fusion: false (or model.architecture.rope_type: yarn)",
         "apply_rope_fusion for MLA only works with YARN RoPE."),
    # Megatron-LM passes --group-query-attention whenever num_query_groups < num_attention_heads
    Rule("MLA_NO_GROUP_QUERY_ATTENTION", "error", MLA & IsSet(QUERY_GROUPS), QUERY_GROUPS >= HEADS,
         "multi-latent attention has no grouped-query attention (num_query_groups below the heads)", ARGS,
         "set model.architecture.num_query_groups to num_attention_heads (or null)",
         "Group query attention is mutually exclusive with multi latent attention.", origin="megatron-lm"),
    Rule("MTP_NEEDS_ROPE_OR_NO_POSITION_EMBEDDING", "error", MTP,
         Or(F("position_embedding_type") == "rope", F("position_embedding_type") == "none"),
         "multi-token prediction needs RoPE (or no) position embeddings in Megatron-LM", ARGS,
         "set model.architecture.position_embedding_type: rope, or model.mtp_num_layers: null",
         "Multi-Token Prediction (MTP) is not supported with {position_embedding_type} position embedding type.",
         origin="megatron-lm"),
    # a bare `assert args.hidden_size % args.num_attention_heads == 0` (no text of Megatron's to quote)
    Rule("HIDDEN_DIVISIBLE_BY_HEADS", "error", Not(IsSet(F("kv_channels"))), F("hidden_size") % HEADS == 0,
         "without kv_channels the head size is hidden_size / num_attention_heads, which must be whole",
         f"{ARGS} (when kv_channels is unset)",
         "set model.architecture.kv_channels (the head size), or heads dividing hidden_size", None,
         origin="moeforge"),
    # RotaryEmbedding / YarnRotaryEmbedding build one frequency per pair of head dimensions and concatenate two
    # copies: an odd head size gives a table one row short (a tensor-size error while building a YaRN model,
    # at the first forward step with RoPE); megatron-core says nothing of its own
    Rule("ROPE_NEEDS_EVEN_HEAD_SIZE", "error",
         Not(MLA) & Or(F("position_embedding_type") == "rope", F("position_embedding_type") == "yarn")
         & (F("rotary_percent") == 1.0),
         Or(IsSet(F("kv_channels")) & (F("kv_channels") % 2 == 0),
            Not(IsSet(F("kv_channels"))) & (F("hidden_size") % (HEADS * 2) == 0)),
         "rotary position embeddings need an even head size (kv_channels, or hidden_size / num_attention_heads)",
         "megatron-core models/common/embeddings/rotary_pos_embedding.py RotaryEmbedding (and YaRN's)",
         "set model.architecture.kv_channels to an even head size", None, origin="moeforge"),
    Rule("ROUTER_EXPERT_BIAS_NEEDS_SIGMOID", "error", F("moe_router_enable_expert_bias") == True,  # noqa: E712
         F("moe_router_score_function") == "sigmoid",
         "aux-loss-free routing (expert bias) needs the sigmoid score function", TC,
         "set model.moe.router_score_function: sigmoid, or model.moe.router_enable_expert_bias: false",
         "Expert bias for aux-loss-free routing only supports 'sigmoid' and 'sqrtsoftplus' score functions. "
         "Please set --moe-router-score-function to 'sigmoid' or 'sqrtsoftplus', or unset "
         "--moe-router-enable-expert-bias.",
         variants=((BEFORE_V18, "Expert bias for aux-loss-free routing only supports sigmoid score function."
                                "Please set --moe-router-score-function sigmoid for sigmoid score function."),)),
    # a query group holds num_attention_heads / num_query_groups query heads (megatron-core's attention and TE's
    # DotProductAttention divide them); megatron-core's TransformerConfig itself does not check it
    Rule("HEADS_DIVISIBLE_BY_QUERY_GROUPS", "error", IsSet(QUERY_GROUPS) & (QUERY_GROUPS > 0),
         HEADS % QUERY_GROUPS == 0,
         "the attention heads must split evenly into the query groups",
         "megatron-core transformer/attention.py (query heads per group); Megatron-LM emits --num-query-groups only "
         "below the heads", "choose model.architecture.num_query_groups dividing num_attention_heads", None,
         origin="moeforge"),
    # DeepSeek sparse attention's spec (models/gpt/experimental_attention_variant_module_specs.py) asserts MLA ...
    Rule("DSA_NEEDS_MLA", "error", DSA, MLA,
         "DeepSeek sparse attention is built on multi-latent attention only",
         "megatron-core models/gpt/experimental_attention_variant_module_specs.py get_dsa_module_spec_for_backend, "
         "when the model is built",
         "set model.architecture.multi_latent_attention: true (with its LoRA ranks and head sizes), or remove "
         "model.architecture.experimental_attention_variant", "Currently only MLA supports sparse attention."),
    # ... and its indexer takes its sizes from dsa_indexer_n_heads / head_dim / topk (None by default: DSAIndexer's
    # softmax scale, head_dim ** -0.5, is a TypeError). A flat config linted may state them; the model schema cannot.
    Rule("DSA_NEEDS_INDEXER_SIZES", "error", DSA, F("dsa_indexer_stated") == True,  # noqa: E712
         "DeepSeek sparse attention needs its indexer's sizes (dsa_indexer_n_heads, dsa_indexer_head_dim, "
         "dsa_indexer_topk), which a recipe's model schema cannot state yet; megatron-core cannot build the indexer "
         "without them", "megatron-core transformer/experimental_attention_variant/dsa.py DSAIndexer.__init__, "
         "when the model is built", "remove model.architecture.experimental_attention_variant: dsa (DeepSeek-V3's "
         "dense MLA); in a linted flat config, state the three sizes", None, origin="moeforge"),
    Rule("DSA_NO_CONTEXT_PARALLEL", "error", DSA, F("context_parallel_size") == 1,
         "DeepSeek sparse attention takes no context parallelism before megatron-core 0.19", TC,
         "set parallelism.cp: 1, or use a platform with megatron-core >= 0.19 (with parallelism.cp_comm_type: "
         "allgather)", "Currently context parallelism is not supported by DSAttention!", versions=BEFORE_V19),
    Rule("DSA_CONTEXT_PARALLEL_NEEDS_ALLGATHER", "error", DSA & (F("context_parallel_size") > 1),
         F("cp_comm_type") == "allgather",
         "DeepSeek sparse attention runs context parallelism with the allgather exchange only", TC,
         "set parallelism.cp_comm_type: allgather, or parallelism.cp: 1",
         "DSAttention context parallelism currently supports cp_comm_type=allgather only.", versions=V19),
    Rule("DSA_NO_ROPE_FUSION", "error", DSA, F("apply_rope_fusion") == False,  # noqa: E712
         "DeepSeek sparse attention has no fused RoPE", TC, "set kernels.apply_rope_fusion: false",
         "RoPE fusion is not supported for DSAttention"),
    Rule("DSA_NO_LINEAR_BIAS", "error", DSA, F("add_bias_linear") == False,  # noqa: E712
         "DeepSeek sparse attention (absorbed MLA) has no linear bias", TC,
         "set model.architecture.add_bias_linear: false",
         "DSA uses AbsorbedMLASelfAttention, which requires add_bias_linear=False. Disable linear bias for DSA "
         "configs.", versions=V19),
    Rule("GDN_NEEDS_LINEAR_ATTENTION_FREQ", "error", F("experimental_attention_variant") == "gated_delta_net",
         IsSet(F("linear_attention_freq")),
         "Gated DeltaNet needs the pattern of linear and softmax layers", TC,
         "set model.architecture.linear_attention_freq (N: every Nth layer is softmax attention)",
         "linear_attention_freq must be set for linear gated_delta_net."),
    # megatron-core asserts these when it builds the layer specs (gpt_layer_specs.py get_gpt_decoder_block_spec,
    # experimental_attention_variant_module_specs.py), after Megatron-LM's validate_args accepted the launch
    Rule("MOE_LAYER_FREQ_ONE_ENTRY_PER_LAYER", "error",
         IsSet(F("num_moe_experts")), F("moe_layer_freq_fits") == True,  # noqa: E712
         "a per-layer MoE pattern (model.moe.layer_freq) needs one entry per decoder layer", SPECS,
         "give model.moe.layer_freq one 0/1 entry per layer (model.architecture.num_layers), or an integer N "
         "(every Nth layer MoE)",
         "Invalid length of moe_layer_pattern: {moe_layer_freq_entries}, expected {num_layers}, current moe layer "
         "pattern: {moe_layer_freq}"),
    Rule("LINEAR_ATTENTION_FREQ_ONE_ENTRY_PER_LAYER", "error",
         F("experimental_attention_variant") == "gated_delta_net",
         F("linear_attention_freq_fits") == True,  # noqa: E712
         "a per-layer linear-attention pattern (model.architecture.linear_attention_freq) needs one entry per "
         "decoder layer", VARIANT_SPECS,
         "give model.architecture.linear_attention_freq one 0/1 entry per layer (model.architecture.num_layers), "
         "or an integer N (every Nth layer softmax attention)",
         "Invalid length of linear_attention_pattern: {linear_attention_freq_entries}, expected {num_layers}, "
         "current linear attention pattern: {linear_attention_freq}"),
    # MultiTokenPredictionLayer.__init__ (all releases) refuses an MTP layer whose attention has no causal mask type;
    # megatron-core, Megatron-LM (gpt_builders.py) and moeforge's runtime build it with the last decoder layer's spec
    Rule("MTP_NEEDS_SOFTMAX_LAST_LAYER", "error",
         MTP & (F("experimental_attention_variant") == "gated_delta_net"),
         F("last_layer_linear_attention") == False,  # noqa: E712
         "an MTP layer is built like the last decoder layer, and megatron-core builds MTP only on softmax attention, "
         "not Gated DeltaNet", MTP_LAYER,
         "make the last decoder layer softmax attention (model.architecture.linear_attention_freq: an N dividing "
         "num_layers, or a list ending in 0), or set model.mtp_num_layers: null",
         "Multi-Token Prediction (MTP) is not yet supported with {attn_mask_type} attention mask type. The supported "
         "attention mask types are {SUPPORTED_ATTN_MASK}.",
         variants=((BEFORE_V17, "Multi-Token Prediction (MTP) is not jet supported with {attn_mask_type} attention "
                                "mask type.The supported attention mask types are {SUPPORTED_ATTN_MASK}."),)),
    # --- models Megatron-LM's flags cannot state
    # Megatron-LM states an activation by one flag each (argument_utils.core_transformer_config_from_args):
    # none: GELU; --swiglu: SiLU, gated; --quick-geglu: quick-GELU, gated; --squared-relu.  Another pair
    # launches as something else.
    *_not_in_megatron_lm(
        "ACTIVATION_NOT_IN_MEGATRON_LM", ACT != "gelu",
        Or(*[(ACT == func) & (GATED if gated else Not(GATED)) for func, gated in K.LM_ACTIVATIONS.values()]),
        "has flags for GELU, SwiGLU, gated quick-GELU and squared ReLU only (this MLP activation would launch "
        "as another one)",
        "set model.architecture.activation to swiglu, quick_gelu with gated_linear_unit: true, or squared_relu "
        "without it"),
    *_not_in_megatron_lm(
        "ACTIVATION_GATED_GELU_NOT_IN_MEGATRON_LM", (ACT == "gelu") & GATED, Not(GATED),
        "has no flag for a gated GELU MLP (GEGLU; it would launch a plain GELU MLP)",
        "set model.architecture.gated_linear_unit: false, or activation: quick_gelu or swiglu"),
    # Megatron-Bridge's recipe for a model whose own document has no MLA builds a GPTModelProvider: Hydra refuses
    # the MLA-only overrides (kv_lora_rank, beta_fast, ...), which that dataclass does not have.
    Rule("MLA_NOT_IN_BRIDGE_GPT_PROVIDER", "warning", MLA & Not(MODEL_MLA), MODEL_MLA,
         "bridge.overrides cannot turn multi-latent attention on: Megatron-Bridge's recipe for this model builds a "
         "GPTModelProvider, which has no MLA fields (only an MLA model's recipe builds an MLATransformerConfig "
         "provider)", "Megatron-Bridge models/gpt_provider.py GPTModelProvider; models/mla_provider.py",
         "state multi_latent_attention in the model document (and its MLA fields), or leave it off",
         None, origin="megatron-bridge"),
    # MLATransformerConfig's own YaRN fields: Megatron-LM's --yarn-* flags fill only the non-MLA yarn_* fields
    # (argument_utils._apply_yarn_config_from_args returns early for MLA), so MLA launches with the defaults
    *_not_in_megatron_lm(
        "MLA_YARN_CORRECTION_NOT_IN_MEGATRON_LM",
        MLA_YARN & Or(IsSet(F("original_max_position_embeddings")), IsSet(F("beta_fast")), IsSet(F("beta_slow"))),
        Or(Not(IsSet(F("original_max_position_embeddings"))), F("original_max_position_embeddings") == 4096)
        & Or(Not(IsSet(F("beta_fast"))), F("beta_fast") == 32.0)
        & Or(Not(IsSet(F("beta_slow"))), F("beta_slow") == 1.0),
        "has no flag for MLA's YaRN original_max_position_embeddings / beta_fast / beta_slow (it would launch "
        "with megatron-core's 4096 / 32 / 1)",
        "keep original_max_position_embeddings 4096, beta_fast 32 and beta_slow 1, or leave them unset"),
)
