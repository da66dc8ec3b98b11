"""The model document's own consistency: attention and routing facts that megatron-core and Megatron-LM
check whatever the layout (group-limited routing, MLA's exclusions, MTP's position embeddings, heads).

megatron-core TransformerConfig / MLATransformerConfig.__post_init__ (0.16-0.19) and Megatron-LM
validate_args.  A catalogue model passes them all; a new or edited model document is checked here before
a launch would be refused.
"""
from moeforge.compiler.knobs import table as K
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, IsSet, Not, Or

TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
MLA_TC = "megatron-core transformer/transformer_config.py MLATransformerConfig.__post_init__"
ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
LM_CONFIG = "Megatron-LM megatron/training/argument_utils.py core_transformer_config_from_args"
SPECS = "megatron-core models/gpt/gpt_layer_specs.py get_gpt_decoder_block_spec"
MTP_LAYER = "megatron-core transformer/multi_token_prediction.py MultiTokenPredictionLayer.__init__"
TOPK = "megatron-core transformer/moe/moe_utils.py topk_routing_with_score_function"
GROUP_LIMITED = "megatron-core transformer/moe/moe_utils.py group_limited_topk"
VARIANT_SPECS = "megatron-core models/gpt/experimental_attention_variant_module_specs.py get_linear_attention_pattern"

GROUPS, GROUP_TOPK = F("moe_router_num_groups"), F("moe_router_group_topk")
GROUP_ROUTING = IsSet(GROUP_TOPK) & (GROUP_TOPK > 0)
MLA = F("multi_latent_attention").is_(True)
HEADS, QUERY_GROUPS = F("num_attention_heads"), F("num_query_groups")
MTP = IsSet(F("mtp_num_layers")) & (F("mtp_num_layers") > 0)
DSA = F("experimental_attention_variant") == "dsa"
BEFORE_V17, BEFORE_V18 = (("megatron_core", "<0.17.0"),), (("megatron_core", "<0.18.0"),)
V19, BEFORE_V19 = (("megatron_core", ">=0.19.0"),), (("megatron_core", "<0.19.0"),)
ACT, GATED = F("activation_func"), F("gated_linear_unit").is_(True)
MODEL_MLA = F("model_document_mla").is_(True)
MLA_YARN = MLA & (F("rope_type") != "rope")  # MLATransformerConfig.rope_type defaults to yarn
VIA_LM = F("entrypoint") == "megatron-lm"


def _not_in_megatron_lm(rule_id: str, when, require, what: str, fix: str) -> tuple:
    """A model Megatron-LM's flags cannot state: Megatron-LM raises nothing, it builds another model.  An
    error when the launch runs Megatron-LM (moeforge's words: Megatron says nothing); otherwise a warning
    that megatron-lm.args, which every compile writes, would not build the plan's model."""
    return (Rule(id=rule_id, severity="error", when=VIA_LM & when, require=require,
                 message=f"the launch runs Megatron-LM, which {what}", source=LM_CONFIG,
                 fix=fix + ", or use runtime.entrypoint: moeforge", megatron_message=None, origin="moeforge"),
            Rule(id=rule_id + "_ARGS", severity="warning", when=Not(VIA_LM) & when, require=require,
                 message=f"megatron-lm.args cannot state this model: Megatron-LM {what}", source=LM_CONFIG, fix=fix,
                 megatron_message=None, origin="megatron-lm"))


RULES = (
    Rule(id="ROUTER_GROUP_TOPK_NEEDS_NUM_GROUPS", severity="error", when=GROUP_ROUTING,
         require=IsSet(GROUPS) & (GROUPS > 0),
         message="group-limited routing (moe.router_group_topk) needs the number of expert groups", source=TC,
         fix="set model.moe.router_num_groups (it must divide the experts), or unset model.moe.router_group_topk",
         megatron_message="When using group limited routing, moe_router_num_groups must be specified."),
    Rule(id="ROUTER_EXPERTS_DIVISIBLE_BY_GROUPS", severity="error", when=GROUP_ROUTING & IsSet(GROUPS) & (GROUPS > 0),
         require=F("num_moe_experts") % GROUPS == 0,
         message="the experts must split evenly into the router's expert groups", source=TC,
         fix="choose model.moe.router_num_groups dividing model.moe.num_experts",
         megatron_message="num_moe_experts ({num_moe_experts}) should be divisible by moe_router_num_groups "
                          "({moe_router_num_groups})."),
    Rule(id="ROUTER_GROUP_TOPK_AT_MOST_NUM_GROUPS", severity="error", when=GROUP_ROUTING & IsSet(GROUPS) & (GROUPS > 0),
         require=GROUP_TOPK <= GROUPS, message="a token cannot pick more expert groups than there are", source=TC,
         fix="set model.moe.router_group_topk <= model.moe.router_num_groups",
         megatron_message="moe_router_group_topk ({moe_router_group_topk}) should be smaller than "
                          "moe_router_num_groups ({moe_router_num_groups})."),
    # raised at the router's first forward (TopKRouter.sinkhorn_load_balancing), after every front-end accepted it
    Rule(id="SINKHORN_NO_AUX_LOSS", severity="error", when=F("moe_router_load_balancing_type") == "sinkhorn",
         require=F("aux_loss_coeff_zero").is_(True), message="Sinkhorn load balancing takes no auxiliary loss",
         source="megatron-core transformer/moe/router.py TopKRouter.sinkhorn_load_balancing, at the router's first "
                "forward", fix="set model.moe.aux_loss_coeff: 0, or another model.moe.router_load_balancing_type",
         megatron_message="Sinkhorn routing does not support aux loss."),
    # Found by tests/fuzz/test_runtime_truth.py (compiled, then failed at the router's first forward): megatron-core
    # checks neither; torch.topk raises "selected index k out of range" (RuntimeError), every rank at step 1.
    Rule(id="ROUTER_TOPK_AT_MOST_NUM_EXPERTS", severity="error", when=IsSet(F("num_moe_experts"))
         & (F("num_moe_experts") > 0), require=F("moe_router_topk") <= F("num_moe_experts"),
         message="a token cannot be routed to more experts than there are (router_topk above num_experts)",
         source=f"{TOPK} (torch.topk(scores, k=topk) at line 697 of 0.16.1), at the router's first forward step",
         fix="set model.moe.router_topk <= model.moe.num_experts", megatron_message=None, origin="moeforge"),
    Rule(id="ROUTER_GROUP_TOPK_REACHES_TOPK", severity="error",
         when=GROUP_ROUTING & IsSet(GROUPS) & (GROUPS > 0) & IsSet(F("num_moe_experts")),
         require=F("moe_router_topk") * GROUPS <= GROUP_TOPK * F("num_moe_experts"),
         message="group-limited routing picks router_topk experts among router_group_topk groups of "
                 "num_experts / router_num_groups experts each: there are fewer than router_topk to pick from",
         source=f"{GROUP_LIMITED} (scores.view(...).topk(topk // group_topk) at line 554, torch.topk(masked_scores, "
                "k=topk) at line 568 of 0.16.1), at the router's first forward step",
         fix="raise model.moe.router_group_topk (to router_topk x router_num_groups / num_experts or more), or "
             "lower model.moe.router_topk", megatron_message=None, origin="moeforge"),
    # softmax over a single selected logit is constant: its gradient is zero
    Rule(id="ROUTER_TOP1_SOFTMAX_NEEDS_PRE_SOFTMAX", severity="error",
         when=(F("moe_router_topk") == 1) & (F("moe_router_score_function") == "softmax")
         & (F("moe_router_load_balancing_type") != "sinkhorn"), require=F("moe_router_pre_softmax").is_(True),
         message="top-1 routing with softmax scores needs the softmax before the top-k", source=TC,
         fix="set model.moe.router_pre_softmax: true (or router_score_function: sigmoid)",
         megatron_message="Please use --moe-router-pre-softmax when topk is 1."),
    # asserted where the experts' forward runs (SequentialMLP, TEGroupedMLP, GroupedMLP), after every check passed
    Rule(id="MOE_PROBS_ON_INPUT_NEEDS_TOP1", severity="error", when=F("moe_apply_probs_on_input").is_(True),
         require=F("moe_router_topk") == 1,
         message="multiplying each expert's input by its router score (moe.apply_probs_on_input) takes top-1 routing",
         source="megatron-core transformer/moe/experts.py (0.16-0.19), at the experts' first forward",
         fix="set model.moe.router_topk: 1, or model.moe.apply_probs_on_input: false",
         megatron_message="`moe_apply_probs_on_input` only works with `moe_router_topk`=1."),
    Rule(id="MLA_NO_ATTENTION_OUTPUT_GATE", severity="error", when=MLA, require=F("attention_output_gate").is_(False),
         message="multi-latent attention has no output gate", source=MLA_TC,
         fix="set model.architecture.attention_output_gate: false (or multi_latent_attention: false)",
         megatron_message="Output gate is not supported for MLA yet."),
    Rule(id="MLA_ROPE_FUSION_NEEDS_YARN", severity="error", when=MLA & F("apply_rope_fusion").is_(True),
         require=F("rope_type") != "rope", message="multi-latent attention fuses RoPE only in its YaRN flavour",
         source=MLA_TC, fix="set kernels.apply_rope_fusion: false (or model.architecture.rope_type: yarn)",
         megatron_message="apply_rope_fusion for MLA only works with YARN RoPE."),
    # Megatron-LM passes --group-query-attention whenever num_query_groups < num_attention_heads
    Rule(id="MLA_NO_GROUP_QUERY_ATTENTION", severity="error", when=MLA & IsSet(QUERY_GROUPS),
         require=QUERY_GROUPS >= HEADS,
         message="multi-latent attention has no grouped-query attention (num_query_groups below the heads)",
         source=ARGS, fix="set model.architecture.num_query_groups to num_attention_heads (or null)",
         megatron_message="Group query attention is mutually exclusive with multi latent attention.",
         origin="megatron-lm"),
    Rule(id="MTP_NEEDS_ROPE_OR_NO_POSITION_EMBEDDING", severity="error", when=MTP,
         require=Or(F("position_embedding_type") == "rope", F("position_embedding_type") == "none"),
         message="multi-token prediction needs RoPE (or no) position embeddings in Megatron-LM", source=ARGS,
         fix="set model.architecture.position_embedding_type: rope, or model.mtp_num_layers: null",
         megatron_message="Multi-Token Prediction (MTP) is not supported with {position_embedding_type} position "
                          "embedding type.", origin="megatron-lm"),
    # a bare `assert args.hidden_size % args.num_attention_heads == 0` (no text of Megatron's to quote)
    Rule(id="HIDDEN_DIVISIBLE_BY_HEADS", severity="error", when=Not(IsSet(F("kv_channels"))),
         require=F("hidden_size") % HEADS == 0,
         message="without kv_channels the head size is hidden_size / num_attention_heads, which must be whole",
         source=f"{ARGS} (when kv_channels is unset)",
         fix="set model.architecture.kv_channels (the head size), or heads dividing hidden_size", megatron_message=None,
         origin="moeforge"),
    # RotaryEmbedding / YarnRotaryEmbedding build one frequency per pair of head dimensions and concatenate two
    # copies: an odd head size gives a table one row short (a tensor-size error while building a YaRN model,
    # at the first forward step with RoPE); megatron-core says nothing of its own
    Rule(id="ROPE_NEEDS_EVEN_HEAD_SIZE", severity="error",
         when=Not(MLA) & Or(F("position_embedding_type") == "rope", F("position_embedding_type") == "yarn")
         & (F("rotary_percent") == 1.0), require=Or(IsSet(F("kv_channels")) & (F("kv_channels") % 2 == 0),
                                            Not(IsSet(F("kv_channels"))) & (F("hidden_size") % (HEADS * 2) == 0)),
         message="rotary position embeddings need an even head size (kv_channels, or hidden_size / "
                 "num_attention_heads)",
         source="megatron-core models/common/embeddings/rotary_pos_embedding.py RotaryEmbedding (and YaRN's)",
         fix="set model.architecture.kv_channels to an even head size", megatron_message=None, origin="moeforge"),
    Rule(id="ROUTER_EXPERT_BIAS_NEEDS_SIGMOID", severity="error", when=F("moe_router_enable_expert_bias").is_(True),
         require=F("moe_router_score_function") == "sigmoid",
         message="aux-loss-free routing (expert bias) needs the sigmoid score function", source=TC,
         fix="set model.moe.router_score_function: sigmoid, or model.moe.router_enable_expert_bias: false",
         megatron_message="Expert bias for aux-loss-free routing only supports 'sigmoid' and 'sqrtsoftplus' score "
                          "functions. Please set --moe-router-score-function to 'sigmoid' or 'sqrtsoftplus', or unset "
                          "--moe-router-enable-expert-bias.",
         variants=((BEFORE_V18, "Expert bias for aux-loss-free routing only supports sigmoid score function."
                                "Please set --moe-router-score-function sigmoid for sigmoid score function."),)),
    # a query group holds num_attention_heads / num_query_groups query heads (megatron-core's attention and TE's
    # DotProductAttention divide them); megatron-core's TransformerConfig itself does not check it
    Rule(id="HEADS_DIVISIBLE_BY_QUERY_GROUPS", severity="error", when=IsSet(QUERY_GROUPS) & (QUERY_GROUPS > 0),
         require=HEADS % QUERY_GROUPS == 0, message="the attention heads must split evenly into the query groups",
         source="megatron-core transformer/attention.py (query heads per group); Megatron-LM emits --num-query-groups "
                "only below the heads", fix="choose model.architecture.num_query_groups dividing num_attention_heads",
         megatron_message=None, origin="moeforge"),
    # DeepSeek sparse attention's spec (models/gpt/experimental_attention_variant_module_specs.py) asserts MLA ...
    Rule(id="DSA_NEEDS_MLA", severity="error", when=DSA, require=MLA,
         message="DeepSeek sparse attention is built on multi-latent attention only",
         source="megatron-core models/gpt/experimental_attention_variant_module_specs.py "
                "get_dsa_module_spec_for_backend, when the model is built",
         fix="set model.architecture.multi_latent_attention: true (with its LoRA ranks and head sizes), or remove "
             "model.architecture.experimental_attention_variant",
         megatron_message="Currently only MLA supports sparse attention."),
    # ... and its indexer takes its sizes from dsa_indexer_n_heads / head_dim / topk (None by default: DSAIndexer's
    # softmax scale, head_dim ** -0.5, is a TypeError). A flat config linted may state them; the model schema cannot.
    Rule(id="DSA_NEEDS_INDEXER_SIZES", severity="error", when=DSA, require=F("dsa_indexer_stated").is_(True),
         message="DeepSeek sparse attention needs its indexer's sizes (dsa_indexer_n_heads, dsa_indexer_head_dim, "
                 "dsa_indexer_topk), which a recipe's model schema cannot state yet; megatron-core cannot build the "
                 "indexer without them",
         source="megatron-core transformer/experimental_attention_variant/dsa.py DSAIndexer.__init__, when the model "
                "is built",
         fix="remove model.architecture.experimental_attention_variant: dsa (DeepSeek-V3's dense MLA); in a linted "
             "flat config, state the three sizes", megatron_message=None, origin="moeforge"),
    Rule(id="DSA_NO_CONTEXT_PARALLEL", severity="error", when=DSA, require=F("context_parallel_size") == 1,
         message="DeepSeek sparse attention takes no context parallelism before megatron-core 0.19", source=TC,
         fix="set parallelism.cp: 1, or use a platform with megatron-core >= 0.19 (with parallelism.cp_comm_type: "
             "allgather)", megatron_message="Currently context parallelism is not supported by DSAttention!",
         versions=BEFORE_V19),
    Rule(id="DSA_CONTEXT_PARALLEL_NEEDS_ALLGATHER", severity="error", when=DSA & (F("context_parallel_size") > 1),
         require=F("cp_comm_type") == "allgather",
         message="DeepSeek sparse attention runs context parallelism with the allgather exchange only", source=TC,
         fix="set parallelism.cp_comm_type: allgather, or parallelism.cp: 1",
         megatron_message="DSAttention context parallelism currently supports cp_comm_type=allgather only.",
         versions=V19),
    Rule(id="DSA_NO_ROPE_FUSION", severity="error", when=DSA, require=F("apply_rope_fusion").is_(False),
         message="DeepSeek sparse attention has no fused RoPE", source=TC, fix="set kernels.apply_rope_fusion: false",
         megatron_message="RoPE fusion is not supported for DSAttention"),
    Rule(id="DSA_NO_LINEAR_BIAS", severity="error", when=DSA, require=F("add_bias_linear").is_(False),
         message="DeepSeek sparse attention (absorbed MLA) has no linear bias", source=TC,
         fix="set model.architecture.add_bias_linear: false",
         megatron_message="DSA uses AbsorbedMLASelfAttention, which requires add_bias_linear=False. Disable linear "
                          "bias for DSA configs.", versions=V19),
    Rule(id="GDN_NEEDS_LINEAR_ATTENTION_FREQ", severity="error",
         when=F("experimental_attention_variant") == "gated_delta_net", require=IsSet(F("linear_attention_freq")),
         message="Gated DeltaNet needs the pattern of linear and softmax layers", source=TC,
         fix="set model.architecture.linear_attention_freq (N: every Nth layer is softmax attention)",
         megatron_message="linear_attention_freq must be set for linear gated_delta_net."),
    # megatron-core asserts these when it builds the layer specs (gpt_layer_specs.py get_gpt_decoder_block_spec,
    # experimental_attention_variant_module_specs.py), after Megatron-LM's validate_args accepted the launch
    Rule(id="MOE_LAYER_FREQ_ONE_ENTRY_PER_LAYER", severity="error", when=IsSet(F("num_moe_experts")),
         require=F("moe_layer_freq_fits").is_(True),
         message="a per-layer MoE pattern (model.moe.layer_freq) needs one entry per decoder layer", source=SPECS,
         fix="give model.moe.layer_freq one 0/1 entry per layer (model.architecture.num_layers), or an integer N "
             "(every Nth layer MoE)",
         megatron_message="Invalid length of moe_layer_pattern: {moe_layer_freq_entries}, expected {num_layers}, "
                          "current moe layer pattern: {moe_layer_freq}"),
    Rule(id="LINEAR_ATTENTION_FREQ_ONE_ENTRY_PER_LAYER", severity="error",
         when=F("experimental_attention_variant") == "gated_delta_net",
         require=F("linear_attention_freq_fits").is_(True),
         message="a per-layer linear-attention pattern (model.architecture.linear_attention_freq) needs one entry per "
                 "decoder layer", source=VARIANT_SPECS,
         fix="give model.architecture.linear_attention_freq one 0/1 entry per layer (model.architecture.num_layers), "
             "or an integer N (every Nth layer softmax attention)",
         megatron_message="Invalid length of linear_attention_pattern: {linear_attention_freq_entries}, expected "
                          "{num_layers}, current linear attention pattern: {linear_attention_freq}"),
    # MultiTokenPredictionLayer.__init__ (all releases) refuses an MTP layer whose attention has no causal mask type;
    # megatron-core, Megatron-LM (gpt_builders.py) and moeforge's runtime build it with the last decoder layer's spec
    Rule(id="MTP_NEEDS_SOFTMAX_LAST_LAYER", severity="error",
         when=MTP & (F("experimental_attention_variant") == "gated_delta_net"),
         require=F("last_layer_linear_attention").is_(False),
         message="an MTP layer is built like the last decoder layer, and megatron-core builds MTP only on softmax "
                 "attention, not Gated DeltaNet", source=MTP_LAYER,
         fix="make the last decoder layer softmax attention (model.architecture.linear_attention_freq: an N dividing "
             "num_layers, or a list ending in 0), or set model.mtp_num_layers: null",
         megatron_message="Multi-Token Prediction (MTP) is not yet supported with {attn_mask_type} attention mask "
                          "type. The supported attention mask types are {SUPPORTED_ATTN_MASK}.",
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
    Rule(id="MLA_NOT_IN_BRIDGE_GPT_PROVIDER", severity="warning", when=MLA & Not(MODEL_MLA), require=MODEL_MLA,
         message="bridge.overrides cannot turn multi-latent attention on: Megatron-Bridge's recipe for this model "
                 "builds a GPTModelProvider, which has no MLA fields (only an MLA model's recipe builds an "
                 "MLATransformerConfig provider)",
         source="Megatron-Bridge models/gpt_provider.py GPTModelProvider; models/mla_provider.py",
         fix="state multi_latent_attention in the model document (and its MLA fields), or leave it off",
         megatron_message=None, origin="megatron-bridge"),
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
