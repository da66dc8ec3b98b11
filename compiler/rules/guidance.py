"""The seeds' guidance as weighted preferences for knobs a recipe leaves `auto`.

Weights (the solver maximises the sum of satisfied preferences; hard rules and pins always
win; Megatron's silent rewrites weigh 50, Megatron's default 1 per knob):

 10  platform-specific dispatcher (HybridEP on GB200/GB300 NVL72, DeepEP on H100/B200 for EP >= 8)
  8  HybridEP ranks per NVLink domain = the platform's formula (a mismatch hurts correctness too)
  6  alltoall where the hardware is unknown or a CPU; EP overlap where it paid / off where it did not
  5  delayed wgrad off; sequence parallel with TP; ETP = 1 with EP (Bridge's choice)
  4  never allgather with EP; TE-scoped CUDA graphs for dropless MoE; distributed optimizer with DP
  3  alltoall at small EP; DP grad-reduce / param-gather overlap; PP overlap with VPP
  2  fused kernels (bias-activation, masked softmax, bias-dropout, RoPE) on a GPU with TE, as Megatron-LM does
  3  gradients reduced in FP32 with BF16 (Megatron-LM and Megatron-Bridge's bf16 default)
  2  SM counts for the flex backends; gradient accumulation fusion with TE
"""
from moeforge.compiler.rules import Preference
from moeforge.compiler.rules.expr import F, Has, IsSet, Not, Or

DISP, BACKEND = F("moe_token_dispatcher_type"), F("moe_flex_dispatcher_backend")
EP, TP = F("expert_model_parallel_size"), F("tensor_model_parallel_size")
ON_GPU = F("device") == "cuda"
MOE = F("num_moe_experts") > 1
NVL72 = F("gpu_product").isin("GB200", "GB300") & (F("nvlink_domain") >= 72)
DEEPEP_GPU = Or(F("gpu_major").isin(8, 9), F("gpu_product").isin("B200", "B300"))
HAS_TE = F("transformer_engine") > 0
M = F("cuda_graph_modules")
DP = F("data_parallel_size")

PREFERENCES = (
    # --- dispatcher by hardware and EP size (nemo-mbridge-perf-moe-dispatcher-selection)
    Preference(id="PREFER_HYBRIDEP_ON_NVL72", prefer=(DISP == "flex") & (BACKEND == "hybridep"), weight=10,
               reason="GB200/GB300 NVL72: HybridEP is the strongest starting point (NVLink-domain-aware dispatch, "
                      "lower memory pressure), given the HybridEP package is installed",
               when=ON_GPU & MOE & (EP > 1) & NVL72 & F("hybrid_ep_installed").is_(True)),
    Preference(id="PREFER_DEEPEP_ON_H100_B200", prefer=(DISP == "flex") & (BACKEND == "deepep"), weight=10,
               reason="H100/B200-class GPUs: DeepEP is the strong default once EP is medium or large (EP >= 8), given "
                      "the DeepEP package is installed",
               when=ON_GPU & MOE & (EP >= 8) & DEEPEP_GPU & Not(NVL72) & F("deep_ep_installed").is_(True)),
    Preference(id="PREFER_ALLTOALL_UNKNOWN_HARDWARE", prefer=DISP == "alltoall", weight=6,
               reason="unknown hardware, a CPU or first bring-up: alltoall is the easiest path for correctness and "
                      "debugging",
               when=MOE & (EP > 1) & Or(F("device") == "cpu", F("gpu_product").isin("none", "other"))),
    Preference(id="PREFER_ALLTOALL_SMALL_EP", prefer=DISP == "alltoall", weight=3,
               reason="small EP: the dispatcher choice is second-order; alltoall is the simplest",
               when=MOE & (EP > 1) & (EP < 8)),
    Preference(id="PREFER_NO_ALLGATHER_WITH_EP", prefer=DISP != "allgather", weight=4,
               reason="with expert parallelism use alltoall or flex (allgather replicates every token to every rank)",
               when=MOE & (EP > 1)),
    # --- EP overlap where it pays (perf-expert-parallel-overlap, communication-overlap.md)
    Preference(id="PREFER_EP_OVERLAP_INTER_NODE", prefer=F("overlap_moe_expert_parallel_comm").is_(True), weight=6,
               reason="EP overlap paid 1.32x at EP=16 across H100 nodes (41.25 s -> 31.31 s)",
               when=ON_GPU & MOE & (EP >= 8) & (EP > F("gpus_per_node"))),
    Preference(id="PREFER_NO_EP_OVERLAP_SMALL_EP", prefer=F("overlap_moe_expert_parallel_comm").is_(False), weight=6,
               reason="EP overlap measured flat to 13% slower at EP <= 4 with alltoall on <= 2 nodes",
               when=ON_GPU & (EP <= 4) & (F("num_nodes") <= 2)),
    Preference(id="PREFER_NO_DELAY_WGRAD", prefer=F("delay_wgrad_compute").is_(False), weight=5,
               reason="delayed wgrad showed no independent win (31.31 s vs 31.20 s; 4.8% slower on Qwen3-Next EP=8); "
                      "pin it to use it"),
    # --- CUDA graphs for dropless MoE (perf-moe-optimization-workflow)
    Preference(id="PREFER_TE_GRAPHS_DROPLESS_MOE",
               prefer=(F("cuda_graph_impl") == "transformer_engine") & Has(M, "attn") & Has(M, "moe_router")
               & Has(M, "moe_preprocess") & Not(Has(M, "moe")) & Not(Has(M, "mlp")) & Not(Has(M, "mamba"))
               & Not(Has(M, "full_iteration")), weight=4,
               reason="dropless MoE: TE-scoped graphs of attn, moe_router and moe_preprocess give a step-time win "
                      "while expert compute stays dynamic (budget several GB of memory)",
               when=ON_GPU & HAS_TE & MOE & Not(IsSet(F("moe_expert_capacity_factor")))),
    # --- DP / TP / PP companions
    Preference(id="PREFER_DIST_OPT_WITH_DP", prefer=F("use_distributed_optimizer").is_(True), weight=4,
               reason="with data parallelism the distributed optimizer shards optimizer state and enables DP overlap",
               when=ON_GPU & (DP > 1)),
    Preference(id="PREFER_GRAD_REDUCE_OVERLAP", prefer=F("overlap_grad_reduce").is_(True), weight=3,
               reason="Megatron-Bridge overlaps gradient reduce-scatter whenever DP > 1 (distributed optimizer)",
               when=ON_GPU & (DP > 1) & F("use_distributed_optimizer").is_(True)),
    Preference(id="PREFER_PARAM_GATHER_OVERLAP", prefer=F("overlap_param_gather").is_(True), weight=3,
               reason="Megatron-Bridge overlaps parameter all-gather whenever DP > 1 (distributed optimizer)",
               when=ON_GPU & (DP > 1) & F("use_distributed_optimizer").is_(True)),
    Preference(id="PREFER_SP_WITH_TP", prefer=F("sequence_parallel").is_(True), weight=5,
               reason="sequence parallelism is required with EP x TP and for TP overlap", when=TP > 1),
    Preference(id="PREFER_ETP1_WITH_EP", prefer=F("expert_tensor_parallel_size") == 1, weight=5,
               reason="Megatron-Bridge uses ETP = 1 with EP > 1 (prefer EP over extra TP for experts)",
               when=MOE & (EP > 1)),
    Preference(id="PREFER_P2P_OVERLAP_WITH_VPP", prefer=F("overlap_p2p_comm").is_(True), weight=3,
               reason="Megatron-Bridge turns on PP overlap for interleaved schedules",
               when=(F("pipeline_model_parallel_size") > 1) & IsSet(F("virtual_pipeline_model_parallel_size"))),
    Preference(id="PREFER_GRAD_ACC_FUSION_WITH_TE", prefer=F("gradient_accumulation_fusion").is_(True), weight=2,
               reason="Megatron-Bridge enables gradient accumulation fusion when Transformer Engine provides it",
               when=ON_GPU & HAS_TE),
    # --- dispatcher tuning knobs
    Preference(id="PREFER_DEEPEP_SMS_20", prefer=F("moe_flex_dispatcher_num_sms") == 20, weight=2,
               reason="DeepEP's default SM count (20) is the starting point; tune between 16 and 32",
               when=(DISP == "flex") & (BACKEND == "deepep")),
    Preference(id="PREFER_HYBRIDEP_SMS_32", prefer=F("moe_flex_dispatcher_num_sms") == 32, weight=2,
               reason="the performance harness uses 32 SMs for HybridEP (default 16; tune between 16 and 32)",
               when=(DISP == "flex") & (BACKEND == "hybridep")),
    Preference(id="PREFER_HYBRIDEP_RANKS_PLATFORM",
               prefer=Or((EP <= F("nvlink_domain")) & (F("hybridep_ranks_per_nvlink_domain") == EP),
                  (EP > F("nvlink_domain")) & (F("hybridep_ranks_per_nvlink_domain") == F("nvlink_domain"))), weight=8,
               reason="NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN = min(EP, NVLink domain): min(EP, 8) on NVL8, EP on "
                      "NVL72", when=(DISP == "flex") & (BACKEND == "hybridep")),
    Preference(id="PREFER_FP32_GRAD_REDUCE_WITH_BF16", prefer=F("grad_reduce_in_fp32").is_(True), weight=3,
               reason="BF16 training accumulates and reduces gradients in FP32: Megatron-LM's validate_args does it "
                      "unless --grad-reduce-in-bf16, Megatron-Bridge's bf16_mixed sets grad_reduce_in_fp32",
               when=F("bf16").is_(True)),
    *(Preference(id=f"PREFER_{name.upper()}_ON_GPU", prefer=F(name).is_(True), weight=2,
                 reason="fused kernel on a GPU with Transformer Engine: Megatron-LM's default, same math",
                 when=ON_GPU & HAS_TE)
      for name in ("bias_activation_fusion", "masked_softmax_fusion", "bias_dropout_fusion", "apply_rope_fusion")),
)
