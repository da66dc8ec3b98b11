"""Advice from the seeds' measured evidence (never errors; `evidence` carries the figures).

Sources (../shared/seeds): perf-expert-parallel-overlap (H100 x16 EP=16 measurement and the
performance-harness pitfall), docs/training/communication-overlap.md (small-EP and
Qwen3-Next measurements), nemo-mbridge-perf-moe-dispatcher-selection (dispatcher by
hardware, routing mode for benchmarks, comparing dispatchers), perf-moe-optimization-workflow
(CUDA graphs for dropless MoE).
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, Const, IsSet, Not, Or

OVERLAP_SKILL = "seeds: perf-expert-parallel-overlap (measured short-run evidence)"
OVERLAP_DOC = "seeds: docs/training/communication-overlap.md (expected metric changes)"
DISPATCH_SKILL = "seeds: nemo-mbridge-perf-moe-dispatcher-selection"
WORKFLOW = "seeds: perf-moe-optimization-workflow"

EP_OVERLAP = F("overlap_moe_expert_parallel_comm").is_(True)
DWG = F("delay_wgrad_compute").is_(True)
ON_GPU = F("device") == "cuda"
EP = F("expert_model_parallel_size")
DISP, BACKEND = F("moe_token_dispatcher_type"), F("moe_flex_dispatcher_backend")
FLEX = DISP == "flex"
NEVER = Const(False)

RULES = (
    Rule(id="ADVICE_EP_OVERLAP_SMALL_EP", severity="advice",
         when=EP_OVERLAP & ON_GPU & (EP <= 4) & (F("num_nodes") <= 2) & (DISP == "alltoall"), require=NEVER,
         message="EP overlap measured flat to 13% slower at EP <= 4 with alltoall on <= 2 nodes: scheduling overhead "
                 "exceeds the hidden communication", source=OVERLAP_DOC,
         fix="set moe.overlap.ep_comm: false unless a profile of this exact shape shows exposed all-to-all",
         megatron_message=None, origin="moeforge",
         evidence="Qwen3-30B-A3B, EP=4, alltoall, 2 H100 nodes: 822 ms -> 827 ms per step at GBS 8 (flat); 4889 ms -> "
                  "5538 ms at GBS 64 (about 13% slower)"),
    Rule(id="ADVICE_EP_OVERLAP_PAYS_INTER_NODE", severity="advice",
         when=Not(EP_OVERLAP) & ON_GPU & (EP >= 8) & (EP > F("gpus_per_node")) & DISP.isin("alltoall", "flex"),
         require=EP_OVERLAP, message="EP overlap paid off for inter-node expert parallelism (EP >= 8 across nodes)",
         source=OVERLAP_SKILL,
         fix="set moe.overlap.ep_comm: true (prerequisites: bf16, VPP when PP > 1, no full recompute, no "
             "shared-expert overlap)", megatron_message=None, origin="moeforge",
         evidence="H100 x16 Qwen3-30B-A3B, EP=16, alltoall, BF16, GBS 1024, no CUDA graphs: 41.25 s -> 31.31 s steady "
                  "step time with EP overlap (1.317x)"),
    # One concern, one rule: delayed wgrad pinned on. The performance harness pitfall (its
    # --moe_a2a_overlap flag turns delay_wgrad_compute on together with EP overlap) is part of the same
    # advice, not a second diagnostic on the same line.
    Rule(id="ADVICE_DELAY_WGRAD_NO_INDEPENDENT_WIN", severity="advice", when=DWG, require=Not(DWG),
         message="delayed wgrad showed no independent win over plain EP overlap (the performance harness flag "
                 "--moe_a2a_overlap turns it on together with EP overlap)",
         source=f"{OVERLAP_SKILL}; {OVERLAP_DOC}; seeds: perf-expert-parallel-overlap (minimal runnable command); "
         "Megatron-Bridge scripts/performance _set_moe_a2a_overlap_overrides",
         fix="set moe.overlap.delay_wgrad: false unless measured on this shape (to measure plain EP overlap with the "
             "performance harness: --moe_a2a_overlap false with comm_overlap.overlap_moe_expert_parallel_comm=true "
             "and comm_overlap.delay_wgrad_compute=false)", megatron_message=None, origin="moeforge",
         evidence="H100 x16 Qwen3-30B-A3B EP=16: 31.31 s (EP overlap) vs 31.20 s (plus delay_wgrad), 1.317x vs "
                  "1.322x; Qwen3-Next-80B-A3B EP=8 alltoall on 8 nodes: 4686 ms -> 4912 ms (about 4.8% slower) with "
                  "delay_wgrad_compute"),
    Rule(id="ADVICE_EP_OVERLAP_FEW_MICROBATCHES", severity="advice",
         when=EP_OVERLAP & IsSet(F("global_batch_size")) & IsSet(F("data_parallel_size")),
         require=F("global_batch_size") >= F("micro_batch_size") * F("data_parallel_size") * 2,
         message="EP overlap interleaves micro-batches; with a single micro-batch per step there is nothing to overlap",
         source=OVERLAP_DOC,
         fix="raise training.global_batch_size to at least 2 x micro_batch_size x DP, or set moe.overlap.ep_comm: "
             "false", megatron_message=None, origin="moeforge"),
    Rule(id="ADVICE_FORCE_BALANCE_FOR_BENCHMARKS_ONLY", severity="advice",
         when=F("moe_router_force_load_balancing").is_(True), require=F("moe_router_force_load_balancing").is_(False),
         message="force-balanced routing is for performance benchmarks (comparable across dispatchers, usually faster "
                 "than dropless); it changes the routing, so not for convergence runs",
         source=f"{DISPATCH_SKILL} (routing mode)",
         fix="keep moe.router.force_load_balancing for benchmarks only, and fixed across the runs you compare",
         megatron_message=None, origin="moeforge"),
    Rule(id="ADVICE_COMPARE_DISPATCHERS_ON_ONE_STACK", severity="advice", when=FLEX & ON_GPU, require=NEVER,
         message="compare dispatchers only on one stack: same container, routing mode, PP layout and CUDA-graph "
                 "scopes; a DeepEP/HybridEP import failure is an environment limitation, not performance data",
         source=f"{DISPATCH_SKILL} (pitfalls, backend availability gate)",
         fix="benchmark alltoall and the flex backend with everything else fixed", megatron_message=None,
         origin="moeforge",
         evidence="H100 x16 Qwen3-30B-A3B EP=16 smoke run: alltoall finished 5 steps (45.65 s/step, 132.9 "
                  "TFLOP/s/GPU, 61.351 GB peak) while DeepEP and HybridEP failed before the first iteration because "
                  "the packages were missing"),
    Rule(id="ADVICE_FLEX_FOR_CROSS_NODE_EP", severity="advice",
         when=(DISP == "alltoall") & ON_GPU & (EP > F("gpus_per_node"))
         & Or(F("deep_ep_installed").is_(True)
              & Or(F("gpu_major").isin(8, 9), F("gpu_product").isin("B200", "B300")),
              F("hybrid_ep_installed").is_(True) & F("gpu_product").isin("GB200", "GB300")), require=FLEX,
         message="cross-node EP on this hardware usually gains from the flex dispatcher (DeepEP on H100/B200, "
                 "HybridEP on GB200/GB300 NVL72) once all-to-all is visible in the profile", source=DISPATCH_SKILL,
         fix="set moe.dispatcher: flex with moe.flex_backend: deepep (H100/B200) or hybridep (GB200/GB300)",
         megatron_message=None, origin="moeforge",
         evidence="DSV3 on GB200/GB300 moved from low-teens MFU (untuned alltoall) to high-teens/low-20s MFU with the "
                  "tuned dispatcher stack; HybridEP usually modestly faster than alltoall on Qwen3-235B GB200 with "
                  "better memory headroom"),
    Rule(id="ADVICE_HYBRIDEP_OFF_NVL72", severity="advice",
         when=FLEX & (BACKEND == "hybridep") & ON_GPU & (F("nvlink_domain") < 72), require=F("nvlink_domain") >= 72,
         message="HybridEP is topology-sensitive and designed for NVL72; on an 8-GPU NVLink domain compare it with "
                 "DeepEP", source=f"{DISPATCH_SKILL} (pitfalls)",
         fix="benchmark moe.flex_backend: deepep against hybridep on this platform", megatron_message=None,
         origin="moeforge"),
    Rule(id="ADVICE_CUDA_GRAPHS_FOR_DROPLESS_MOE", severity="advice",
         when=ON_GPU & IsSet(F("num_moe_experts")) & Not(IsSet(F("moe_expert_capacity_factor")))
         & (F("cuda_graph_impl") == "none") & (F("transformer_engine") > 0), require=F("cuda_graph_impl") != "none",
         message="dropless MoE usually gains from Transformer Engine graphs of attn, moe_router and moe_preprocess "
                 "(expert compute stays outside the graph)", source=f"{WORKFLOW} (CUDA graphs for MoE)",
         fix="set cuda_graph.impl: transformer_engine with cuda_graph.modules: [attn, moe_router, moe_preprocess]; "
             "budget several GB of extra memory", megatron_message=None, origin="moeforge",
         evidence="a moderate step-time win when launch overhead is visible; GB200/GB300 runs expose host and launch "
                  "overhead earlier than H100"),
)
