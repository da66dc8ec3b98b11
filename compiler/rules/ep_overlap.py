"""EP (expert-parallel) A2A overlap prerequisites: overlap_moe_expert_parallel_comm.

Mirrors megatron-core TransformerConfig.__post_init__ (authoritative: it runs in every
front-end) and Megatron-Bridge CommOverlapConfig._get_model_comm_overlap_cfgs (runs first
under Bridge, with its own wording, kept in `also`). Behaviour by megatron-core version:

- 0.16-0.17: mtp_num_layers must be None or 1, and MTP with EP overlap needs PP > 1;
  any CUDA graph must be the transformer_engine implementation without moe/mlp scopes.
- 0.17+: 'moe' may not be in recompute_modules (Bridge checks it for every version).
- 0.18+: the CUDA-graph restriction only applies to cuda_graph_impl=transformer_engine.
- 0.19: mtp_num_layers in (None, 0, 1) with new wording; ncclep + expert_fc1 offloading.
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.cuda_graphs import GRAPH_ANY, GRAPH_LOCAL, GRAPH_TE
from moeforge.compiler.rules.expr import F, AtLeast, Has, IsSet, Not, Or

MCORE = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__ (0.14+)"
BRIDGE = "Megatron-Bridge training/comm_overlap.py CommOverlapConfig._get_model_comm_overlap_cfgs"
BOTH = f"{MCORE}; {BRIDGE}"
B = "megatron-bridge CommOverlapConfig"

EP_OVERLAP = F("overlap_moe_expert_parallel_comm").is_(True)
OFF = "or set moe.overlap.ep_comm: false"

RULES = (
    Rule(id="EP_OVERLAP_NEEDS_EP", severity="error", when=EP_OVERLAP, require=F("expert_model_parallel_size") > 1,
         message="EP overlap needs expert parallelism (EP > 1)", source=BOTH, fix=f"set parallelism.ep > 1, {OFF}",
         megatron_message="overlap_moe_expert_parallel_comm is only supported with expert model parallelism",
         also=((B, "overlap_moe_expert_parallel_comm is only supported when expert_model_parallel_size > 1"),)),
    Rule(id="EP_OVERLAP_NEEDS_EXPERTS", severity="error", when=EP_OVERLAP, require=F("num_moe_experts") > 1,
         message="EP overlap needs an MoE model with more than one expert", source=BRIDGE,
         fix=f"use an MoE model, {OFF}",
         # Bridge's f-string ends its first line with a backslash continuation, so the
         # 20 spaces of the next source line are part of the message.
         megatron_message="overlap_moe_expert_parallel_comm is only supported when num_moe_experts > 1,               "
                          "      but got {num_moe_experts}", origin="megatron-bridge"),
    Rule(id="EP_OVERLAP_NEEDS_A2A_OR_FLEX", severity="error", when=EP_OVERLAP,
         require=F("moe_token_dispatcher_type").isin("alltoall", "flex"),
         message="EP overlap needs the alltoall or flex token dispatcher", source=BOTH,
         fix="set moe.dispatcher to alltoall or flex",
         megatron_message="overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher",
         also=((B, "overlap_moe_expert_parallel_comm is only supported when moe_token_dispatcher_type == "
                   "'alltoall' or 'flex',                      but got {moe_token_dispatcher_type}"),)),
    Rule(id="EP_OVERLAP_NEEDS_BF16_OR_FP16", severity="error", when=EP_OVERLAP,
         require=Or(F("bf16").is_(True), F("fp16").is_(True)), message="EP overlap needs a bf16 or fp16 model",
         source=BOTH, fix="set precision.dtype: bf16",
         megatron_message="overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 model",
         also=((B, "overlap_moe_expert_parallel_comm is only supported when using bf16 or fp16 models"),)),
    Rule(id="EP_OVERLAP_NEEDS_TORCH_2_6", severity="error", when=EP_OVERLAP, require=AtLeast("torch", "2.6.0"),
         message="EP overlap hangs with PyTorch older than 2.6.0", source=BOTH,
         fix=f"use a platform with torch >= 2.6.0, {OFF}",
         megatron_message="A2A Overlap encounters hang issue with torch version < 2.6.0"),
    Rule(id="EP_OVERLAP_NEEDS_VPP", severity="error", when=EP_OVERLAP & (F("pipeline_model_parallel_size") > 1),
         require=IsSet(F("virtual_pipeline_model_parallel_size")),
         message="EP overlap with pipeline parallelism needs a virtual pipeline size", source=BOTH,
         fix=f"set parallelism.vpp, {OFF}",
         megatron_message="If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when "
                          "pipeline_model_parallel_size > 1"),
    Rule(id="EP_OVERLAP_NO_FULL_RECOMPUTE", severity="error", when=EP_OVERLAP,
         require=F("recompute_granularity") != "full",
         message="EP overlap cannot be combined with full activation recompute", source=BOTH,
         fix=f"use recompute.granularity: selective, {OFF}",
         megatron_message="disable full recomputation when enabling overlap_moe_expert_parallel_comm"),
    Rule(id="EP_OVERLAP_NO_RECOMPUTE_METHOD", severity="error", when=EP_OVERLAP,
         require=Not(IsSet(F("recompute_method"))), message="EP overlap needs recompute.method unset", source=BOTH,
         fix="remove recompute.method",
         megatron_message="disable recomputation method when enabling overlap_moe_expert_parallel_comm"),
    Rule(id="EP_OVERLAP_NO_RECOMPUTE_NUM_LAYERS", severity="error", when=EP_OVERLAP,
         require=Not(IsSet(F("recompute_num_layers"))), message="EP overlap needs recompute.num_layers unset",
         source=BOTH, fix="remove recompute.num_layers",
         megatron_message="recompute_num_layers must be None when enabling overlap_moe_expert_parallel_comm"),
    Rule(id="EP_OVERLAP_NO_MOE_RECOMPUTE", severity="error", when=EP_OVERLAP,
         require=Not(Has(F("recompute_modules"), "moe")),
         message="EP overlap cannot recompute whole MoE layers ('moe' in recompute.modules)",
         source=f"{BRIDGE} (all versions); megatron-core TransformerConfig.__post_init__ (0.17+)",
         fix="remove 'moe' from recompute.modules (moe_act keeps most of the saving)",
         megatron_message="disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm",
         origin="megatron-bridge"),
    # the same check in megatron-core from 0.17 (every front-end); lint-config keeps one finding
    Rule(id="EP_OVERLAP_NO_MOE_RECOMPUTE_MCORE", severity="error", when=EP_OVERLAP,
         require=Not(Has(F("recompute_modules"), "moe")),
         message="EP overlap cannot recompute whole MoE layers ('moe' in recompute.modules)",
         source="megatron-core transformer/transformer_config.py TransformerConfig.__post_init__ (0.17+)",
         fix="remove 'moe' from recompute.modules (moe_act keeps most of the saving)",
         megatron_message="disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm",
         versions=(("megatron_core", ">=0.17.0"),)),
    Rule(id="EP_OVERLAP_NO_SHARED_EXPERT_OVERLAP", severity="error", when=EP_OVERLAP,
         require=F("moe_shared_expert_overlap").is_(False),
         message="EP overlap and shared-expert overlap are mutually exclusive", source=BOTH,
         fix="set moe.overlap.shared_expert: false",
         megatron_message="disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"),
    # 0.16-0.18 accept None or 1 (0 is rejected there; the solver cannot tell 0 from None),
    # 0.19 and Bridge accept None, 0 or 1.
    Rule(id="EP_OVERLAP_MTP_AT_MOST_ONE", severity="error", when=EP_OVERLAP, require=F("mtp_num_layers") <= 1,
         message="EP overlap supports at most one MTP layer", source=BOTH,
         fix=f"set model.mtp_num_layers to 1 or null, {OFF}",
         megatron_message="MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm.",
         variants=(((("megatron_core", "<0.19.0"),),
                    "MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm."),)),
    Rule(id="EP_OVERLAP_MTP_NEEDS_PP", severity="error", when=EP_OVERLAP & (F("mtp_num_layers") == 1),
         require=F("pipeline_model_parallel_size") > 1,
         message="with megatron-core < 0.18, EP overlap with an MTP layer needs pipeline parallelism",
         source="megatron-core 0.16-0.17 transformer/transformer_config.py TransformerConfig.__post_init__",
         fix="set parallelism.pp > 1 (with parallelism.vpp), or use a platform with megatron-core >= 0.18",
         megatron_message="Pipeline model parallel size must be larger than 1 when enabling "
                          "overlap_moe_expert_parallel_comm with MTP layer.", versions=(("megatron_core", "<0.18.0"),)),
    # the combined-1F1B schedule splits the MTP layer like a decoder layer; megatron-core builds it with the spec of
    # the model's last decoder layer (get_gpt_mtp_block_spec), so a dense last layer stops the first training step
    Rule(id="EP_OVERLAP_MTP_NEEDS_MOE_LAST_LAYER", severity="error", when=EP_OVERLAP & IsSet(F("mtp_num_layers"))
         & (F("mtp_num_layers") > 0), require=F("last_layer_moe").is_(True),
         message="with EP overlap the MTP layer must be an MoE layer, and it takes the spec of the model's last "
                 "decoder layer, which is dense here",
         source="megatron-core models/common/fine_grained_callables.py build_mtp_layer_callables (0.16: "
                "models/gpt/fine_grained_callables.py), at the first training step",
         fix=f"make the last decoder layer an MoE layer (model.moe.layer_freq), {OFF}",
         megatron_message="MTP layer in a2a overlap only supports MoE layer for now."),
    Rule(id="EP_OVERLAP_CUDA_GRAPH_SCOPE", severity="error", when=EP_OVERLAP & GRAPH_TE,
         require=Not(Has(F("cuda_graph_modules"), "moe")) & Not(Has(F("cuda_graph_modules"), "mlp")),
         message="EP overlap cannot run with the moe or mlp CUDA-graph scopes", source=MCORE,
         fix="drop moe and mlp from cuda_graph.modules (attn, moe_router, moe_preprocess are fine)",
         megatron_message="CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm"),
    Rule(id="EP_OVERLAP_CUDA_GRAPH_IMPL", severity="error", when=EP_OVERLAP & GRAPH_ANY,
         require=GRAPH_TE & Not(GRAPH_LOCAL),
         message="with megatron-core < 0.18, EP overlap only works with the transformer_engine CUDA-graph "
                 "implementation",
         source="megatron-core 0.16-0.17 transformer/transformer_config.py TransformerConfig.__post_init__",
         fix=f"set cuda_graph.impl: transformer_engine (or none), use megatron-core >= 0.18, {OFF}",
         megatron_message="CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm",
         versions=(("megatron_core", "<0.18.0"),)),
    Rule(id="EP_OVERLAP_NCCLEP_NO_EXPERT_FC1_OFFLOAD", severity="error",
         when=EP_OVERLAP & (F("moe_token_dispatcher_type") == "flex") & (F("moe_flex_dispatcher_backend") == "ncclep"),
         require=Not(F("fine_grained_activation_offloading").is_(True)
             & Has(F("offload_modules"), "expert_fc1")),
         message="EP overlap with the ncclep backend cannot offload expert_fc1 activations",
         source="megatron-core 0.19 transformer/transformer_config.py TransformerConfig.__post_init__",
         fix="remove expert_fc1 from recompute.offload.modules",
         megatron_message="overlap_moe_expert_parallel_comm with ncclep does not support offloading 'expert_fc1': it "
                          "forces expert FC1 to save the raw bf16 input, which the overlap path eagerly frees.",
         versions=(("megatron_core", ">=0.19.0"),)),
    Rule(id="EP_OVERLAP_EARLY_ATTN_RELEASE_NEEDS_EP_OVERLAP", severity="error",
         when=F("ep_overlap_early_attn_memory_release").is_(True), require=EP_OVERLAP,
         message="early attention-memory release is part of EP overlap", source=MCORE,
         fix="set moe.overlap.ep_comm: true, or moe.overlap.early_attn_memory_release: false",
         megatron_message="overlap_moe_expert_parallel_comm must be enabled when enabling "
                          "ep_overlap_early_attn_memory_release"),
    # Found by tests/fuzz/test_runtime_truth.py (EP 2, two experts, alltoall, bf16 on megatron-core 0.16.1): the
    # combined-1F1B "mlp" node frees its input after the forward, but with one local expert the alltoall dispatcher's
    # dispatch_postprocess is the identity, so that input is what the expert's fc1 saved for backward ("The tensor
    # has a non-zero number of elements, but its data is not allocated yet" in the first backward). 0.17.0's
    # should_free_input keeps it (num_local_experts > 1 or a non-alltoall dispatcher); 0.19.2 trains it (measured).
    Rule(id="EP_OVERLAP_ONE_LOCAL_EXPERT_ALLTOALL", severity="error",
         when=EP_OVERLAP & (F("moe_token_dispatcher_type") == "alltoall") & Not(IsSet(F("fp8")))
         & Not(IsSet(F("fp4"))) & Or(IsSet(F("expert_tensor_parallel_size")) & (F("expert_tensor_parallel_size") == 1),
                                      Not(IsSet(F("expert_tensor_parallel_size")))
                                      & (F("tensor_model_parallel_size") == 1)),
         require=F("num_moe_experts") > F("expert_model_parallel_size"),
         message="with megatron-core < 0.17, EP overlap under the alltoall dispatcher frees the expert input that "
                 "backward needs when each rank holds one expert (num_experts equal to EP)",
         source="megatron-core 0.16.1 models/gpt/fine_grained_callables.py should_free_input (\"mlp\": not "
                "enable_hybridep, line 74) and pipeline_parallel/utils.py ScheduleNode.forward "
                "(input.untyped_storage().resize_(0), line 238); fixed in 0.17.0",
         fix=f"use more experts than parallelism.ep, megatron-core >= 0.17, {OFF}", megatron_message=None,
         origin="moeforge", versions=(("megatron_core", "<0.17.0"),)),
)
