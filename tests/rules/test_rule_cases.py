"""Every rule of the catalogue: a configuration that violates it and one that satisfies it.

Cases are deltas on BASE, a valid H100 / megatron-core 0.19 / TE 2.12 MoE configuration, and are
evaluated concretely (moeforge.compiler.lint.config_lint, the same evaluator the plan's warnings use). A passing
configuration must not trigger the rule, nor any error at all. Exact megatron messages are checked
for a selection here, against megatron-core 0.16.1 itself in tests/lint/test_lint_vs_mcore016.py,
and against the Megatron sources in tests/rules/test_messages_in_sources.py.
"""
from __future__ import annotations

import pytest

from moeforge.compiler.lint.config_lint import lint_mapping
from moeforge.compiler.rules import BY_ID, CATALOGUE

H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
B200 = {"name": "NVIDIA B200", "compute_capability": "10.0"}
GB200 = {"name": "NVIDIA GB200", "compute_capability": "10.0"}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}
V100 = {"name": "Tesla V100-SXM2-32GB", "compute_capability": "7.0"}


def V(mcore="0.19.0", te="2.12.0", torch="2.9.0", apex=None):
    """Versions, and APEX as moeforge.compiler.solver.inputs derives it when the platform does not say: installed with TE."""
    return {"versions": {"torch": torch, "transformer_engine": te, "megatron_core": mcore},
            "apex_installed": te is not None if apex is None else apex}


BASE = {
    "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
    "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 1, "sequence_parallel": False,
    "num_layers": 16, "hidden_size": 1024, "num_attention_heads": 16, "num_query_groups": 4,
    "num_moe_experts": 64, "moe_ffn_hidden_size": 512, "moe_grouped_gemm": True, "add_bias_linear": False,
    "moe_router_dtype": "fp32", "bf16": True, "moe_token_dispatcher_type": "alltoall",
    "overlap_moe_expert_parallel_comm": True,
    "world_size": 64, "num_nodes": 8, "gpus_per_node": 8, "nvlink_domain": 8,
    "micro_batch_size": 1, "global_batch_size": 512,
    "use_distributed_optimizer": True, "overlap_grad_reduce": True, "overlap_param_gather": True,
    "gpu": H100, **V(), "deep_ep_installed": True, "hybrid_ep_installed": True,
}
G = {"cuda_graph_impl": "transformer_engine", "use_te_rng_tracker": True}
DROPLESS = ["attn", "moe_router", "moe_preprocess"]
NO_EPO = {"overlap_moe_expert_parallel_comm": False}
FLEX_DEEPEP = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}
FLEX_HYBRIDEP = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
                 "hybridep_ranks_per_nvlink_domain": 8}
FULL = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
SEL = {"recompute_granularity": "selective"}
FP8 = {"fp8": "e4m3", "fp8_recipe": "blockwise"}
NVL72 = {"gpu": GB200, "nvlink_domain": 72, "gpus_per_node": 4, "num_nodes": 16}
DWG = {"delay_wgrad_compute": True}
TP2 = {"tensor_model_parallel_size": 2, "sequence_parallel": True}
PP2_VPP = {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2, "overlap_p2p_comm": True}
LAYOUT_PP2 = {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et*8|t*8L", **NO_EPO}
PP2, PP4 = {"pipeline_model_parallel_size": 2, **NO_EPO}, {"pipeline_model_parallel_size": 4, **NO_EPO}
PP4_VPP = {**PP2_VPP, "pipeline_model_parallel_size": 4}
FIRST, LAST = "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"
EMB = {"account_for_embedding_in_pipeline_split": True}
LOSS = {"account_for_loss_in_pipeline_split": True}
RANKCAP = {"moe_expert_rank_capacity_factor": 1.5, "use_transformer_engine_op_fuser": True}
INDEXED = {"entrypoint": "megatron-lm", "data_kind": "indexed", "data_paths": ["/data/corpus_text_document"],
           "data_blend": None}
BLEND = [{"weight": 0.7, "path": "/data/a"}, {"weight": 0.3, "path": "/data/b"}]
SAVES = {"save": "/ckpt", "save_interval": 100}
MLA = {"multi_latent_attention": True, "q_lora_rank": 64, "kv_lora_rank": 64, "qk_head_dim": 32,
       "qk_pos_emb_head_dim": 16, "v_head_dim": 32, "num_query_groups": None}
# DeepSeek sparse attention on MLA, its indexer's sizes stated as a flat config states them
DSA = {**MLA, "experimental_attention_variant": "dsa", "dsa_indexer_n_heads": 8, "dsa_indexer_head_dim": 32,
       "dsa_indexer_topk": 64}
OFFLOAD = {"fine_grained_activation_offloading": True, "offload_modules": ["core_attn"]}
GDN = {"experimental_attention_variant": "gated_delta_net", "linear_attention_freq": 4, "linear_conv_kernel_dim": 4,
       "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
       "linear_num_value_heads": 32}
ASYNC = {"async_save": True, "ckpt_format": "torch_dist"}
NCCLEP = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "ncclep", **RANKCAP}
FUSED = {"bias_activation_fusion": True}
SWIGLU = {"activation_func": "silu", "gated_linear_unit": True}
AWARE = {"use_precision_aware_optimizer": True}
MXFP8 = {"fp8": "e4m3", "fp8_recipe": "mxfp8", "gpu": B200}
OFFLOAD_EXPERT = {"fine_grained_activation_offloading": True, "offload_modules": ["expert_fc1"]}
LOCAL_GRAPH = {"cuda_graph_impl": "local"}
DROP_PAD = {"moe_expert_capacity_factor": 1.0, "moe_pad_expert_input_to_capacity": True}
BF16_MOMENTS = {**AWARE, "exp_avg_dtype": "bfloat16", "exp_avg_sq_dtype": "bfloat16"}


def c(*parts, **kw):
    out = {}
    for p in parts:
        out.update(p)
    out.update(kw)
    return out


# rule id -> (violating delta, satisfying delta)
CASES = {
    # --- EP overlap
    "EP_OVERLAP_NEEDS_EP": (c(expert_model_parallel_size=1), {}),
    "EP_OVERLAP_NEEDS_EXPERTS": (c(num_moe_experts=1, expert_model_parallel_size=1), {}),
    "EP_OVERLAP_NEEDS_A2A_OR_FLEX": (c(moe_token_dispatcher_type="allgather"), FLEX_DEEPEP),
    "EP_OVERLAP_NEEDS_BF16_OR_FP16": (c(bf16=False), c(bf16=False, fp16=True)),
    "EP_OVERLAP_NEEDS_TORCH_2_6": (V(torch="2.5.1"), {}),
    "EP_OVERLAP_NEEDS_VPP": (c(pipeline_model_parallel_size=2), PP2_VPP),
    "EP_OVERLAP_NO_FULL_RECOMPUTE": (c(FULL), c(SEL, recompute_modules=["moe_act"])),
    "EP_OVERLAP_NO_RECOMPUTE_METHOD": (c(recompute_method="uniform"), {}),
    "EP_OVERLAP_NO_RECOMPUTE_NUM_LAYERS": (c(recompute_num_layers=1), {}),
    "EP_OVERLAP_NO_MOE_RECOMPUTE": (c(SEL, V(mcore="0.16.1"), recompute_modules=["moe"]),
                                    c(SEL, recompute_modules=["moe_act"])),
    "EP_OVERLAP_NO_MOE_RECOMPUTE_MCORE": (c(SEL, recompute_modules=["moe"]), c(SEL, recompute_modules=["moe_act"])),
    "EP_OVERLAP_NO_SHARED_EXPERT_OVERLAP": (
        c(moe_shared_expert_intermediate_size=512, moe_shared_expert_overlap=True),
        c(moe_shared_expert_intermediate_size=512)),
    "EP_OVERLAP_MTP_AT_MOST_ONE": (c(mtp_num_layers=2), c(mtp_num_layers=1)),
    "EP_OVERLAP_MTP_NEEDS_PP": (c(V("0.17.1"), mtp_num_layers=1), c(V("0.18.0"), mtp_num_layers=1)),
    # BASE's 16 layers: a per-layer list ending dense; every 5th layer MoE ends on one (layer 15)
    "EP_OVERLAP_MTP_NEEDS_MOE_LAST_LAYER": (c(mtp_num_layers=1, moe_layer_freq=[1] * 15 + [0]),
                                            c(mtp_num_layers=1, moe_layer_freq=5)),
    "EP_OVERLAP_CUDA_GRAPH_SCOPE": (c(G, cuda_graph_modules=["attn", "mlp"], moe_layer_freq=2),
                                    c(G, cuda_graph_modules=DROPLESS)),
    "EP_OVERLAP_CUDA_GRAPH_IMPL": (c(V("0.16.1"), G, cuda_graph_impl="local", cuda_graph_modules=["attn"]),
                                   c(V("0.18.0"), G, cuda_graph_impl="local", cuda_graph_modules=["attn"])),
    "EP_OVERLAP_NCCLEP_NO_EXPERT_FC1_OFFLOAD": (
        c(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="ncclep",
          fine_grained_activation_offloading=True, offload_modules=["expert_fc1"]),
        c(NCCLEP, fine_grained_activation_offloading=True, offload_modules=["core_attn"])),
    "EP_OVERLAP_EARLY_ATTN_RELEASE_NEEDS_EP_OVERLAP": (c(NO_EPO, ep_overlap_early_attn_memory_release=True),
                                                       c(ep_overlap_early_attn_memory_release=True)),
    # --- delayed wgrad
    "DELAY_WGRAD_NEEDS_EP_OVERLAP": (c(DWG, NO_EPO), DWG),
    # below TE 2.7 Megatron-LM wants the fusion on with delayed wgrad and Bridge wants it off: the passing
    # cases take a newer TE
    "DELAY_WGRAD_GRAD_REDUCE_NEEDS_TE_2_7": (
        c(DWG, V(te="2.6.0")), c(DWG, V(te="2.8.0"))),
    "DELAY_WGRAD_GRAD_ACC_FUSION_NEEDS_TE_2_7": (
        c(DWG, V(te="2.6.0"), gradient_accumulation_fusion=True, overlap_grad_reduce=False,
          overlap_param_gather=False),
        c(DWG, V(te="2.7.0"), gradient_accumulation_fusion=True, overlap_grad_reduce=False,
          overlap_param_gather=False)),
    "DELAY_WGRAD_CUDA_GRAPH_NEEDS_TE_2_12": (
        c(DWG, G, V(te="2.11.0"), cuda_graph_modules=DROPLESS, gradient_accumulation_fusion=True),
        c(DWG, G, V(te="2.11.0"), cuda_graph_modules=["moe_router", "moe_preprocess"])),
    "DELAY_WGRAD_CUDA_GRAPH_NEEDS_GRAD_ACC_FUSION": (
        c(DWG, G, cuda_graph_modules=DROPLESS, gradient_accumulation_fusion=False),
        c(DWG, G, cuda_graph_modules=DROPLESS, gradient_accumulation_fusion=True)),
    "DELAY_WGRAD_CUDA_GRAPH_NO_ATTN_BIAS": (
        c(DWG, G, cuda_graph_modules=DROPLESS, gradient_accumulation_fusion=True, add_qkv_bias=True),
        c(DWG, G, cuda_graph_modules=DROPLESS, gradient_accumulation_fusion=True)),
    "DELAY_WGRAD_PARTIAL_CUDA_GRAPH_NEEDS_TE_2_10": (
        c(DWG, G, V(te="2.9.0"), cuda_graph_modules=["moe_router", "moe_preprocess"]),
        c(DWG, G, V(te="2.10.0"), cuda_graph_modules=["moe_router", "moe_preprocess"])),
    "DELAY_WGRAD_NO_LEGACY_GROUPED_GEMM": (c(DWG, V("0.16.1"), moe_use_legacy_grouped_gemm=True),
                                          c(DWG, V("0.16.1"))),
    "DELAY_WGRAD_NEEDS_TE_BACKWARD_DW": (
        c(DWG, V("0.16.1", te=None), overlap_grad_reduce=False, overlap_param_gather=False),
        c(DWG, V("0.16.1"), overlap_grad_reduce=False, overlap_param_gather=False)),
    "DISPATCH_BWD_OVERLAP_NEEDS_MCORE_0_18": (
        c(NO_EPO, V("0.17.0"), overlap_dispatch_backward_with_experts_wgrad=True),
        c(NO_EPO, V("0.18.0"), overlap_dispatch_backward_with_experts_wgrad=True)),
    "DISPATCH_BWD_OVERLAP_NOT_WITH_EP_OVERLAP": (c(overlap_dispatch_backward_with_experts_wgrad=True),
                                                 c(NO_EPO, overlap_dispatch_backward_with_experts_wgrad=True)),
    "DISPATCH_BWD_OVERLAP_NEEDS_TE_2_3": (
        c(NO_EPO, V(te="2.2.0"), overlap_dispatch_backward_with_experts_wgrad=True),
        c(NO_EPO, V(te="2.3.0"), overlap_dispatch_backward_with_experts_wgrad=True)),
    "DISPATCH_BWD_OVERLAP_NOT_WITH_DELAY_WGRAD": (
        c(NO_EPO, DWG, overlap_dispatch_backward_with_experts_wgrad=True),
        c(NO_EPO, overlap_dispatch_backward_with_experts_wgrad=True)),
    # --- dispatcher
    "FLEX_NEEDS_BACKEND": (c(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend=None), FLEX_DEEPEP),
    "GLOO_ALLTOALL_NO_EXPERT_TP": (c(distributed_backend="gloo", expert_tensor_parallel_size=2),
                                   c(distributed_backend="gloo", expert_tensor_parallel_size=1)),
    "FLEX_NEEDS_TP_X_EP": (c(FLEX_DEEPEP, NO_EPO, expert_model_parallel_size=1), FLEX_DEEPEP),
    "NVLINK_EP_GROUP_SPANS_DOMAINS": (
        c(NVL72, world_size=256, num_nodes=64, expert_model_parallel_size=128, num_moe_experts=128),
        c(NVL72, world_size=256, num_nodes=64, expert_model_parallel_size=64)),
    "DEEPEP_NEEDS_SUPPORTED_GPU": (c(FLEX_DEEPEP, NVL72), c(FLEX_DEEPEP, gpu=B200)),
    "HYBRIDEP_NEEDS_SUPPORTED_GPU": (
        c(FLEX_HYBRIDEP, gpu={"name": "NVIDIA R100", "compute_capability": "11.0"}),
        c(FLEX_HYBRIDEP, NVL72, hybridep_ranks_per_nvlink_domain=8)),
    "DEEPEP_PACKAGE_INSTALLED": (c(FLEX_DEEPEP, deep_ep_installed=False), FLEX_DEEPEP),
    "HYBRIDEP_PACKAGE_INSTALLED": (c(FLEX_HYBRIDEP, hybrid_ep_installed=False), FLEX_HYBRIDEP),
    "HYBRIDEP_RANKS_MATCH_NVLINK_DOMAIN": (
        c(FLEX_HYBRIDEP, expert_model_parallel_size=16, hybridep_ranks_per_nvlink_domain=16),
        c(FLEX_HYBRIDEP, expert_model_parallel_size=16, hybridep_ranks_per_nvlink_domain=8)),
    "HYBRIDEP_EP_WITHIN_NVL72": (
        c(FLEX_HYBRIDEP, NVL72, expert_model_parallel_size=128, num_moe_experts=128, world_size=128,
          num_nodes=32, hybridep_ranks_per_nvlink_domain=72),
        c(FLEX_HYBRIDEP, NVL72, hybridep_ranks_per_nvlink_domain=8)),
    "SHARED_EXPERT_OVERLAP_DISPATCHER": (
        c(NO_EPO, moe_shared_expert_intermediate_size=512, moe_shared_expert_overlap=True,
          moe_token_dispatcher_type="allgather"),
        c(NO_EPO, moe_shared_expert_intermediate_size=512, moe_shared_expert_overlap=True)),
    "SHARED_EXPERT_OVERLAP_OFF_WITH_FLEX": (c(NO_EPO, FLEX_DEEPEP, moe_shared_expert_overlap=True),
                                            c(NO_EPO, FLEX_DEEPEP)),
    "DEEPEP_NO_PAD_TO_CAPACITY": (
        c(FLEX_DEEPEP, moe_pad_expert_input_to_capacity=True, moe_expert_capacity_factor=1.0),
        c(FLEX_HYBRIDEP, moe_pad_expert_input_to_capacity=True, moe_expert_capacity_factor=1.0)),
    "MOE_ENABLE_DEEPEP_NEEDS_FLEX": (c(moe_enable_deepep=True), c(FLEX_DEEPEP, moe_enable_deepep=True)),
    "MOE_ENABLE_DEEPEP_NOT_HYBRIDEP": (c(FLEX_HYBRIDEP, moe_enable_deepep=True),
                                       c(FLEX_DEEPEP, moe_enable_deepep=True)),
    "MOE_ENABLE_DEEPEP_DEPRECATED": (c(FLEX_DEEPEP, moe_enable_deepep=True), FLEX_DEEPEP),
    "NCCLEP_NEEDS_MCORE_0_19": (
        c(V("0.18.0"), moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="ncclep"), NCCLEP),
    "NCCLEP_NEEDS_FLEX": (c(moe_flex_dispatcher_backend="ncclep"), NCCLEP),
    "NCCLEP_NEEDS_TE": (c(NCCLEP, V(te=None)), NCCLEP),
    "NCCLEP_NEEDS_RANK_CAPACITY": (c(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="ncclep"), NCCLEP),
    "NCCLEP_NEEDS_SUPPORTED_GPU": (c(NCCLEP, gpu=A100), NCCLEP),
    "FLEX_BACKEND_IGNORED_WITHOUT_FLEX": (c(moe_flex_dispatcher_backend="hybridep"), FLEX_HYBRIDEP),
    "RANK_CAPACITY_NEEDS_HYBRIDEP_OR_NCCLEP": (c(FLEX_DEEPEP, RANKCAP), c(FLEX_HYBRIDEP, RANKCAP)),
    "RANK_CAPACITY_NEEDS_OP_FUSER": (c(FLEX_HYBRIDEP, moe_expert_rank_capacity_factor=1.5),
                                     c(FLEX_HYBRIDEP, RANKCAP)),
    "RANK_CAPACITY_NEEDS_MCORE_0_18": (c(FLEX_HYBRIDEP, RANKCAP, V("0.17.0")),
                                       c(FLEX_HYBRIDEP, RANKCAP, V("0.18.0"))),
    "FLEX_NUM_SMS_TUNED_RANGE": (c(FLEX_DEEPEP, moe_flex_dispatcher_num_sms=8),
                                 c(FLEX_DEEPEP, moe_flex_dispatcher_num_sms=24)),
    "MOE_DEEPEP_NUM_SMS_DEPRECATED": (c(moe_deepep_num_sms=20), c(V("0.18.0"), moe_deepep_num_sms=20)),
    "MOE_HYBRIDEP_NUM_SMS_DEPRECATED": (c(moe_hybridep_num_sms=16), c(V("0.18.0"), moe_hybridep_num_sms=16)),
    "NUM_SMS_DEPRECATED_CONFLICT": (c(moe_deepep_num_sms=20, moe_hybridep_num_sms=16),
                                    c(moe_deepep_num_sms=20, moe_hybridep_num_sms=20)),
    "ALLGATHER_NO_VARIABLE_SEQ_LENGTHS": (
        c(NO_EPO, moe_token_dispatcher_type="allgather", variable_seq_lengths=True),
        c(variable_seq_lengths=True)),
    # --- CUDA graphs
    "CUDA_GRAPH_NEEDS_GPU": (c(G, cuda_graph_modules=DROPLESS, gpu=None), c(G, cuda_graph_modules=DROPLESS)),
    "CUDA_GRAPH_TE_NEEDS_TE": (c(G, V(te=None), cuda_graph_modules=["moe_router", "moe_preprocess"],
                                  overlap_grad_reduce=False, overlap_param_gather=False),
                               c(G, cuda_graph_modules=DROPLESS)),
    "CUDA_GRAPH_LEGACY_FLAGS_WITH_IMPL": (c(G, enable_cuda_graph=True), c(enable_cuda_graph=True)),
    "CUDA_GRAPH_LEGACY_FLAGS_EXCLUSIVE": (c(enable_cuda_graph=True, external_cuda_graph=True),
                                          c(external_cuda_graph=True)),
    "CUDA_GRAPH_ENABLE_DEPRECATED": (c(enable_cuda_graph=True), {}),
    "CUDA_GRAPH_EXTERNAL_DEPRECATED": (c(external_cuda_graph=True), {}),
    "CUDA_GRAPH_FULL_ITERATION_IMPL_NEEDS_0_18": (
        c(NO_EPO, V("0.17.0"), cuda_graph_impl="full_iteration", use_te_rng_tracker=True),
        c(NO_EPO, V("0.18.0"), cuda_graph_impl="full_iteration", use_te_rng_tracker=True,
          moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)),
    "CUDA_GRAPH_FULL_ITERATION_NOT_TE": (c(G, cuda_graph_modules=["full_iteration"]),
                                         c(NO_EPO, cuda_graph_impl="full_iteration", use_te_rng_tracker=True)),
    "CUDA_GRAPH_FULL_ITERATION_NO_MODULES": (
        c(NO_EPO, cuda_graph_impl="full_iteration", use_te_rng_tracker=True, cuda_graph_modules=["attn"]),
        c(NO_EPO, cuda_graph_impl="full_iteration", use_te_rng_tracker=True, cuda_graph_modules=[])),
    "CUDA_GRAPH_MOE_AND_ROUTER_EXCLUSIVE": (
        c(NO_EPO, G, cuda_graph_modules=["moe", "moe_router"], moe_expert_capacity_factor=1.0,
          moe_pad_expert_input_to_capacity=True),
        c(NO_EPO, G, cuda_graph_modules=["moe"], moe_expert_capacity_factor=1.0,
          moe_pad_expert_input_to_capacity=True)),
    "CUDA_GRAPH_PREPROCESS_NEEDS_ROUTER": (c(G, cuda_graph_modules=["moe_preprocess"]),
                                           c(G, cuda_graph_modules=["moe_router", "moe_preprocess"])),
    "CUDA_GRAPH_MOE_SCOPES_NEED_MOE": (
        c(NO_EPO, G, num_moe_experts=None, moe_ffn_hidden_size=None, expert_model_parallel_size=1,
          cuda_graph_modules=["attn", "moe_router"]),
        c(NO_EPO, G, num_moe_experts=None, moe_ffn_hidden_size=None, expert_model_parallel_size=1,
          cuda_graph_modules=["attn"])),
    "CUDA_GRAPH_MLP_NEEDS_DENSE_LAYERS": (c(NO_EPO, G, cuda_graph_modules=["attn", "mlp"]),
                                          c(NO_EPO, G, cuda_graph_modules=["attn", "mlp"],
                                            moe_layer_freq=[0, 1, 1, 1] * 4)),
    "CUDA_GRAPH_MOE_SCOPE_NEEDS_DROP_PAD": (
        c(NO_EPO, G, cuda_graph_modules=["moe"]),
        c(NO_EPO, G, cuda_graph_modules=["moe"], moe_expert_capacity_factor=1.0,
          moe_pad_expert_input_to_capacity=True)),
    "CUDA_GRAPH_PREPROCESS_NO_DTOH_SYNC": (
        c(G, cuda_graph_modules=["moe_router", "moe_preprocess"], moe_expert_capacity_factor=1.0),
        c(G, cuda_graph_modules=["moe_router"], moe_expert_capacity_factor=1.0)),
    "CUDA_GRAPH_FULL_RECOMPUTE_NEEDS_FULL_ITERATION": (
        c(NO_EPO, G, FULL, cuda_graph_modules=["attn"]),
        c(NO_EPO, FULL, cuda_graph_impl="full_iteration", use_te_rng_tracker=True,
          moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)),
    "CUDA_GRAPH_MOE_RECOMPUTE_VS_ROUTER": (
        c(NO_EPO, G, SEL, cuda_graph_modules=["moe_router", "moe_preprocess"], recompute_modules=["moe"]),
        c(NO_EPO, G, SEL, cuda_graph_modules=["moe_router", "moe_preprocess"], recompute_modules=["moe_act"])),
    "CUDA_GRAPH_ATTN_DROPOUT_RECOMPUTE": (
        c(G, SEL, cuda_graph_modules=DROPLESS),
        c(G, SEL, cuda_graph_modules=DROPLESS, attention_dropout=0.0)),
    "CUDA_GRAPH_HIDDEN_DROPOUT_RECOMPUTE": (
        c(G, SEL, cuda_graph_modules=[], recompute_modules=["mlp"], attention_dropout=0.0),
        c(G, SEL, cuda_graph_modules=[], recompute_modules=["mlp"], attention_dropout=0.0,
          hidden_dropout=0.0)),
    "CUDA_GRAPH_NEEDS_TE_RNG_TRACKER": (c(cuda_graph_impl="transformer_engine", cuda_graph_modules=DROPLESS),
                                        c(G, cuda_graph_modules=DROPLESS)),
    "CUDA_GRAPH_LOCAL_ONLY_FULL_ITERATION_IN_BRIDGE": (
        c(NO_EPO, cuda_graph_impl="local", use_te_rng_tracker=True, cuda_graph_modules=["attn"]),
        c(NO_EPO, cuda_graph_impl="local", use_te_rng_tracker=True, cuda_graph_modules=["full_iteration"],
          moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)),
    "CUDA_GRAPH_MODULES_WITHOUT_IMPL": (c(cuda_graph_modules=DROPLESS), c(G, cuda_graph_modules=DROPLESS)),
    "CUDA_GRAPH_FULL_ITERATION_STATIC_SHAPES": (
        c(NO_EPO, cuda_graph_impl="full_iteration", use_te_rng_tracker=True),
        c(NO_EPO, FLEX_HYBRIDEP, RANKCAP, cuda_graph_impl="full_iteration", use_te_rng_tracker=True)),
    # --- recompute
    "RECOMPUTE_SELECTIVE_NO_METHOD_IN_MEGATRON_LM": (c(NO_EPO, SEL, recompute_method="uniform"), c(NO_EPO, SEL)),
    "RECOMPUTE_FULL_NEEDS_METHOD": (c(NO_EPO, recompute_granularity="full", recompute_num_layers=1), c(NO_EPO, FULL)),
    "RECOMPUTE_FULL_NEEDS_NUM_LAYERS": (c(NO_EPO, recompute_granularity="full", recompute_method="uniform"),
                                        c(NO_EPO, FULL)),
    "RECOMPUTE_SELECTIVE_NO_NUM_LAYERS": (c(NO_EPO, SEL, recompute_num_layers=1), c(SEL)),
    "RECOMPUTE_MOE_ACT_NEEDS_GROUPED_GEMM": (c(SEL, recompute_modules=["moe_act"], moe_grouped_gemm=False),
                                             c(SEL, recompute_modules=["moe_act"])),
    "RECOMPUTE_MLA_UP_PROJ_NEEDS_MLA": (c(SEL, recompute_modules=["mla_up_proj"]),
                                        c(SEL, MLA, recompute_modules=["mla_up_proj"])),
    "RECOMPUTE_SHARED_EXPERTS_NOT_WITH_OVERLAP": (
        c(NO_EPO, SEL, recompute_modules=["shared_experts"], moe_shared_expert_intermediate_size=512,
          moe_shared_expert_overlap=True),
        c(NO_EPO, SEL, recompute_modules=["shared_experts"], moe_shared_expert_intermediate_size=512)),
    "RECOMPUTE_FP8_DELAYED_NO_MOE_ACT_LAYERNORM": (
        c(SEL, FP8, recompute_modules=["moe_act"], fp8_recipe="delayed"), c(SEL, FP8, recompute_modules=["moe_act"])),
    "RECOMPUTE_FP8_MOE_ACT_NEEDS_TE_2_6": (c(SEL, FP8, V(te="2.5.0"), recompute_modules=["layernorm"]),
                                           c(SEL, FP8, V(te="2.6.0"), recompute_modules=["layernorm"])),
    "RECOMPUTE_CORE_ATTN_WITH_TE": (c(SEL), c(SEL, recompute_modules=["moe_act"])),
    "RECOMPUTE_PREFER_SELECTIVE": (c(NO_EPO, FULL), c(SEL, recompute_modules=["moe_act"])),
    # --- precision
    "PRECISION_BF16_FP16_EXCLUSIVE": (c(fp16=True), {}),
    "PRECISION_FP8_FP4_EXCLUSIVE": (c(FP8, fp4="e2m1", gpu=B200), c(fp4="e2m1", gpu=B200)),
    "PRECISION_FP8_PARAM_NEEDS_FP8": (c(fp8_param=True), c(FP8, fp8_param=True)),
    "PRECISION_FP4_PARAM_NEEDS_FP4": (c(fp4_param=True), c(fp4="e2m1", fp4_param=True, gpu=B200)),
    "PRECISION_LOW_NEEDS_TE": (c(FP8, V(te=None), overlap_grad_reduce=False, overlap_param_gather=False), FP8),
    "PRECISION_MOE_FP8_NEEDS_TE_1_7": (c(FP8, V(te="1.6.0")), c(FP8, V(te="1.7.0"), moe_grouped_gemm=False)),
    "PRECISION_FP8_GROUPED_GEMM_NEEDS_TE_1_11": (c(FP8, V(te="1.10.0")), c(FP8, V(te="1.11.0"))),
    "PRECISION_FP8_DELAYED_NO_BF16_FIRST_LAST": (c(FP8, fp8_recipe="delayed", first_last_layers_bf16=True),
                                                 c(FP8, first_last_layers_bf16=True)),
    "PRECISION_BF16_START_LAYERS_PER_STAGE": (c(FP8, first_last_layers_bf16=True, num_layers_at_start_in_bf16=17),
                                              c(FP8, first_last_layers_bf16=True, num_layers_at_start_in_bf16=16)),
    "PRECISION_BF16_END_LAYERS_PER_STAGE": (c(FP8, PP2, first_last_layers_bf16=True, num_layers_at_end_in_bf16=9),
                                            c(FP8, PP2, first_last_layers_bf16=True, num_layers_at_end_in_bf16=8)),
    "PRECISION_MXFP8_NEEDS_BLACKWELL": (c(FP8, fp8_recipe="mxfp8"), c(FP8, fp8_recipe="mxfp8", gpu=B200)),
    "PRECISION_NVFP4_NEEDS_BLACKWELL": (c(fp4="e2m1"), c(fp4="e2m1", gpu=B200)),
    "PRECISION_FP8_NEEDS_HOPPER": (c(FP8, gpu=A100), FP8),
    "PRECISION_FP8_RECIPE_FOR_HOPPER": (c(FP8, fp8_recipe="tensorwise"), FP8),
    "PRECISION_FP8_RECIPE_FOR_BLACKWELL": (c(FP8, gpu=B200), c(FP8, gpu=B200, fp8_recipe="mxfp8")),
    "PRECISION_ROUTER_FP32": (c(moe_router_dtype=None, num_moe_experts=16), c(moe_router_dtype=None)),
    "PRECISION_ROUTER_DTYPE_MANY_EXPERTS": (c(moe_router_dtype=None), c(moe_router_dtype=None, num_moe_experts=16)),
    "ROUTER_PADDING_NEEDS_FP8_OR_FP4": (c(moe_router_padding_for_quantization=True),
                                        c(FP8, moe_router_padding_for_quantization=True)),
    "ROUTER_PADDING_NOT_ALLGATHER": (
        c(NO_EPO, FP8, moe_router_padding_for_quantization=True, moe_token_dispatcher_type="allgather"),
        c(FP8, moe_router_padding_for_quantization=True)),
    "ROUTER_PADDING_FP8_DEPRECATED": (c(FP8, moe_router_padding_for_fp8=True), FP8),
    "PERMUTE_FUSION_NEEDS_TE_2_1": (c(V(te="2.0.0"), moe_permute_fusion=True), c(moe_permute_fusion=True)),
    "CAPACITY_FACTOR_NEEDS_AUX_LOSS_TYPE": (
        c(moe_expert_capacity_factor=1.0, moe_router_load_balancing_type="sinkhorn"),
        c(moe_expert_capacity_factor=1.0)),
    "PAD_TO_CAPACITY_NEEDS_CAPACITY_FACTOR": (
        c(moe_pad_expert_input_to_capacity=True),
        c(moe_pad_expert_input_to_capacity=True, moe_expert_capacity_factor=1.0)),
    # --- layout
    "LAYOUT_WORLD_DIVISIBLE": (c(TP2, tensor_model_parallel_size=4, world_size=66), TP2),
    "LAYOUT_EXPERT_WORLD_DIVISIBLE": (c(world_size=68, global_batch_size=68 * 8), {}),
    "LAYOUT_EP_NEEDS_EXPERTS": (c(NO_EPO, num_moe_experts=None, moe_ffn_hidden_size=None), {}),
    "LAYOUT_EXPERTS_DIVISIBLE_BY_EP": (c(num_moe_experts=60), {}),
    "LAYOUT_VPP_NEEDS_PP": (c(virtual_pipeline_model_parallel_size=2), PP2_VPP),
    "LAYOUT_LAYERS_DIVISIBLE_BY_PP": (
        c(NO_EPO, pipeline_model_parallel_size=2, num_layers=15),
        c(NO_EPO, pipeline_model_parallel_size=2, num_layers=15, pipeline_model_parallel_layout="Et*7|t*8L")),
    "LAYOUT_STAGE_LAYERS_DIVISIBLE_BY_VPP": (c(PP2_VPP, virtual_pipeline_model_parallel_size=3),
                                             c(PP2_VPP, virtual_pipeline_model_parallel_size=4)),
    "LAYOUT_PIPELINE_LAYOUT_WELL_FORMED": (c(LAYOUT_PP2, pipeline_model_parallel_layout="t*8E|t*8L"), LAYOUT_PP2),
    "LAYOUT_PIPELINE_LAYOUT_DIVISIBLE_BY_PP": (c(LAYOUT_PP2, pipeline_model_parallel_layout="Et*6|t*5|t*5L"),
                                               LAYOUT_PP2),
    "LAYOUT_PIPELINE_LAYOUT_VPP": (c(LAYOUT_PP2, virtual_pipeline_model_parallel_size=2),
                                   c(LAYOUT_PP2, pipeline_model_parallel_layout="Et*4|t*4|t*4|t*4L",
                                     virtual_pipeline_model_parallel_size=2, overlap_p2p_comm=True)),
    "LAYOUT_PIPELINE_LAYOUT_LAYERS": (c(LAYOUT_PP2, pipeline_model_parallel_layout="Et*8|t*7L"), LAYOUT_PP2),
    "LAYOUT_PIPELINE_LAYOUT_MTP_LAYERS": (c(LAYOUT_PP2, mtp_num_layers=1),
                                          c(LAYOUT_PP2, mtp_num_layers=1, pipeline_model_parallel_layout="Et*8|t*8mL")),
    "LAYOUT_PIPELINE_LAYOUT_MTP_LAST_CHUNK": (c(LAYOUT_PP2, mtp_num_layers=1, overlap_p2p_comm=True,
                                                pipeline_model_parallel_layout="Et*8|t*8m||L"),
                                              c(LAYOUT_PP2, mtp_num_layers=1, overlap_p2p_comm=True,
                                                pipeline_model_parallel_layout="Et*8|t*8||mL")),
    # uneven pipelines on BASE's 16 layers: stage sizes, then accounting for the embedding and loss
    "LAYOUT_STAGE_SIZES_WITHOUT_ACCOUNT_FOR": (c(PP2, EMB, {FIRST: 8}), c(PP2, {FIRST: 8})),
    "LAYOUT_PIPELINE_LAYOUT_ALONE": (c(LAYOUT_PP2, LOSS), LAYOUT_PP2),
    "LAYOUT_FIRST_STAGE_LAYERS_POSITIVE": (c(PP2, {FIRST: 0}), c(PP2, {FIRST: 8})),
    "LAYOUT_FIRST_STAGE_LAYERS_DIVISIBLE_BY_VPP": (c(PP2_VPP, {FIRST: 3}), c(PP2_VPP, {FIRST: 6})),
    "LAYOUT_LAST_STAGE_LAYERS_POSITIVE": (c(PP2, {LAST: 0}), c(PP2, {LAST: 8})),
    "LAYOUT_LAST_STAGE_LAYERS_DIVISIBLE_BY_VPP": (c(PP2_VPP, {LAST: 3}), c(PP2_VPP, {LAST: 6})),
    "LAYOUT_UNEVEN_STAGES_FIT": (c(PP4, {FIRST: 10, LAST: 10}), c(PP4, {FIRST: 6, LAST: 6})),
    "LAYOUT_UNEVEN_MIDDLE_STAGES_MATCH": (c(PP2, {FIRST: 6, LAST: 6}), c(PP2, {FIRST: 8, LAST: 8})),
    "LAYOUT_UNEVEN_MIDDLE_LAYERS_DIVISIBLE": (c(PP4, {FIRST: 5}), c(PP4, {FIRST: 4})),
    "LAYOUT_UNEVEN_MIDDLE_RANK_LAYERS_DIVISIBLE_BY_VPP": (c(PP4_VPP, {FIRST: 2, LAST: 8}),
                                                          c(PP4_VPP, {FIRST: 4, LAST: 4})),
    "LAYOUT_ACCOUNT_FOR_LAYERS_DIVISIBLE_BY_PP": (c(PP2, EMB), c(PP2, EMB, LOSS)),
    "LAYOUT_ACCOUNT_FOR_LAYERS_DIVISIBLE_BY_PP_WITH_VPP": (c(PP2_VPP, LOSS), c(PP2_VPP, EMB, LOSS, num_layers=14)),
    "LAYOUT_ACCOUNT_FOR_RANK_LAYERS_DIVISIBLE_BY_VPP": (c(PP2_VPP, EMB, LOSS), c(PP2_VPP, EMB, LOSS, num_layers=14)),
    "LAYOUT_HEADS_DIVISIBLE_BY_TP": (c(TP2, num_attention_heads=15, num_query_groups=None), TP2),
    "LAYOUT_QUERY_GROUPS_VS_TP": (c(TP2, num_query_groups=3), TP2),
    "LAYOUT_GBS_DIVISIBLE": (c(global_batch_size=500), {}),
    # PP 4 on 64 GPUs: DP 16, so GBS 32 is 2 micro-batches, GBS 96 is 6, GBS 64 is 4
    "LAYOUT_INTERLEAVED_MICROBATCHES_AT_LEAST_PP": (c(PP4_VPP, global_batch_size=32),
                                                    c(PP4_VPP, global_batch_size=64)),
    "LAYOUT_INTERLEAVED_MICROBATCHES_DIVISIBLE_BY_PP": (c(PP4_VPP, global_batch_size=96),
                                                        c(PP4, global_batch_size=96)),
    "LAYOUT_SEQ_DIVISIBLE_BY_2CP": (c(context_parallel_size=2, seq_length=4098), c(context_parallel_size=2, seq_length=4096)),
    # TP4 x CP2: 4100 passes the CP rule (a multiple of 4), but each rank's 2050 tokens do not split over TP 4
    "LAYOUT_SP_SEQ_DIVISIBLE_BY_TP": (c(TP2, tensor_model_parallel_size=4, context_parallel_size=2, seq_length=4100),
                                      c(TP2, tensor_model_parallel_size=4, context_parallel_size=2, seq_length=4104)),
    # without TE the local spec's torch norm is built (TE present: TENorm takes all three)
    "TORCH_NORM_NO_ZERO_CENTERED_GAMMA": (c(V(te=None), layernorm_zero_centered_gamma=True),
                                          c(layernorm_zero_centered_gamma=True)),
    "TORCH_NORM_NO_PERSIST": (c(V(te=None), persist_layer_norm=True), c(V(te=None), persist_layer_norm=False)),
    "TORCH_NORM_NO_SEQUENCE_PARALLEL": (c(TP2, V(te=None)), c(TP2, V(te=None, apex=True))),  # FusedLayerNorm
    # ... and its core attention, megatron-core's DotProductAttention (TE present: TEDotProductAttention)
    "LOCAL_ATTENTION_NO_CONTEXT_PARALLEL": (c(V(te=None), context_parallel_size=2), c(context_parallel_size=2)),
    "LOCAL_ATTENTION_NO_MLA": (c(MLA, V(te=None)), MLA),
    # BASE: bf16, 16 heads, MBS 1; the kernel is taken for 16 < seq <= 4096 (seq 8192: the unfused softmax runs)
    "LOCAL_SOFTMAX_FUSION_NEEDS_APEX": (c(V(te=None), masked_softmax_fusion=True, seq_length=4096),
                                        c(V(te=None), masked_softmax_fusion=True, seq_length=8192)),
    # a pip environment with TE alone stops at the output layer; APEX without TE builds it
    "GRAD_ACC_FUSION_NEEDS_APEX": (c(V(apex=False), gradient_accumulation_fusion=True),
                                   c(V(te=None, apex=True), gradient_accumulation_fusion=True)),
    # the local spec with APEX: the block's final norm is FusedLayerNorm (LayerNorm only), the others stay torch's
    "LOCAL_SPEC_APEX_NORM_NO_RMSNORM": (c(V(te=None, apex=True), normalization="RMSNorm"),
                                        c(V(te=None, apex=True), normalization="LayerNorm")),
    "ROUTER_FUSION_NEEDS_TE_2_6": (c(V(te="2.5.0"), moe_router_fusion=True), c(moe_router_fusion=True)),
    "RECOMPUTE_OUTPUT_DISCARDING_NEEDS_TE": (c(SEL, V(te=None), recompute_modules=["layernorm"]),
                                             c(SEL, V(te=None), recompute_modules=["core_attn", "mlp"])),
    "LAYOUT_MOE_BIAS_NEEDS_ETP1": (c(TP2, add_bias_linear=True, expert_tensor_parallel_size=2),
                                   c(TP2, add_bias_linear=True)),
    "LAYOUT_SP_NEEDS_TP": (c(sequence_parallel=True), TP2),
    "LAYOUT_SP_WITHOUT_TP_DROPPED_BY_MEGATRON_LM": (c(sequence_parallel=True), TP2),
    "LAYOUT_SP_WITHOUT_TP_DROPPED_BY_BRIDGE": (c(sequence_parallel=True), TP2),
    "MOE_TP_NEEDS_SP": (c(tensor_model_parallel_size=2), TP2),
    "LAYOUT_EP_TP_WANTS_SP": (c(tensor_model_parallel_size=2), TP2),
    "LAYOUT_ETP_DEFAULT_DIFFERS": (c(TP2, expert_tensor_parallel_size=None), TP2),
    # --- TP / PP / DP overlap
    "TP_OVERLAP_NEEDS_TP": (c(tp_comm_overlap=True), c(TP2, tp_comm_overlap=True)),
    "TP_OVERLAP_NEEDS_SP": (c(tensor_model_parallel_size=2, tp_comm_overlap=True), c(TP2, tp_comm_overlap=True)),
    "TP_OVERLAP_NEEDS_SP_IN_MEGATRON_LM": (c(tensor_model_parallel_size=2, tp_comm_overlap=True),
                                           c(TP2, tp_comm_overlap=True)),
    "TP_OVERLAP_NEEDS_TE": (c(TP2, V(te=None), tp_comm_overlap=True, overlap_grad_reduce=False,
                              overlap_param_gather=False), c(TP2, tp_comm_overlap=True)),
    "PP_OVERLAP_NEEDS_VPP": (c(overlap_p2p_comm=True), PP2_VPP),
    "ROPE_FUSION_NEEDS_PLAIN_ROPE": (c(apply_rope_fusion=True, position_embedding_type="yarn"),
                                     c(apply_rope_fusion=True, position_embedding_type="rope")),
    "PP_INTERLEAVED_WITHOUT_P2P_OVERLAP_NEEDS_PP3": (
        c(PP2_VPP, overlap_p2p_comm=False),
        c(PP2_VPP, pipeline_model_parallel_size=4, overlap_p2p_comm=False)),
    "DP_PARAM_GATHER_NEEDS_DIST_OPT": (c(use_distributed_optimizer=False),
                                       c(use_distributed_optimizer=False, use_megatron_fsdp=True)),
    "DP_PARAM_GATHER_NEEDS_GRAD_REDUCE": (c(overlap_grad_reduce=False), {}),
    "DP_OVERLAP_BRIDGE_NEEDS_DIST_OPT": (c(use_distributed_optimizer=False, overlap_param_gather=False), {}),
    # --- training I/O (entry point, data, tokenizer, checkpoints, schedule, evaluation)
    "RUNTIME_MEGATRON_LM_NEEDS_MCORE_0_17": (c(V("0.16.1"), entrypoint="megatron-lm"), c(entrypoint="megatron-lm")),
    "DATA_KIND_NEEDS_MEGATRON_LM": (c(entrypoint="moeforge", data_kind="mock"),
                                    c(entrypoint="megatron-lm", data_kind="mock")),
    "DATA_KIND_NEEDS_MOEFORGE_RUNTIME": (c(entrypoint="megatron-lm", data_kind="learnable"),
                                         c(entrypoint="moeforge", data_kind="learnable")),
    "DATA_INDEXED_NEEDS_PATHS": (c(INDEXED, data_paths=None), INDEXED),
    "DATA_PATHS_OR_BLEND": (c(INDEXED, data_blend=BLEND), c(INDEXED, data_paths=None, data_blend=BLEND)),
    "DATA_PATHS_NEED_INDEXED": (c(INDEXED, data_kind="mock"), INDEXED),
    "DATA_BLEND_WEIGHTS_POSITIVE": (c(INDEXED, data_paths=None, data_blend=BLEND, data_blend_weights_positive=False),
                                    c(INDEXED, data_paths=None, data_blend=BLEND, data_blend_weights_positive=True)),
    "PATH_ENV_VARS_RESOLVED_AT_LAUNCH": (c(path_env_vars="DATA_ROOT"), c(path_env_vars=None)),
    "TOKENIZER_NEEDS_PATH": (c(tokenizer_kind="huggingface", tokenizer_path=None),
                             c(tokenizer_kind="huggingface", tokenizer_path="/models/tok")),
    "TOKENIZER_VOCAB_FITS_MODEL": (c(tokenizer_kind="byte", vocab_size=256), c(tokenizer_kind="byte", vocab_size=384)),
    "CHECKPOINT_INTERVAL_NEEDS_SAVE": (c(save=None, save_interval=100), SAVES),
    "CHECKPOINT_SAVE_NEEDS_INTERVAL": (c(SAVES, save_interval=None), SAVES),
    "CHECKPOINT_LOAD_AUTO_NEEDS_SAVE": (c(ckpt_load="auto", save=None, save_interval=None), c(SAVES, ckpt_load="auto")),
    "CHECKPOINT_ASYNC_NEEDS_SAVE": (c(ASYNC, save=None, save_interval=None), c(SAVES, ASYNC)),
    "CHECKPOINT_ASYNC_NEEDS_GPU": (c(SAVES, ASYNC, gpu=None), c(SAVES, ASYNC)),
    "CHECKPOINT_ASYNC_NEEDS_TORCH_DIST": (c(SAVES, ASYNC, ckpt_format="torch"), c(SAVES, ASYNC)),
    "HARNESS_IGNORES_TRAINING_IO": (c(SAVES, entrypoint="moeforge", eval_interval=None, tensorboard_dir=None,
                                      wandb_project=None),
                                    c(SAVES, entrypoint="megatron-lm", eval_interval=None, tensorboard_dir=None,
                                      wandb_project=None)),
    "SCHEDULE_WARMUP_BEFORE_DECAY_END": (c(lr_warmup_iters=100, lr_decay_iters=None, train_iters=100),
                                         c(lr_warmup_iters=100, lr_decay_iters=None, train_iters=1000)),
    "SCHEDULE_WSD_NEEDS_DECAY_ITERS": (c(lr_decay_style="WSD", lr_wsd_decay_iters=None),  # Megatron's spelling
                                       c(lr_decay_style="wsd", lr_wsd_decay_iters=100)),
    "SCHEDULE_MIN_LR_AT_MOST_LR": (c(min_lr_at_most_lr=False), c(min_lr_at_most_lr=True)),
    "EVAL_INTERVAL_NEEDS_ITERS": (c(eval_interval=100, eval_iters=0), c(eval_interval=100, eval_iters=10)),
    # --- advice from the seeds' measurements
    "ADVICE_EP_OVERLAP_SMALL_EP": (c(expert_model_parallel_size=4, num_nodes=2, world_size=16),
                                   c(NO_EPO, expert_model_parallel_size=4, num_nodes=2, world_size=16)),
    "ADVICE_EP_OVERLAP_PAYS_INTER_NODE": (c(NO_EPO, expert_model_parallel_size=16),
                                          c(expert_model_parallel_size=16)),
    "ADVICE_DELAY_WGRAD_NO_INDEPENDENT_WIN": (DWG, {}),
    "ADVICE_EP_OVERLAP_FEW_MICROBATCHES": (c(global_batch_size=64), {}),
    "ADVICE_FORCE_BALANCE_FOR_BENCHMARKS_ONLY": (c(moe_router_force_load_balancing=True), {}),
    "ADVICE_COMPARE_DISPATCHERS_ON_ONE_STACK": (FLEX_DEEPEP, {}),
    "ADVICE_FLEX_FOR_CROSS_NODE_EP": (c(expert_model_parallel_size=16),
                                      c(FLEX_DEEPEP, expert_model_parallel_size=16)),
    "ADVICE_HYBRIDEP_OFF_NVL72": (FLEX_HYBRIDEP, c(FLEX_HYBRIDEP, NVL72)),
    "ADVICE_CUDA_GRAPHS_FOR_DROPLESS_MOE": ({}, c(G, cuda_graph_modules=DROPLESS)),
    # --- fine-grained activation offloading
    "OFFLOAD_NEEDS_MODULES": (c(OFFLOAD, offload_modules=[]), OFFLOAD),
    "OFFLOAD_ATTN_PROJ_NEEDS_CORE_ATTN": (c(OFFLOAD, offload_modules=["attn_proj"]),
                                          c(OFFLOAD, offload_modules=["core_attn", "attn_proj"])),
    "OFFLOAD_NOT_INSIDE_RECOMPUTED_MOE": (c(OFFLOAD, NO_EPO, SEL, recompute_modules=["moe"],
                                            offload_modules=["moe_act"]),
                                          c(OFFLOAD, NO_EPO, SEL, recompute_modules=["moe"])),
    "OFFLOAD_FUSED_GROUP_MLP_NEEDS_MCORE_0_19": (c(OFFLOAD, V("0.18.0"), offload_modules=["fused_group_mlp"]),
                                                 c(OFFLOAD, V("0.18.0"))),
    "OFFLOAD_FUSED_GROUP_MLP_NEEDS_OP_FUSER": (c(OFFLOAD, offload_modules=["fused_group_mlp"]),
                                               c(OFFLOAD, offload_modules=["fused_group_mlp"],
                                                 use_transformer_engine_op_fuser=True)),
    "OFFLOAD_FUSED_GROUP_MLP_ALONE": (c(OFFLOAD, offload_modules=["fused_group_mlp", "expert_fc1"],
                                        use_transformer_engine_op_fuser=True),
                                      c(OFFLOAD, offload_modules=["fused_group_mlp"],
                                        use_transformer_engine_op_fuser=True)),
    "OFFLOAD_NEEDS_TE": (c(OFFLOAD, V(te=None)), OFFLOAD),
    # --- Gated DeltaNet heads and hierarchical context parallelism
    "LAYOUT_GDN_VALUE_HEADS_MULTIPLE_OF_KEY_HEADS": (c(GDN, linear_num_value_heads=24), GDN),
    "LAYOUT_GDN_KEY_HEADS_DIVISIBLE_BY_TP": (c(GDN, TP2, V("0.17.0"), linear_num_key_heads=3, linear_num_value_heads=6),
                                             c(GDN, TP2, V("0.17.0"))),
    "LAYOUT_GDN_NO_CP": (c(GDN, V("0.17.0"), context_parallel_size=2), c(GDN, V("0.17.0"))),
    "LAYOUT_GDN_KEY_HEADS_DIVISIBLE_BY_TP_CP": (c(GDN, context_parallel_size=32, world_size=256, num_nodes=32,
                                                  global_batch_size=64), c(GDN, context_parallel_size=2)),
    "LAYOUT_CP_A2A_P2P_NEEDS_HIERARCHICAL_SIZES": (c(context_parallel_size=2, cp_comm_type="a2a+p2p"),
                                                   c(context_parallel_size=2, cp_comm_type="a2a")),
    # --- the model document's own consistency
    "EP_OVERLAP_ONE_LOCAL_EXPERT_ALLTOALL": (c(V("0.16.1"), num_moe_experts=8),
                                             c(V("0.16.1"), num_moe_experts=16)),
    "ROUTER_GROUP_TOPK_NEEDS_NUM_GROUPS": (c(moe_router_group_topk=2),
                                           c(moe_router_group_topk=2, moe_router_num_groups=8)),
    "ROUTER_EXPERTS_DIVISIBLE_BY_GROUPS": (c(moe_router_group_topk=2, moe_router_num_groups=6),
                                           c(moe_router_group_topk=2, moe_router_num_groups=8)),
    "ROUTER_GROUP_TOPK_AT_MOST_NUM_GROUPS": (c(moe_router_group_topk=16, moe_router_num_groups=8),
                                             c(moe_router_group_topk=8, moe_router_num_groups=8)),
    "ROUTER_TOPK_AT_MOST_NUM_EXPERTS": (c(num_moe_experts=8, moe_router_topk=9), c(num_moe_experts=8, moe_router_topk=8)),
    "ROUTER_GROUP_TOPK_REACHES_TOPK": (c(moe_router_topk=16, moe_router_num_groups=8, moe_router_group_topk=1),
                                       c(moe_router_topk=16, moe_router_num_groups=8, moe_router_group_topk=2)),
    "ROUTER_TOP1_SOFTMAX_NEEDS_PRE_SOFTMAX": (c(moe_router_topk=1), c(moe_router_topk=1, moe_router_pre_softmax=True)),
    "MOE_PROBS_ON_INPUT_NEEDS_TOP1": (c(moe_apply_probs_on_input=True),
                                      c(moe_apply_probs_on_input=True, moe_router_topk=1, moe_router_pre_softmax=True)),
    "MLA_NO_ATTENTION_OUTPUT_GATE": (c(MLA, attention_output_gate=True), MLA),
    "MLA_ROPE_FUSION_NEEDS_YARN": (c(MLA, rope_type="rope", apply_rope_fusion=True),
                                   c(MLA, rope_type="yarn", apply_rope_fusion=True)),
    "MLA_NO_GROUP_QUERY_ATTENTION": (c(MLA, num_query_groups=4), c(MLA, num_query_groups=16)),
    "MTP_NEEDS_ROPE_OR_NO_POSITION_EMBEDDING": (c(NO_EPO, mtp_num_layers=1, position_embedding_type="yarn"),
                                                c(NO_EPO, mtp_num_layers=1, position_embedding_type="rope")),
    "SINKHORN_NO_AUX_LOSS": (c(moe_router_load_balancing_type="sinkhorn", moe_aux_loss_coeff=0.001),
                             c(moe_router_load_balancing_type="sinkhorn", moe_aux_loss_coeff=0.0)),
    "ROUTER_EXPERT_BIAS_NEEDS_SIGMOID": (c(moe_router_enable_expert_bias=True),
                                         c(moe_router_enable_expert_bias=True, moe_router_score_function="sigmoid")),
    "HEADS_DIVISIBLE_BY_QUERY_GROUPS": (c(num_query_groups=32), c(num_query_groups=8)),
    "DSA_NEEDS_MLA": (c(DSA, multi_latent_attention=False), DSA),
    "DSA_NEEDS_INDEXER_SIZES": (c(DSA, dsa_indexer_topk=None), DSA),
    "DSA_NO_CONTEXT_PARALLEL": (c(V("0.18.0"), experimental_attention_variant="dsa", context_parallel_size=2),
                                c(V("0.18.0"), DSA)),
    "DSA_CONTEXT_PARALLEL_NEEDS_ALLGATHER": (c(experimental_attention_variant="dsa", context_parallel_size=2),
                                             c(DSA, context_parallel_size=2, cp_comm_type="allgather")),
    "DSA_NO_ROPE_FUSION": (c(experimental_attention_variant="dsa", apply_rope_fusion=True),
                           DSA),
    "GDN_NEEDS_LINEAR_ATTENTION_FREQ": (c(GDN, linear_attention_freq=None), GDN),
    "LINEAR_ATTENTION_FREQ_ONE_ENTRY_PER_LAYER": (c(GDN, linear_attention_freq=[1, 1, 1, 0] * 3),
                                                  c(GDN, linear_attention_freq=[1, 1, 1, 0] * 4)),
    "MTP_NEEDS_SOFTMAX_LAST_LAYER": (c(GDN, mtp_num_layers=1, linear_attention_freq=[1, 1, 1, 0] * 3 + [0, 1, 0, 1]),
                                     c(GDN, mtp_num_layers=1, linear_attention_freq=[1, 1, 1, 0] * 3 + [1, 0, 1, 0])),
    "MOE_LAYER_FREQ_ONE_ENTRY_PER_LAYER": (c(moe_layer_freq=[0] + [1] * 14), c(moe_layer_freq=[0] + [1] * 15)),
    "DSA_NO_LINEAR_BIAS": (c(experimental_attention_variant="dsa", add_bias_linear=True),
                           DSA),
    # --- the fused bias + activation kernel
    "BIAS_ACTIVATION_FUSION_ACTIVATION": (c(FUSED, activation_func="squared_relu"), c(FUSED, SWIGLU)),
    "BIAS_GELU_FUSION_NEEDS_BIAS": (FUSED, c(FUSED, add_bias_linear=True)),
    "BIAS_QUICK_GELU_FUSION_NEEDS_GLU": (c(FUSED, activation_func="quick_gelu"),
                                         c(FUSED, activation_func="quick_gelu", gated_linear_unit=True)),
    "BIAS_FUSION_GLU_OFFSET_NEEDS_QUICK_GELU": (c(FUSED, SWIGLU, glu_linear_offset=1.0),
                                                c(FUSED, activation_func="quick_gelu", gated_linear_unit=True,
                                                  glu_linear_offset=1.0)),
    "BIAS_GELU_FUSION_OFF_WITHOUT_BIAS": (FUSED, c(FUSED, swiglu=True)),
    "HIDDEN_DIVISIBLE_BY_HEADS": (c(hidden_size=1000), c(hidden_size=1000, kv_channels=64)),
    # --- Megatron-LM's own refusals
    "DELAY_WGRAD_NEEDS_TE_IN_MEGATRON_LM": (c(DWG, V(te=None), overlap_grad_reduce=False, overlap_param_gather=False),
                                            c(DWG, overlap_grad_reduce=False, overlap_param_gather=False)),
    "DELAY_WGRAD_GRAD_REDUCE_NEEDS_TE_2_8_IN_MEGATRON_LM": (c(DWG, V(te="2.7.0")), c(DWG, V(te="2.8.0"))),
    "DELAY_WGRAD_NO_GRAD_ACC_FUSION_NEEDS_TE_2_7_IN_MEGATRON_LM": (
        c(DWG, V(te="2.6.0"), gradient_accumulation_fusion=False, overlap_grad_reduce=False,
          overlap_param_gather=False),
        c(DWG, V(te="2.7.0"), gradient_accumulation_fusion=False, overlap_grad_reduce=False,
          overlap_param_gather=False)),
    "LAYOUT_VPP_ONE_IS_NO_VPP": (c(PP2, virtual_pipeline_model_parallel_size=1), PP2),
    "ROPE_FUSION_NEEDS_TE": (c(V(te=None), apply_rope_fusion=True), c(apply_rope_fusion=True)),
    "MOE_GROUPED_GEMM_NEEDS_AMPERE_IN_MEGATRON_LM": (c(gpu=V100), c(gpu=A100)),
    "ATTENTION_BACKEND_LOCAL_NOT_IN_MEGATRON_LM": (c(attention_backend="local"), c(attention_backend="unfused")),
    **{rid + suffix: (c(entry, failing), c(entry, passing))
       for rid, failing, passing in (
           ("ACTIVATION_NOT_IN_MEGATRON_LM", {"activation_func": "silu"}, SWIGLU),
           ("ACTIVATION_GATED_GELU_NOT_IN_MEGATRON_LM", {"gated_linear_unit": True}, {"activation_func": "gelu"}),
           ("MLA_YARN_CORRECTION_NOT_IN_MEGATRON_LM", c(MLA, rope_type="yarn", beta_fast=16.0),
            c(MLA, rope_type="yarn", beta_fast=32.0, beta_slow=1.0, original_max_position_embeddings=4096)))
       for suffix, entry in (("", INDEXED), ("_ARGS", {"entrypoint": "moeforge"}))},
    "MLA_NOT_IN_BRIDGE_GPT_PROVIDER": (c(MLA, model_document_mla=False), MLA),
    "CUDA_GRAPH_FULL_ITERATION_NO_NAN_CHECK": (c(NO_EPO, cuda_graph_impl="full_iteration", use_te_rng_tracker=True),
                                               c(NO_EPO, cuda_graph_impl="full_iteration", use_te_rng_tracker=True,
                                                 check_for_nan_in_loss_and_grad=False)),
    **{f"PRECISION_{q.upper()}_CUSTOM_RECIPE_NEEDS_QUANTIZER_FACTORY": (
        c(quant, {f"{q}_recipe": "custom"}),
        c(quant, {f"{q}_recipe": "custom", f"{q}_quantizer_factory": "pkg.mod.qf"}))
       for q, quant in (("fp8", FP8), ("fp4", {"fp4": "e2m1", "gpu": B200}))},
    "PRECISION_REUSE_GRAD_BUF_NEEDS_FP8_PARAM": (c(MXFP8, reuse_grad_buf_for_mxfp8_param_ag=True),
                                                 c(MXFP8, fp8_param=True, reuse_grad_buf_for_mxfp8_param_ag=True)),
    "PRECISION_MXFP8_WITHOUT_GRAD_BUF_REUSE_COSTS_MEMORY": (c(MXFP8),
                                                            c(MXFP8, fp8_param=True,
                                                              reuse_grad_buf_for_mxfp8_param_ag=True)),
    "PRECISION_MXFP8_PARAM_NEEDS_REUSE_GRAD_BUF_IN_BRIDGE": (c(MXFP8, fp8_param=True),
                                                             c(MXFP8, fp8_param=True,
                                                               reuse_grad_buf_for_mxfp8_param_ag=True)),
    "PRECISION_FP8_PARAM_NEEDS_DIST_OPT_IN_MEGATRON_LM": (
        c(FP8, fp8_param=True, use_distributed_optimizer=False, overlap_grad_reduce=False, overlap_param_gather=False),
        c(FP8, fp8_param=True)),
    "CROSS_ENTROPY_TE_FUSION_NOT_IN_MEGATRON_LM": (
        {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"},
        {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "native"}),
    "BIAS_DROPOUT_FUSION_NOT_WITH_BIASED_TE_GROUPED_EXPERTS": ({"add_bias_linear": True, "bias_dropout_fusion": True},
                                                               {"add_bias_linear": True, "bias_dropout_fusion": False}),
    "ROPE_NEEDS_EVEN_HEAD_SIZE": ({"position_embedding_type": "rope", "hidden_size": 1040, "num_attention_heads": 16,
                                   "num_query_groups": 4},
                                  {"position_embedding_type": "rope", "hidden_size": 1040, "num_attention_heads": 16,
                                   "num_query_groups": 4, "kv_channels": 64}),
    "SHARED_EXPERTS_NO_LINEAR_BIAS": ({"add_bias_linear": True, "bias_dropout_fusion": False,
                                      "moe_shared_expert_intermediate_size": 1024},
                                     {"add_bias_linear": False, "moe_shared_expert_intermediate_size": 1024}),
    "SOFTMAX_TYPE_NEEDS_TE_2_8": (c(V(te="2.7.0"), softmax_type="learnable"),
                                  c(V(te="2.8.0"), softmax_type="learnable")),
    "TE_OP_FUSER_DENSE_MLP_ACTIVATION": (
        c(SWIGLU, V(te="2.7.0"), gated_linear_unit=False, use_transformer_engine_op_fuser=True, moe_layer_freq=2),
        c(SWIGLU, V(te="2.8.0"), gated_linear_unit=False, use_transformer_engine_op_fuser=True, moe_layer_freq=2)),
    "CROSS_ENTROPY_TE_FUSION_FULL_ITERATION_NEEDS_TE_2_7": (
        c(NO_EPO, V(te="2.6.0"), cuda_graph_impl="full_iteration", cuda_graph_modules=[], cross_entropy_loss_fusion=True,
          cross_entropy_fusion_impl="te"),
        c(NO_EPO, V(te="2.7.0"), cuda_graph_impl="full_iteration", cuda_graph_modules=[], cross_entropy_loss_fusion=True,
          cross_entropy_fusion_impl="te", frontend="bridge")),
    # offloading under CUDA graphs
    "OFFLOAD_LOCAL_GRAPH_ONLY_EXPERT_MODULES": (c(OFFLOAD, LOCAL_GRAPH, cuda_graph_modules=["attn"]),
                                                c(OFFLOAD_EXPERT, LOCAL_GRAPH, cuda_graph_modules=["attn"])),
    "OFFLOAD_LOCAL_GRAPH_NOT_WHOLE_LAYER": (c(OFFLOAD_EXPERT, LOCAL_GRAPH, NO_EPO, cuda_graph_modules=[]),
                                            c(OFFLOAD_EXPERT, LOCAL_GRAPH, NO_EPO, cuda_graph_modules=["attn"])),
    "OFFLOAD_LOCAL_GRAPH_NOT_OF_THE_MOE": (
        c(OFFLOAD_EXPERT, LOCAL_GRAPH, NO_EPO, DROP_PAD, cuda_graph_modules=["moe"]),
        c(OFFLOAD_EXPERT, LOCAL_GRAPH, NO_EPO, DROP_PAD, cuda_graph_modules=["attn"])),
    "OFFLOAD_GRAPHS_TE_OR_FULL_ITERATION_0_18": (
        c(OFFLOAD_EXPERT, LOCAL_GRAPH, NO_EPO, V("0.18.0"), cuda_graph_modules=["attn"]),
        c(OFFLOAD_EXPERT, G, NO_EPO, V("0.18.0"), cuda_graph_modules=["attn"])),
    "OFFLOAD_GRAPHS_NOT_OF_THE_MOE": (c(OFFLOAD_EXPERT, G, NO_EPO, DROP_PAD, cuda_graph_modules=["moe"]),
                                      c(OFFLOAD_EXPERT, G, NO_EPO, DROP_PAD, cuda_graph_modules=["attn"])),
    "OFFLOAD_FULL_ITERATION_NEEDS_INFLIGHT_LIMIT": (
        c(OFFLOAD_EXPERT, NO_EPO, cuda_graph_impl="full_iteration", cuda_graph_modules=[]),
        c(OFFLOAD_EXPERT, NO_EPO, cuda_graph_impl="full_iteration", cuda_graph_modules=[],
          fine_grained_offloading_max_inflight_offloads=1)),
    "PRECISION_FP4_NEEDS_TE_2_7": (c({"fp4": "e2m1", "gpu": B200}, V(te="2.6.0")),
                                   c({"fp4": "e2m1", "gpu": B200}, V(te="2.7.0"))),
    # --- the precision-aware optimizer
    **{f"OPTIMIZER_{name.upper()}_FP32_WITHOUT_PRECISION_AWARE": ({name: low}, c(AWARE, {name: low}))
       for name, low in (("main_grads_dtype", "bfloat16"), ("main_params_dtype", "float16"),
                         ("exp_avg_dtype", "float16"), ("exp_avg_sq_dtype", "bfloat16"))},
    "PRECISION_AWARE_OPTIMIZER_NEEDS_DISTRIBUTED_OPTIMIZER": (
        c(AWARE, use_distributed_optimizer=False, overlap_grad_reduce=False, overlap_param_gather=False), AWARE),
    "PRECISION_AWARE_OPTIMIZER_NEEDS_TE": (c(AWARE, V(te=None)), AWARE),
    "PRECISION_AWARE_OPTIMIZER_NEEDS_TE_1_13": (c(AWARE, V(te="1.12.0")), c(AWARE, V(te="1.13.0"))),
    **{f"OPTIMIZER_BF16_{name.upper()}_NEEDS_TE_2_3": (c(BF16_MOMENTS, V(te="2.2.0")), c(BF16_MOMENTS, V(te="2.3.0")))
       for name in ("exp_avg_dtype", "exp_avg_sq_dtype")},
    "OPTIMIZER_BF16_MAIN_GRADS_NOT_WITH_FP32_GRAD_REDUCE_IN_MEGATRON_LM": (
        c(AWARE, main_grads_dtype="bfloat16", grad_reduce_in_fp32=True),
        c(AWARE, main_grads_dtype="bfloat16", grad_reduce_in_fp32=False)),
}


# the front-end a rule holds for (lint-config filters the catalogue by it; core/moeforge rules: all)
FRONTEND = {"megatron-lm": "megatron-lm", "megatron-bridge": "bridge"}


def lint(delta: dict, strict: bool = False, rule_id: str | None = None):
    frontend = FRONTEND.get(BY_ID[rule_id].origin, "megatron-core") if rule_id else "megatron-core"
    return lint_mapping({**BASE, **delta}, strict=strict, frontend=frontend)


def test_every_rule_has_a_case():
    assert set(CASES) == {r.id for r in CATALOGUE}


def test_base_is_clean():
    findings = lint({})
    assert [f.rule for f in findings if f.severity != "advice"] == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fails_and_passes(rule_id):
    failing, passing = CASES[rule_id]
    fired = lint(failing, rule_id=rule_id)
    assert rule_id in {f.rule for f in fired}, f"{rule_id} did not fire on {failing}"
    ok = lint(passing, rule_id=rule_id)
    assert rule_id not in {f.rule for f in ok}, f"{rule_id} fired on its passing case {passing}"
    errors = [f.rule for f in ok if f.severity == "error"]
    assert not errors, f"passing case of {rule_id} has errors: {errors}"


def _megatron(rule_id, delta):
    return next(f.megatron_message for f in lint(delta, rule_id=rule_id) if f.rule == rule_id)


@pytest.mark.parametrize("rule_id,delta,text", [
    ("EP_OVERLAP_NEEDS_EXPERTS", CASES["EP_OVERLAP_NEEDS_EXPERTS"][0],
     "overlap_moe_expert_parallel_comm is only supported when num_moe_experts > 1,                     "
     "but got 1"),
    ("EP_OVERLAP_MTP_AT_MOST_ONE", c(mtp_num_layers=2),
     "MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm."),
    ("EP_OVERLAP_MTP_AT_MOST_ONE", c(V("0.16.1"), mtp_num_layers=2),
     "MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm."),
    ("DELAY_WGRAD_GRAD_REDUCE_NEEDS_TE_2_7", CASES["DELAY_WGRAD_GRAD_REDUCE_NEEDS_TE_2_7"][0],
     "TE version >= 2.7.0 is required for overlap_grad_reduce when usingdelay_wgrad_compute. "
     "Current TE version: 2.6.0"),
    ("DEEPEP_NEEDS_SUPPORTED_GPU", CASES["DEEPEP_NEEDS_SUPPORTED_GPU"][0],
     "DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300) GPUs. Current GPU: NVIDIA GB200"),
    ("SHARED_EXPERT_OVERLAP_DISPATCHER", CASES["SHARED_EXPERT_OVERLAP_DISPATCHER"][0],
     "moe_shared_expert_overlap only works with alltoall or flex token dispatcher."),
    ("SHARED_EXPERT_OVERLAP_DISPATCHER", c(CASES["SHARED_EXPERT_OVERLAP_DISPATCHER"][0], V("0.17.0")),
     "moe_shared_expert_overlap only works with alltoall token dispatcher."),
    ("CUDA_GRAPH_MOE_AND_ROUTER_EXCLUSIVE", c(CASES["CUDA_GRAPH_MOE_AND_ROUTER_EXCLUSIVE"][0], V("0.16.1")),
     "cuda_graph_scope must not contain both moe and moe_router."),
    ("CUDA_GRAPH_FULL_ITERATION_NOT_TE", c(CASES["CUDA_GRAPH_FULL_ITERATION_NOT_TE"][0], V("0.17.0")),
     "To use full iteration cuda graph, please use cuda_graph_impl=local instead of "
     "cuda_graph_impl=transformer_engine."),
    ("RECOMPUTE_FULL_NEEDS_NUM_LAYERS", CASES["RECOMPUTE_FULL_NEEDS_NUM_LAYERS"][0],
     "When using recompute_granularity: full recompute_num_layers must be between 1 and "
     "num_layers_per_pipeline_rank: 16"),
    ("LAYOUT_WORLD_DIVISIBLE", CASES["LAYOUT_WORLD_DIVISIBLE"][0], "world_size (66) is not divisible by 4"),
    ("LAYOUT_EXPERT_WORLD_DIVISIBLE", CASES["LAYOUT_EXPERT_WORLD_DIVISIBLE"][0],
     "world_size (68) is not divisible by expert_tensor_model_pipeline_parallel size (8)"),
    ("LAYOUT_UNEVEN_MIDDLE_RANK_LAYERS_DIVISIBLE_BY_VPP", CASES["LAYOUT_UNEVEN_MIDDLE_RANK_LAYERS_DIVISIBLE_BY_VPP"][0],
     "number of layers on each middle pipeline rank:3 must be divisible by virtualpipeline parallel degree 2"),
    ("LAYOUT_ACCOUNT_FOR_RANK_LAYERS_DIVISIBLE_BY_VPP", CASES["LAYOUT_ACCOUNT_FOR_RANK_LAYERS_DIVISIBLE_BY_VPP"][0],
     "number of layers on each pipeline rank: 9(after enable account_for_embedding_in_pipeline_split or "
     "account_for_loss_in_pipeline_split) must be divisible byvirtual_pipeline_model_parallel_size2"),
    ("LAYOUT_STAGE_LAYERS_DIVISIBLE_BY_VPP", CASES["LAYOUT_STAGE_LAYERS_DIVISIBLE_BY_VPP"][0],
     "num_layers_per_pipeline_rank 8             should be divisible by vp_size 3"),
    ("LAYOUT_GBS_DIVISIBLE", c(global_batch_size=500),
     "global batch size (500) is not divisible by micro batch size (1) times data parallel size (64)"),
    ("TORCH_NORM_NO_SEQUENCE_PARALLEL", c(TP2, V(te=None)), "sequence parallel not supported by torch LayerNorm"),
    ("LOCAL_ATTENTION_NO_CONTEXT_PARALLEL", c(V(te=None), context_parallel_size=2),
     "Context parallelism is only supported by TEDotProductAttention!"),
    ("ROUTER_FUSION_NEEDS_TE_2_6", c(V(te=None), moe_router_fusion=True),
     "fused_topk_with_score_function is not available. Please install TE >= 2.6.0."),
    ("LAYOUT_SP_SEQ_DIVISIBLE_BY_TP", c(TP2, seq_length=4097),
     "First dimension of the tensor should be divisible by tensor parallel size"),
    ("LAYOUT_INTERLEAVED_MICROBATCHES_AT_LEAST_PP", c(PP4_VPP, global_batch_size=32),
     "The number of contiguous micro-batches in a virtual pipeline stageshould range in [PP=4 , M=2]"),
    ("LAYOUT_INTERLEAVED_MICROBATCHES_DIVISIBLE_BY_PP", c(PP4_VPP, global_batch_size=96),
     "The remainder of M (the total micro-batches) divided by N (number of contiguous micro-batches in a virtual "
     "pipeline stage) should be 0, or larger than or equal to the pipeline-parallel size, but it is 2. Otherwise, "
     "it introduces dependency bubbles in the pipeline and reduces throughput."),
    ("PRECISION_BF16_FP16_EXCLUSIVE", c(fp16=True), "Only one of self.fp16: True and self.bf16 True should be True."),
    ("RANK_CAPACITY_NEEDS_OP_FUSER", c(CASES["RANK_CAPACITY_NEEDS_OP_FUSER"][0], V("0.18.0")),
     "moe_expert_rank_capacity_factor requires use_transformer_engine_op_fuser to be enabled."),
    ("NUM_SMS_DEPRECATED_CONFLICT", CASES["NUM_SMS_DEPRECATED_CONFLICT"][0],
     "Conflicting deprecated SM-count knobs {'moe_deepep_num_sms': 20, 'moe_hybridep_num_sms': 16}; set a single "
     "moe_flex_dispatcher_num_sms instead."),
    ("CUDA_GRAPH_LOCAL_ONLY_FULL_ITERATION_IN_BRIDGE", CASES["CUDA_GRAPH_LOCAL_ONLY_FULL_ITERATION_IN_BRIDGE"][0],
     'Megatron Bridge supports model.cuda_graph_impl="local" only for full-iteration CUDA graphs with scopes '
     "['attn']. Use model.cuda_graph_impl=\"transformer_engine\" for scoped CUDA graph capture such as "
     '"attn" or "mlp".'),
])
def test_megatron_message_rendering(rule_id, delta, text):
    assert _megatron(rule_id, delta) == text


def test_catalogue_records_are_complete():
    for r in CATALOGUE:
        assert r.id.isupper() and " " not in r.id, r.id
        assert r.message and r.source and r.fix, r.id
        if r.severity == "error" and r.origin in ("megatron-core", "megatron-lm"):
            assert r.megatron_message, f"{r.id}: megatron-core/LM errors carry Megatron's text"
        if r.id.startswith("ADVICE_"):
            assert r.severity == "advice" and r.origin == "moeforge"


def test_measured_evidence_is_in_the_catalogue():
    text = " ".join(r.evidence or "" for r in CATALOGUE) + " ".join(r.message for r in CATALOGUE)
    for figure in ("41.25 s", "31.31 s", "31.20 s", "822 ms", "827 ms", "4889 ms", "5538 ms", "4686 ms",
                   "4912 ms", "4.8%", "1.317x", "45.65 s", "61.351 GB"):
        assert figure in text, figure
    assert BY_ID["ADVICE_EP_OVERLAP_SMALL_EP"].evidence


def test_strict_turns_silent_rewrites_into_errors():
    delta = c(tp_comm_overlap=True)
    assert {f.severity for f in lint(delta, rule_id="TP_OVERLAP_NEEDS_TP") if f.rule == "TP_OVERLAP_NEEDS_TP"} \
        == {"warning"}
    assert {f.severity for f in lint(delta, True, "TP_OVERLAP_NEEDS_TP") if f.rule == "TP_OVERLAP_NEEDS_TP"} \
        == {"error"}


def test_unknown_versions_skip_version_checks():
    mapping = {k: v for k, v in BASE.items() if k != "versions"}
    mapping.update(mtp_num_layers=1)
    rules = {f.rule for f in lint_mapping(mapping)}
    assert "EP_OVERLAP_MTP_NEEDS_PP" not in rules      # needs megatron-core < 0.18: unknown
    mapping.update(versions={"megatron_core": "0.16.1"})
    assert "EP_OVERLAP_MTP_NEEDS_PP" in {f.rule for f in lint_mapping(mapping)}
