"""Differential test: moeforge lint-config vs megatron-core 0.16.1's own TransformerConfig(...).

Seeded random configurations (bounded to the fields the catalogue models) are checked twice:
by `moeforge.compiler.lint.config_lint` (concrete evaluation, platform: megatron-core 0.16.1, the installed
torch, no Transformer Engine, GPU unknown) and by constructing megatron-core's
TransformerConfig, which runs ModelParallelConfig/TransformerConfig.__post_init__. For the rules
megatron-core enforces there, both must agree on accept/reject, and when megatron-core raises
an AssertionError/ValueError its text must be the rule's megatron_message (placeholders filled).
Warnings megatron-core emits for an accepted configuration must match the catalogue's warning
rules too.

Intentional differences (rules left out of the comparison, and why):

| rule(s)                                                     | why not compared here                                              |
|-------------------------------------------------------------|--------------------------------------------------------------------|
| origin megatron-bridge (EP_OVERLAP_NEEDS_EXPERTS, EP_OVERLAP_NO_MOE_RECOMPUTE on 0.16, DELAY_WGRAD_*_TE_*, DELAY_WGRAD_CUDA_GRAPH_*, DEEPEP/HYBRIDEP_NEEDS_SUPPORTED_GPU, HYBRIDEP_*, TP_OVERLAP_* (silent), SHARED_EXPERT_OVERLAP_OFF_WITH_FLEX (silent), FLEX_NEEDS_BACKEND (silent), CUDA_GRAPH_NEEDS_TE_RNG_TRACKER, CUDA_GRAPH_LOCAL_ONLY_FULL_ITERATION_IN_BRIDGE, LAYOUT_ETP_DEFAULT_DIFFERS, DP_OVERLAP_BRIDGE_NEEDS_DIST_OPT) | Megatron-Bridge checks (CommOverlapConfig, flex_dispatcher_backend, GPTModelProvider); megatron-core accepts these configurations |
| origin megatron-lm (PP_OVERLAP_NEEDS_VPP, PP_INTERLEAVED_WITHOUT_P2P_OVERLAP_NEEDS_PP3, DP_PARAM_GATHER_*, TP_OVERLAP_NEEDS_SP_IN_MEGATRON_LM, RECOMPUTE_SELECTIVE_NO_METHOD_IN_MEGATRON_LM, LAYOUT_SP_WITHOUT_TP_DROPPED_BY_MEGATRON_LM, OPTIMIZER_BF16_MAIN_GRADS_*) | Megatron-LM validate_args only; lint-config reports them only for --frontend megatron-lm (this suite lints as megatron-core); tests/lint/test_lint_vs_frontends.py compares them with Megatron-LM 0.19 |
| origin moeforge (DELAY_WGRAD_NEEDS_TE_BACKWARD_DW, *_PACKAGE_INSTALLED, CUDA_GRAPH_NEEDS_GPU, CUDA_GRAPH_TE_NEEDS_TE, PRECISION_LOW_NEEDS_TE, PRECISION_*_NEEDS_BLACKWELL/HOPPER, RANK_CAPACITY_NEEDS_MCORE_0_18, DISPATCH_BWD_OVERLAP_NEEDS_MCORE_0_18, FLEX_BACKEND_IGNORED_WITHOUT_FLEX, CUDA_GRAPH_MODULES_WITHOUT_IMPL, OPTIMIZER_BF16_*_NEEDS_TE_2_3, advice) | moeforge's own availability/hardware/measured-evidence rules; the failure happens later (model construction, kernels) or never |
| megatron-core checks outside TransformerConfig: LAYOUT_WORLD_DIVISIBLE, LAYOUT_EXPERT_WORLD_DIVISIBLE, LAYOUT_VPP_NEEDS_PP (parallel_state), LAYOUT_LAYERS_DIVISIBLE_BY_PP, LAYOUT_STAGE_LAYERS_DIVISIBLE_BY_VPP (transformer_block), LAYOUT_GBS_DIVISIBLE (num_microbatches_calculator), LAYOUT_INTERLEAVED_MICROBATCHES_* (pipeline_parallel/schedules.py, when a step starts), LAYOUT_SP_SEQ_DIVISIBLE_BY_TP (tensor_parallel/mappings.py, the first forward), TORCH_NORM_NO_* (transformer/torch_norm.py, the local spec's norm), MOE_TP_NEEDS_SP (MoELayer.forward, when training), SINKHORN_NO_AUX_LOSS (the router's first forward), EP_OVERLAP_MTP_NEEDS_MOE_LAST_LAYER (the combined schedule's first step), LOCAL_SPEC_APEX_NORM_NO_RMSNORM, DSA_NEEDS_MLA (the model's spec), FLEX_NEEDS_TP_X_EP, NCCLEP_NEEDS_MCORE_0_19 (token_dispatcher), LAYOUT_EXPERTS_DIVISIBLE_BY_EP (MoELayer's bare assert; Megatron-LM's validate_args says it first), LAYOUT_SEQ_DIVISIBLE_BY_2CP (utils.get_batch_on_this_cp_rank; Megatron-LM's validate_args says it first), NCCLEP_NEEDS_TE, NCCLEP_NEEDS_RANK_CAPACITY (0.19's NCCL EP dispatcher), MLA_NO_ATTENTION_OUTPUT_GATE, MLA_ROPE_FUSION_NEEDS_YARN (MLATransformerConfig) | raised at process-group / model / dispatcher construction, by the schedule or by the MLA subclass, not by TransformerConfig |
| EP_OVERLAP_MTP_AT_MOST_ONE with mtp_num_layers=0 | 0.16-0.18 reject 0 (only None or 1); the catalogue (like 0.19 and Bridge) accepts it because the solver encodes an unset optional integer as 0. Not generated here |
| pipeline_dtype | megatron-core requires it with PP > 1; every front-end (Megatron-LM, Bridge) sets it, so moeforge does not model it: the harness always passes pipeline_dtype=torch.bfloat16 |
| versions > 0.16.1 | only 0.16.1 installs on this Python (3.11); 0.19.2, Megatron-LM 0.19 and Megatron-Bridge are compared in tests/lint/test_lint_vs_frontends.py (under .venv312); 0.17-0.18 behaviour is keyed on the declared version and tested against the sources' texts in tests/rules |
"""
from __future__ import annotations

import random
import warnings

import pytest

torch = pytest.importorskip("torch")
tc_mod = pytest.importorskip("megatron.core.transformer.transformer_config")
activations = pytest.importorskip("megatron.core.activations")
fused_geglu = pytest.importorskip("megatron.core.fusions.fused_bias_geglu")
# quick_gelu: the object TransformerConfig compares (Megatron-LM, Bridge and the runtime use it too)
ACTIVATIONS = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
               "quick_gelu": fused_geglu.quick_gelu, "squared_relu": activations.squared_relu}

from moeforge.compiler.knobs import table as K  # noqa: E402
from moeforge.compiler.lint.config_lint import lint_mapping  # noqa: E402
from moeforge.compiler.rules import BY_ID, CATALOGUE  # noqa: E402
from moeforge.compiler.knobs.versions import version_int  # noqa: E402

MCORE = "0.16.1"
FACTS = {"megatron_core": version_int(MCORE), "torch": version_int(torch.__version__), "transformer_engine": 0}
OUTSIDE_TRANSFORMER_CONFIG = {
    "LAYOUT_WORLD_DIVISIBLE", "LAYOUT_EXPERT_WORLD_DIVISIBLE", "LAYOUT_VPP_NEEDS_PP",
    "LAYOUT_LAYERS_DIVISIBLE_BY_PP", "LAYOUT_STAGE_LAYERS_DIVISIBLE_BY_VPP", "LAYOUT_GBS_DIVISIBLE",
    "FLEX_NEEDS_TP_X_EP", "NCCLEP_NEEDS_MCORE_0_19", "LAYOUT_EXPERTS_DIVISIBLE_BY_EP",
    "LAYOUT_SEQ_DIVISIBLE_BY_2CP", "NCCLEP_NEEDS_TE", "NCCLEP_NEEDS_RANK_CAPACITY",  # the dispatcher's own checks
    # the interleaved schedule's, when a training step starts
    "LAYOUT_INTERLEAVED_MICROBATCHES_AT_LEAST_PP", "LAYOUT_INTERLEAVED_MICROBATCHES_DIVISIBLE_BY_PP",
    "LAYOUT_SP_SEQ_DIVISIBLE_BY_TP",  # tensor_parallel/mappings.py, at the first forward
    # torch_norm.py's WrappedTorchNorm, built with the local layer spec
    "TORCH_NORM_NO_ZERO_CENTERED_GAMMA", "TORCH_NORM_NO_PERSIST", "TORCH_NORM_NO_SEQUENCE_PARALLEL",
    "LOCAL_ATTENTION_NO_CONTEXT_PARALLEL",  # dot_product_attention.py's DotProductAttention, likewise
    "LOCAL_SPEC_APEX_NORM_NO_RMSNORM",  # fused_layer_norm.py's FusedLayerNorm, likewise (with APEX)
    "DSA_NEEDS_MLA",  # the DSA layer spec's assert, when the model's spec is built
    # the layer specs' per-layer patterns and the MTP layer's attention, likewise
    "MOE_LAYER_FREQ_ONE_ENTRY_PER_LAYER", "LINEAR_ATTENTION_FREQ_ONE_ENTRY_PER_LAYER", "MTP_NEEDS_SOFTMAX_LAST_LAYER",
    "GRAD_ACC_FUSION_NEEDS_APEX",  # tensor_parallel/layers.py's ColumnParallelLinear, likewise
    "ROUTER_FUSION_NEEDS_TE_2_6",  # moe_utils.py, at the router's first forward
    "MOE_PROBS_ON_INPUT_NEEDS_TOP1",  # moe/experts.py, at the experts' first forward
    "SINKHORN_NO_AUX_LOSS",  # router.py's Sinkhorn balancing, likewise
    "EP_OVERLAP_MTP_NEEDS_MOE_LAST_LAYER",  # fine_grained_callables.py, when the combined schedule's first step starts
    "MOE_TP_NEEDS_SP",  # MoELayer.forward, when training
    # TEGroupedMLP, TEDotProductAttention and TEFusedMLP: built with TE (absent here)
    "BIAS_DROPOUT_FUSION_NOT_WITH_BIASED_TE_GROUPED_EXPERTS", "SOFTMAX_TYPE_NEEDS_TE_2_8",
    "TE_OP_FUSER_DENSE_MLP_ACTIVATION", "CROSS_ENTROPY_TE_FUSION_FULL_ITERATION_NEEDS_TE_2_7",
    "SHARED_EXPERTS_NO_LINEAR_BIAS",  # SharedExpertMLP, built with the model
    "MLA_NO_ATTENTION_OUTPUT_GATE", "MLA_ROPE_FUSION_NEEDS_YARN",  # MLATransformerConfig, which these harnesses
    # do not build (the fidelity judges do: tests/fidelity/test_random_variants.py)
}
# megatron-core's bare asserts (no text to quote: the rule's words and origin are moeforge's)
BARE_ASSERTS = {"OFFLOAD_NEEDS_MODULES"}
# megatron-core's OptimizerConfig and DistributedDataParallelConfig checks: compared on their configurations below
OPTIMIZER_CONFIG = {r.id for r in CATALOGUE if r.severity == "error" and r.source.startswith(
    ("megatron-core optimizer/optimizer_config.py", "megatron-core distributed/distributed_data_parallel_config.py"))}
COMPARED = {r.id for r in CATALOGUE
            if (r.origin == "megatron-core" or r.id in BARE_ASSERTS) and r.severity == "error"
            and r.applies(FACTS) is not False and r.id not in OUTSIDE_TRANSFORMER_CONFIG | OPTIMIZER_CONFIG}
# megatron-core warnings that the catalogue carries as warning/advice rules (checked on accepted configs)
WARNING_RULES = {r.id: r for r in CATALOGUE
                 if r.origin == "megatron-core" and r.severity in ("warning", "advice")
                 and r.applies(FACTS) is not False and r.megatron_message}

SCOPES = [None, "full", ["attn"], ["moe_router", "moe_preprocess"], ["moe"], ["mlp"], ["moe_preprocess"],
          ["attn", "moe_router", "moe_preprocess"], ["full_iteration"], ["moe", "moe_router"], ["attn", "mlp"]]
MODULES = [None, ["core_attn"], ["moe_act"], ["moe"], ["layernorm", "moe_act"], ["shared_experts"],
           ["mla_up_proj"], ["mlp", "moe_act"]]


def _pick(rng, options, weights=None):
    return rng.choices(options, weights=weights)[0]


def _maybe(rng, safe, *risky, p=0.1):
    """Usually the safe value; with probability p one of the risky ones."""
    return rng.choice(risky) if risky and rng.random() < p else safe


def random_config(rng: random.Random) -> dict:
    """Mostly valid configurations with a few risky choices each (both outcomes stay common)."""
    c: dict = {"num_layers": 8, "hidden_size": 64, "num_attention_heads": _maybe(rng, 8, 6, p=0.05)}
    c["tensor_model_parallel_size"] = _pick(rng, [1, 2, 4], [3, 2, 1])
    c["pipeline_model_parallel_size"] = _pick(rng, [1, 2, 4], [3, 2, 1])
    c["virtual_pipeline_model_parallel_size"] = _pick(rng, [None, 2], [2, 1])
    c["expert_model_parallel_size"] = _pick(rng, [1, 2, 4, 8], [1, 3, 2, 1])
    c["expert_tensor_parallel_size"] = _pick(rng, [None, 1, 2], [2, 3, 1])
    c["sequence_parallel"] = c["tensor_model_parallel_size"] > 1 and rng.random() < 0.8
    c["sequence_parallel"] = _maybe(rng, c["sequence_parallel"], not c["sequence_parallel"], p=0.05)
    c["num_query_groups"] = _pick(rng, [None, 2, 8, 3], [3, 3, 3, 1])
    experts = _maybe(rng, _pick(rng, [8, 64]), None, 1, p=0.08)
    c["num_moe_experts"] = experts
    if experts is not None:
        c["moe_ffn_hidden_size"] = 64
    c["add_bias_linear"] = _maybe(rng, False, True, p=0.15)
    c["bf16"], c["fp16"] = _maybe(rng, (True, False), (False, True), (False, False), (True, True), p=0.15)
    c["moe_token_dispatcher_type"] = _pick(rng, ["allgather", "alltoall", "flex"], [1, 4, 2])
    c["moe_flex_dispatcher_backend"] = _pick(rng, ["deepep", "hybridep"])
    c["overlap_moe_expert_parallel_comm"] = _pick(rng, [False, True], [1, 1])
    c["delay_wgrad_compute"] = _maybe(rng, False, True, p=0.2)
    c["recompute_granularity"] = _pick(rng, [None, "full", "selective"], [4, 1, 3])
    if c["recompute_granularity"] == "full":
        c["recompute_method"] = _maybe(rng, "uniform", None, p=0.15)
        c["recompute_num_layers"] = _maybe(rng, 1, None, p=0.15)
    else:
        c["recompute_method"] = _maybe(rng, None, "uniform", p=0.05)
        c["recompute_num_layers"] = _maybe(rng, None, 1, p=0.05)
    c["recompute_modules"] = _pick(rng, MODULES)
    c["moe_grouped_gemm"] = _pick(rng, [False, True], [1, 3])
    c["moe_shared_expert_intermediate_size"] = _pick(rng, [None, 64])
    c["moe_shared_expert_overlap"] = _maybe(rng, False, True, p=0.12)
    c["mtp_num_layers"] = _maybe(rng, None, 1, 2, p=0.15)
    c["cuda_graph_impl"] = _pick(rng, ["none", "local", "transformer_engine", "full_iteration"], [20, 5, 10, 1])
    scope = _pick(rng, SCOPES)
    if scope is not None:
        c["cuda_graph_scope"] = scope
    c["moe_expert_capacity_factor"] = _maybe(rng, None, 1.0, p=0.2)
    c["moe_pad_expert_input_to_capacity"] = _maybe(rng, False, True, p=0.1)
    c["moe_router_padding_for_quantization"] = _maybe(rng, False, True, p=0.05)
    c["moe_enable_deepep"] = _maybe(rng, False, True, p=0.04)
    c["moe_layer_freq"] = _pick(rng, [1, 2], [3, 1])
    c["moe_router_load_balancing_type"] = _maybe(rng, "aux_loss", "sinkhorn", p=0.08)
    c["ep_overlap_early_attn_memory_release"] = _maybe(rng, False, True, p=0.05)
    c["variable_seq_lengths"] = _maybe(rng, False, True, p=0.05)
    c["moe_use_legacy_grouped_gemm"] = _maybe(rng, False, True, p=0.05)
    c["moe_router_padding_for_fp8"] = _maybe(rng, False, True, p=0.03)
    c["enable_cuda_graph"] = _maybe(rng, False, True, p=0.07)
    c["external_cuda_graph"] = _maybe(rng, False, True, p=0.07)
    c["moe_permute_fusion"] = _maybe(rng, False, True, p=0.04)
    c["hidden_dropout"] = _pick(rng, [0.0, 0.1], [2, 1])
    c["attention_dropout"] = _pick(rng, [0.0, 0.1], [2, 1])
    fp = _maybe(rng, None, "fp8", "fp8", "fp4", "both", p=0.1)
    if fp in ("fp8", "both"):
        c["fp8"] = "e4m3"
        c["fp8_recipe"] = _pick(rng, ["delayed", "tensorwise"])
    if fp in ("fp4", "both"):
        c["fp4"] = "e2m1"
    c["fp8_param"] = _maybe(rng, False, True, p=0.03)
    c["fp4_param"] = _maybe(rng, False, True, p=0.03)
    return c


def mcore_verdict(cfg: dict):
    """(accepted, exception text or None, warnings) from megatron-core's TransformerConfig."""
    kwargs = dict(cfg)
    if isinstance(kwargs.get("activation_func"), str):  # by name, as lint-config reads it
        kwargs["activation_func"] = ACTIVATIONS[kwargs["activation_func"]]
    if kwargs.get("pipeline_model_parallel_size", 1) > 1:
        kwargs["pipeline_dtype"] = torch.bfloat16
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tc_mod.TransformerConfig(**kwargs)
        except (AssertionError, ValueError) as exc:
            return False, str(exc), []
        except (TypeError, AttributeError, ImportError, KeyError) as exc:  # TE-version probes without TE
            return False, None, [repr(exc)]
    return True, None, [str(w.message) for w in caught]


def lint_verdict(cfg: dict):
    mapping = dict(cfg)
    mapping["versions"] = {"torch": torch.__version__, "transformer_engine": None, "megatron_core": MCORE}
    findings = lint_mapping(mapping, frontend="megatron-core")
    errors = [f for f in findings if f.rule in COMPARED and f.severity == "error"]
    return findings, errors


N_CONFIGS = 600
VALID = {"num_layers": 8, "hidden_size": 64, "num_attention_heads": 8, "expert_model_parallel_size": 2,
         "num_moe_experts": 8, "moe_ffn_hidden_size": 64, "add_bias_linear": False, "bf16": True,
         "moe_token_dispatcher_type": "alltoall", "moe_grouped_gemm": True, "moe_router_dtype": "fp32"}
# hand-picked additions so that rare combinations are always part of the comparison
HANDPICKED = [
    {},
    {"recompute_granularity": "selective", "recompute_modules": ["moe_act"], "fp8": "e4m3",
     "fp8_recipe": "tensorwise"},
    {"recompute_granularity": "selective", "recompute_modules": ["layernorm"], "fp8": "e4m3"},
    {"fp8": "e4m3", "fp8_recipe": "delayed", "first_last_layers_bf16": True},    # delayed scaling keeps no BF16 ends
    {"fp8": "e4m3", "fp8_recipe": "tensorwise", "first_last_layers_bf16": True},
    {"fp8": "e4m3", "fp8_recipe": "tensorwise", "first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 99},
    {"fp8": "e4m3", "fp8_recipe": "tensorwise", "first_last_layers_bf16": True, "num_layers_at_end_in_bf16": 99},
    {"enable_cuda_graph": True, "external_cuda_graph": True},
    {"enable_cuda_graph": True},
    {"external_cuda_graph": True, "cuda_graph_scope": ["attn"]},
    {"overlap_moe_expert_parallel_comm": True, "cuda_graph_impl": "local", "cuda_graph_scope": ["attn"]},
    {"overlap_moe_expert_parallel_comm": True, "mtp_num_layers": 1, "pipeline_model_parallel_size": 2,
     "virtual_pipeline_model_parallel_size": 2, "pipeline_dtype": None},
    {"moe_shared_expert_intermediate_size": 64, "moe_shared_expert_overlap": True,
     "moe_token_dispatcher_type": "flex"},
    # explicit pipeline layouts (PipelineParallelLayerLayout): one valid, then one broken check each
    *({"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": layout, **extra} for layout, extra in (
        ("Et*4|t*4L", {}), ("Et*2|t*2|t*2|t*2L", {}), ("Et*4|t*4mL", {"mtp_num_layers": 1}),
        ("Et*4|t*4x", {}), ("t*4E|t*4L", {}), ("Et*4|t*4LE", {}), ("Et*4|tt|t*2L", {}),
        ("Et*2|t*2|t*2|t*2L", {"virtual_pipeline_model_parallel_size": 3}), ("Et*4|t*3L", {}),
        ("Et*4|t*4L", {"mtp_num_layers": 1}), ("Et*4|t*3mtL", {"mtp_num_layers": 1}),
        ("Et*4|t*4m||L", {"mtp_num_layers": 1}), ("Et*4|t*4|m|mL", {"mtp_num_layers": 2}))),
    # uneven pipelines by stage sizes and by accounting (8 layers): valid ones, then one broken check each
    *({"pipeline_model_parallel_size": pp, "virtual_pipeline_model_parallel_size": vpp, **extra}
      for pp, vpp, extra in (
        (2, None, {"num_layers_in_first_pipeline_stage": 4}),
        (4, None, {"num_layers_in_first_pipeline_stage": 2, "num_layers_in_last_pipeline_stage": 2}),
        (2, None, {"num_layers_in_first_pipeline_stage": 4, "num_layers_in_last_pipeline_stage": 4}),
        (2, 2, {"num_layers_in_first_pipeline_stage": 4}),
        (4, 2, {"num_layers_in_first_pipeline_stage": 2, "num_layers_in_last_pipeline_stage": 2}),
        (4, None, {"num_layers_in_first_pipeline_stage": 6, "num_layers_in_last_pipeline_stage": 6}),  # -2 each
        (4, None, {"num_layers_in_first_pipeline_stage": 3}),
        (2, None, {"num_layers_in_first_pipeline_stage": 3, "num_layers_in_last_pipeline_stage": 3}),
        (4, None, {"num_layers_in_first_pipeline_stage": 4, "num_layers_in_last_pipeline_stage": 4}),
        (2, None, {"num_layers_in_first_pipeline_stage": 0}),
        (2, None, {"num_layers_in_last_pipeline_stage": 0}),
        (2, 2, {"num_layers_in_first_pipeline_stage": 3}),
        (2, 2, {"num_layers_in_last_pipeline_stage": 3}),
        (4, 2, {"num_layers_in_first_pipeline_stage": 4, "num_layers_in_last_pipeline_stage": 2}),
        (3, None, {"account_for_embedding_in_pipeline_split": True}),
        (2, None, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}),
        (3, 3, {"account_for_embedding_in_pipeline_split": True}),
        (2, None, {"account_for_embedding_in_pipeline_split": True}),
        (2, 2, {"account_for_loss_in_pipeline_split": True}),
        (2, 2, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}),
        (2, None, {"num_layers_in_first_pipeline_stage": 4, "account_for_embedding_in_pipeline_split": True}),
        (2, None, {"pipeline_model_parallel_layout": "Et*4|t*4L", "account_for_loss_in_pipeline_split": True}),
        (2, None, {"pipeline_model_parallel_layout": "Et*4|t*4L", "num_layers_in_first_pipeline_stage": 4}))),
    # fine-grained activation offloading: valid, then each check (0.16.1 has no fused_group_mlp module yet)
    *({"fine_grained_activation_offloading": True, "offload_modules": modules} for modules in (
        ["core_attn"], ["core_attn", "attn_proj", "expert_fc1", "moe_act"], [], ["attn_proj"], ["fused_group_mlp"])),
    # group-limited routing: valid, then each check
    *({"moe_router_group_topk": k, "moe_router_num_groups": g} for k, g in ((2, 4), (2, None), (2, 3), (8, 4))),
    {"apply_rope_fusion": True},  # the fused RoPE kernel is TE's (absent here)
    # a custom FP8 / FP4 recipe without its quantizer factory, then with one
    {"fp8": "e4m3", "fp8_recipe": "custom"}, {"fp8": "e4m3", "fp8_recipe": "custom", "fp8_quantizer_factory": "m.qf"},
    {"fp4": "e2m1", "fp4_recipe": "custom"}, {"fp4": "e2m1", "fp4_recipe": "custom", "fp4_quantizer_factory": "m.qf"},
    # top-1 softmax routing: valid with the softmax first or sigmoid scores, refused otherwise
    {"moe_router_topk": 1}, {"moe_router_topk": 1, "moe_router_pre_softmax": True},
    {"moe_router_topk": 1, "moe_router_score_function": "sigmoid"},
    # aux-loss-free routing needs the sigmoid score function; DeepSeek sparse attention's own exclusions
    {"moe_router_enable_expert_bias": True},
    {"moe_router_enable_expert_bias": True, "moe_router_score_function": "sigmoid"},
    {"experimental_attention_variant": "dsa", "context_parallel_size": 2},
    # the fused bias + activation kernel: valid ones, then each check
    *({"bias_activation_fusion": True, **extra} for extra in (
        {"add_bias_linear": True}, {"activation_func": "silu", "gated_linear_unit": True},
        {"activation_func": "quick_gelu", "gated_linear_unit": True, "glu_linear_offset": 1.0},
        {}, {"activation_func": "squared_relu"}, {"activation_func": "quick_gelu"},
        {"activation_func": "silu", "gated_linear_unit": True, "glu_linear_offset": 1.0})),
    # Gated DeltaNet heads (0.16.1: key and value heads divisible by TP, no CP): valid, then each check
    *({"experimental_attention_variant": "gated_delta_net", "linear_attention_freq": 2, "linear_conv_kernel_dim": 4,
       "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_num_key_heads": k, "linear_num_value_heads": v,
       **extra} for k, v, extra in (
        (4, 8, {}), (4, 8, {"tensor_model_parallel_size": 2, "sequence_parallel": True}), (4, 6, {}),
        (2, 4, {"tensor_model_parallel_size": 4, "sequence_parallel": True}), (4, 8, {"context_parallel_size": 2}),
        (4, 8, {"linear_attention_freq": None}))),
]


@pytest.fixture(scope="module")
def verdicts():
    rng = random.Random(20261122)
    configs = [random_config(rng) for _ in range(N_CONFIGS)]
    for extra in HANDPICKED:
        cfg = {**VALID, **extra}
        cfg.pop("pipeline_dtype", None)
        configs.append(cfg)
    return [(cfg, mcore_verdict(cfg), lint_verdict(cfg)) for cfg in configs]


def test_compared_set_is_substantial():
    assert len(COMPARED) >= 40, sorted(COMPARED)


def test_accept_reject_agree(verdicts):
    disagreements = []
    for cfg, (ok, text, extra), (findings, errors) in verdicts:
        if ok == (not errors):
            continue
        disagreements.append({"config": cfg, "mcore_accepts": ok, "mcore_says": text or extra,
                              "lint_errors": [f.rule for f in errors]})
    assert not disagreements, f"{len(disagreements)} disagreements, first: {disagreements[:3]}"


def test_both_outcomes_are_exercised(verdicts):
    accepted = sum(1 for _, (ok, _, _), _ in verdicts if ok)
    assert 0.1 * N_CONFIGS < accepted < 0.9 * N_CONFIGS, accepted


def test_rejections_carry_megatrons_text(verdicts):
    """When megatron-core raises, its message is the megatron_message of a rule lint reported."""
    mismatches, checked = [], 0
    for cfg, (ok, text, _), (findings, errors) in verdicts:
        if ok or not text:  # None: a TE probe failed; "": a bare assert
            continue
        checked += 1
        ours = {f.megatron_message for f in errors}
        if text not in ours:
            mismatches.append((text, sorted(ours), cfg))
    assert checked > 50
    assert not mismatches, mismatches[:3]


def test_every_compared_rule_fires_somewhere(verdicts):
    fired = {f.rule for _, _, (_, errors) in verdicts for f in errors}
    # the installed torch is newer than 2.6; without TE megatron-core refuses apply_rope_fusion before DSA's check
    unreachable = {"EP_OVERLAP_NEEDS_TORCH_2_6", "DSA_NO_ROPE_FUSION"}
    assert COMPARED - fired <= unreachable, sorted(COMPARED - fired - unreachable)


def test_accepted_configs_warn_alike(verdicts):
    """megatron-core's warnings for accepted configurations are the catalogue's warning rules."""
    problems = []
    for cfg, (ok, _, caught), (findings, _) in verdicts:
        if not ok:
            continue
        reported = {f.rule: f.megatron_message for f in findings if f.rule in WARNING_RULES}
        for rule_id, text in reported.items():
            if not any(text == w or text in w for w in caught):
                problems.append(("lint warns, megatron-core does not", rule_id, text, caught))
        for w in caught:
            for rule_id, rule in WARNING_RULES.items():
                if rule_id not in reported and (rule.megatron_message or "")[:40] in w:
                    problems.append(("megatron-core warns, lint does not", rule_id, w))
    assert not problems, problems[:3]


# --- megatron-core's OptimizerConfig: the precision-aware optimizer and the optimizer's dtypes -----------------
OPTIMIZER_DTYPES = {"main_grads_dtype": "bfloat16", "main_params_dtype": "float16", "exp_avg_dtype": "bfloat16",
                    "exp_avg_sq_dtype": "float16"}


def optimizer_verdicts():
    """Every combination of precision-aware on/off, distributed optimizer on/off and each dtype FP32 or lower:
    megatron-core 0.16.1's OptimizerConfig (no Transformer Engine here: neither its FusedAdam nor its version) and
    lint-config's optimizer rules must agree on accept/reject, and a refusal's text must be a reported rule's."""
    from itertools import product

    from megatron.core.optimizer import OptimizerConfig

    out = []
    for aware, dist, *low in product((False, True), (False, True), *([(False, True)] * len(OPTIMIZER_DTYPES))):
        cfg = {"use_precision_aware_optimizer": aware, "use_distributed_optimizer": dist,
               **{name: dtype if lower else "float32" for (name, dtype), lower in zip(OPTIMIZER_DTYPES.items(), low)}}
        try:
            OptimizerConfig(bf16=True, **{k: getattr(torch, v) if k.endswith("_dtype") else v for k, v in cfg.items()})
            verdict = (True, None)
        except (AssertionError, RuntimeError, ValueError) as exc:
            verdict = (False, str(exc))
        except TypeError:  # 0.16.1 probes TE's version (store_param_remainders) before looking for FusedAdam
            verdict = (False, None)
        findings = lint_mapping({**VALID, **cfg, "versions": {"torch": torch.__version__, "transformer_engine": None,
                                                              "megatron_core": MCORE}}, frontend="megatron-core")
        out.append((cfg, verdict, [f for f in findings if f.rule in OPTIMIZER_CONFIG and f.severity == "error"]))
    return out


def ddp_verdicts():
    """megatron-core 0.16.1's DistributedDataParallelConfig: the gradient buffer carries MXFP8 parameter gathers."""
    from megatron.core.distributed import DistributedDataParallelConfig

    out = []
    for reuse, fp8_param in ((False, False), (False, True), (True, False), (True, True)):
        try:
            DistributedDataParallelConfig(reuse_grad_buf_for_mxfp8_param_ag=reuse, fp8_param_gather=fp8_param)
            verdict = (True, None)
        except AssertionError as exc:
            verdict = (False, str(exc))
        fp8 = {"fp8": "e4m3", "fp8_recipe": "mxfp8", "gpu": {"name": "NVIDIA B200", "compute_capability": "10.0"}}
        cfg = {"reuse_grad_buf_for_mxfp8_param_ag": reuse, "fp8_param": fp8_param, **(fp8 if fp8_param else {})}
        findings = lint_mapping({**VALID, **cfg, "versions": {"torch": torch.__version__, "transformer_engine": None,
                                                              "megatron_core": MCORE}}, frontend="megatron-core")
        out.append((cfg, verdict, [f for f in findings if f.rule in OPTIMIZER_CONFIG and f.severity == "error"]))
    return out


def test_optimizer_configs_are_judged_alike():
    verdicts = optimizer_verdicts() + ddp_verdicts()
    assert len(verdicts) == 68 and sum(ok for _, (ok, _), _ in verdicts) == 5   # FP32 state; reuse with FP8 params
    bad = [(cfg, text, [f.rule for f in errors]) for cfg, (ok, text), errors in verdicts
           if ok == bool(errors) or (text and text not in {f.megatron_message for f in errors})]
    assert not bad, bad[:3]
    fired = {f.rule for _, _, errors in verdicts for f in errors}
    assert OPTIMIZER_CONFIG - fired == {"PRECISION_AWARE_OPTIMIZER_NEEDS_TE_1_13"}   # needs an installed TE


def test_mxfp8_memory_warning_is_megatron_cores():
    """OptimizerConfig warns about MXFP8 without the gradient buffer carrying FP8 parameter gathers; lint-config's
    warning rule fires exactly then, with that text."""
    from megatron.core.optimizer import OptimizerConfig

    rule = "PRECISION_MXFP8_WITHOUT_GRAD_BUF_REUSE_COSTS_MEMORY"
    b200 = {"name": "NVIDIA B200", "compute_capability": "10.0"}
    for recipe, reuse in (("mxfp8", False), ("mxfp8", True), ("blockwise", False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            OptimizerConfig(bf16=True, fp8_recipe=recipe, reuse_grad_buf_for_mxfp8_param_ag=reuse)
        texts = [str(w.message) for w in caught]
        cfg = {**VALID, "fp8": "e4m3", "fp8_recipe": recipe, "fp8_param": reuse, "gpu": b200,
               "reuse_grad_buf_for_mxfp8_param_ag": reuse,
               "versions": {"torch": torch.__version__, "transformer_engine": None, "megatron_core": MCORE}}
        fired = [f for f in lint_mapping(cfg, frontend="megatron-core") if f.rule == rule]
        assert bool(fired) == any(BY_ID[rule].megatron_message in t for t in texts), (recipe, reuse, texts)


def test_what_an_unset_knob_becomes_is_what_transformer_config_derives():
    """The knob table's `unset` (read by the estimates, the plan's stated MLP width and the fixes offered for
    an unset knob) against TransformerConfig.__post_init__ itself, on sizes where floor division shows."""
    derived = [k for k in K.KNOBS if k.unset]
    assert {k.field for k in derived} >= {"kv_channels", "ffn_hidden_size", "num_query_groups"}
    for hidden, heads in ((96, 6), (100, 3), (4096, 32)):
        values = {"num_layers": 2, "hidden_size": hidden, "num_attention_heads": heads}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = tc_mod.TransformerConfig(**values)
        for k in derived:
            assert getattr(config, k.field) == k.derived(values.get), (k.field, hidden, heads)
