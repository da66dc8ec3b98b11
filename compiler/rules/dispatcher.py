"""Token dispatcher: alltoall / allgather / flex (DeepEP, HybridEP, NCCL EP) and the GPU it needs.

Sources: Megatron-Bridge training/flex_dispatcher_backend.py (apply_flex_dispatcher_backend
falls back to alltoall with a warning on an unsupported GPU; validate_flex_dispatcher_backend
raises ValueError for the same; flex with backend None silently becomes alltoall),
megatron-core TransformerConfig.__post_init__ and transformer/moe/token_dispatcher.py,
the Bridge performance harness (HybridEP NVLink topology environment), and the seeds'
backend availability gate (a missing DeepEP/HybridEP package fails at model construction).

GPU matrix (Bridge): A100/H100 -> deepep + hybridep; B200/B300 -> deepep + hybridep;
GB200/GB300 (major 10, name "NVIDIA GB...") -> hybridep only; B100 -> hybridep only;
major > 10 -> neither.
"""
from compiler.rules import Rule
from compiler.rules.expr import F, AtLeast, IsSet, Not, Or, TE_INSTALLED

TC = "megatron-core transformer/transformer_config.py TransformerConfig.__post_init__"
TD = "megatron-core transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher"
FDB = "Megatron-Bridge training/flex_dispatcher_backend.py"
HARNESS = "Megatron-Bridge scripts/performance/utils/utils.py (HybridEP topology environment)"

DISP, BACKEND = F("moe_token_dispatcher_type"), F("moe_flex_dispatcher_backend")
FLEX = DISP == "flex"
# an unset backend is deepep: megatron-core's and Megatron-LM's default (a plan never leaves it to Bridge's fallback)
DEEPEP = FLEX & Or(BACKEND == "deepep", Not(IsSet(BACKEND)))
HYBRIDEP = FLEX & (BACKEND == "hybridep")
NCCLEP = FLEX & (BACKEND == "ncclep")
ON_GPU = F("device") == "cuda"
EP, NVL = F("expert_model_parallel_size"), F("nvlink_domain")
RANKS = F("hybridep_ranks_per_nvlink_domain")
SMS = F("moe_flex_dispatcher_num_sms")
DEEPEP_GPU = Or(F("gpu_major").isin(8, 9), F("gpu_product").isin("B200", "B300"))
HYBRIDEP_GPU = F("gpu_major").isin(8, 9, 10)
ENABLE_DEEPEP = F("moe_enable_deepep") == True  # noqa: E712
V19 = (("megatron_core", ">=0.19.0"),)

RULES = (
    Rule("FLEX_NEEDS_BACKEND", "warning", FLEX, IsSet(BACKEND),
         "the flex dispatcher without a backend is not flex: Megatron-Bridge quietly uses alltoall",
         f"{FDB} validate_flex_dispatcher_backend",
         "set moe.flex_backend to deepep or hybridep, or moe.dispatcher: alltoall",
         None, origin="megatron-bridge", silent={"moe_token_dispatcher_type": "alltoall"},
         also=(("megatron-core (token_dispatcher.py)",
                "Invalid backend: NonePlease set --moe-flex-dispatcher-backend=deepep or "
                "--moe-flex-dispatcher-backend=hybridep"),)),
    Rule("FLEX_NEEDS_TP_X_EP", "error", FLEX,
         Or(F("expert_model_parallel_size") > 1, F("tensor_model_parallel_size") > 1),
         "the flex dispatcher needs TP x EP > 1", TD,
         "set parallelism.ep > 1, or moe.dispatcher: alltoall",
         "Flex token dispatcher requires TPxEP > 1"),
    Rule("DEEPEP_NEEDS_SUPPORTED_GPU", "error", DEEPEP & ON_GPU, DEEPEP_GPU,
         "DeepEP runs on Ampere, Hopper and B200/B300 only (not GB200/GB300, not B100)",
         f"{FDB} validate_flex_dispatcher_backend / apply_flex_dispatcher_backend",
         "use moe.flex_backend: hybridep on GB200/GB300 NVL72, or moe.dispatcher: alltoall",
         "DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300) GPUs. Current GPU: {gpu_name}",
         origin="megatron-bridge",
         also=(("megatron-bridge apply_flex_dispatcher_backend (warning; falls back to alltoall)",
                "DeepEP is only applicable to Ampere, Hopper, and Blackwell (B200/B300) GPUs. "
                "Current GPU: {gpu_name}. Falling back to alltoall."),)),
    Rule("HYBRIDEP_NEEDS_SUPPORTED_GPU", "error", HYBRIDEP & ON_GPU, HYBRIDEP_GPU,
         "HybridEP runs on Ampere, Hopper and Blackwell (B200/B300, GB200/GB300 NVL72) only",
         f"{FDB} validate_flex_dispatcher_backend / apply_flex_dispatcher_backend",
         "use moe.dispatcher: alltoall on this GPU",
         "HybridEP is supported for GB200, GB300 with NVL72 and for Ampere, Hopper, B200 and B300 GPUs",
         origin="megatron-bridge",
         also=(("megatron-bridge apply_flex_dispatcher_backend (warning; falls back to alltoall)",
                "HybridEP is only applicable for GB200, GB300 with NVL72 and for Ampere, Hopper, B200 and "
                "B300 GPUs. Current GPU: {gpu_name}. Falling back to alltoall."),)),
    Rule("DEEPEP_PACKAGE_INSTALLED", "error", DEEPEP, F("deep_ep_installed") == True,  # noqa: E712
         "flex + deepep needs the DeepEP package on the platform (backend availability gate)",
         f"seeds: nemo-mbridge-perf-moe-dispatcher-selection (availability gate); {TD}",
         "install DeepEP in the container (platform.software.deep_ep: true), or use moe.dispatcher: alltoall",
         "DeepEP is not installed. Please install DeepEP package from https://github.com/deepseek-ai/deepep.",
         origin="moeforge"),
    Rule("HYBRIDEP_PACKAGE_INSTALLED", "error", HYBRIDEP, F("hybrid_ep_installed") == True,  # noqa: E712
         "flex + hybridep needs the HybridEP package on the platform (backend availability gate)",
         f"seeds: nemo-mbridge-perf-moe-dispatcher-selection (availability gate); {TD}",
         "install HybridEP (DeepEP hybrid-ep branch; platform.software.hybrid_ep: true), or use "
         "moe.dispatcher: alltoall",
         "HybridEP is not installed. Please install HybridEP package from "
         "https://github.com/deepseek-ai/DeepEP/tree/hybrid-ep.",
         origin="moeforge"),
    Rule("HYBRIDEP_RANKS_MATCH_NVLINK_DOMAIN", "error", HYBRIDEP & IsSet(RANKS),
         Or((EP <= NVL) & (RANKS == EP), (EP > NVL) & (RANKS == NVL)),
         "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN must be min(EP, NVLink domain size) "
         "(min(EP, 8) on NVL8 systems, EP on NVL72)",
         f"{HARNESS}; seeds: HybridEP tuning (a mismatch costs performance and sometimes correctness)",
         "leave moe.hybridep_ranks_per_nvlink_domain auto, or set it to min(EP, platform.nvlink_domain)",
         None, origin="moeforge"),  # the harness sets it; HybridEP reads it under every front-end
    Rule("HYBRIDEP_EP_WITHIN_NVL72", "error", HYBRIDEP & (NVL >= 72), EP <= NVL,
         "on an NVL72 system HybridEP's EP group must fit in the 72-GPU NVLink domain", HARNESS,
         "set parallelism.ep <= 72",
         "HybridEP expert parallel size must not exceed the 72-rank NVLink domain.",
         origin="megatron-bridge"),
    Rule("SHARED_EXPERT_OVERLAP_DISPATCHER", "error",
         IsSet(F("moe_shared_expert_intermediate_size")) & (F("moe_shared_expert_overlap") == True),  # noqa: E712
         Or(DISP == "alltoall", FLEX & AtLeast("megatron_core", "0.18.0")),
         "shared-expert overlap needs the alltoall dispatcher (alltoall or flex from megatron-core 0.18)", TC,
         "set moe.overlap.shared_expert: false, or moe.dispatcher: alltoall",
         "moe_shared_expert_overlap only works with alltoall or flex token dispatcher.",
         variants=(((("megatron_core", "<0.18.0"),),
                    "moe_shared_expert_overlap only works with alltoall token dispatcher."),)),
    Rule("SHARED_EXPERT_OVERLAP_OFF_WITH_FLEX", "warning", FLEX & BACKEND.isin("deepep", "hybridep"),
         F("moe_shared_expert_overlap") == False,  # noqa: E712
         "Megatron-Bridge turns shared-expert overlap off when it activates DeepEP/HybridEP",
         f"{FDB} apply_flex_dispatcher_backend",
         "set moe.overlap.shared_expert: false", None, origin="megatron-bridge",
         silent={"moe_shared_expert_overlap": False}),
    Rule("DEEPEP_NO_PAD_TO_CAPACITY", "error", FLEX & Or(BACKEND == "deepep", ENABLE_DEEPEP),
         F("moe_pad_expert_input_to_capacity") == False,  # noqa: E712
         "DeepEP cannot pad expert inputs to capacity", TC,
         "set moe.pad_expert_input_to_capacity: false, or use hybridep/alltoall",
         "Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity"),
    Rule("CAPACITY_FACTOR_NEEDS_AUX_LOSS_TYPE", "error", IsSet(F("moe_expert_capacity_factor")),
         F("moe_router_load_balancing_type") != "sinkhorn",
         "an expert capacity factor only works with aux_loss, seq_aux_loss, global_aux_loss or none "
         "load balancing", TC, "unset moe.expert_capacity_factor, or change the load-balancing type",
         "moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss or none "
         "load balancing"),
    Rule("PAD_TO_CAPACITY_NEEDS_CAPACITY_FACTOR", "error", F("moe_pad_expert_input_to_capacity") == True,  # noqa: E712
         IsSet(F("moe_expert_capacity_factor")),
         "padding expert inputs to capacity needs an expert capacity factor", TC,
         "set moe.expert_capacity_factor, or moe.pad_expert_input_to_capacity: false",
         "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity"),
    Rule("MOE_ENABLE_DEEPEP_NEEDS_FLEX", "error", ENABLE_DEEPEP, FLEX,
         "moe_enable_deepep needs the flex dispatcher", TC,
         "replace moe_enable_deepep with moe_token_dispatcher_type: flex and moe_flex_dispatcher_backend: deepep",
         "DeepEP backend is only supported with flex token dispatcher.", lint_only=True),
    Rule("MOE_ENABLE_DEEPEP_NOT_HYBRIDEP", "error", ENABLE_DEEPEP, BACKEND != "hybridep",
         "moe_enable_deepep contradicts moe_flex_dispatcher_backend=hybridep", TC,
         "drop moe_enable_deepep",
         "Only one backend is supported for flex token dispatcher.", lint_only=True),
    Rule("MOE_ENABLE_DEEPEP_DEPRECATED", "warning", ENABLE_DEEPEP, F("moe_enable_deepep") == False,  # noqa: E712
         "moe_enable_deepep is deprecated", TC,
         "use moe_token_dispatcher_type: flex with moe_flex_dispatcher_backend: deepep",
         # two adjacent literals without a space in the source
         "moe_enable_deepep is deprecated.Please use --moe-flex-dispatcher-backend=deepep instead.",
         lint_only=True),
    Rule("NCCLEP_NEEDS_MCORE_0_19", "error", NCCLEP, AtLeast("megatron_core", "0.19.0"),
         "the ncclep flex backend exists from megatron-core 0.19 on", TD,
         "use moe.flex_backend: deepep or hybridep, or a platform with megatron-core >= 0.19",
         "Invalid backend: ncclepPlease set --moe-flex-dispatcher-backend=deepep or "
         "--moe-flex-dispatcher-backend=hybridep",
         versions=(("megatron_core", "<0.19.0"),)),
    # MoEFlexTokenDispatcher's NCCL EP manager (0.19): TE's NCCL EP ops, and a receive buffer sized by the rank
    # capacity (later releases run without one, eagerly)
    Rule("NCCLEP_NEEDS_TE", "error", NCCLEP, TE_INSTALLED,
         "the ncclep backend is Transformer Engine's NCCL EP", TD,
         "use a platform whose Transformer Engine is built with NCCL EP, or moe.flex_backend: deepep / hybridep",
         "TransformerEngine NCCL EP is unavailable. The 'ncclep' backend requires a TransformerEngine build with "
         "NCCL EP support (NVTE_BUILD_WITH_NCCL_EP=1).", versions=V19),
    Rule("NCCLEP_NEEDS_RANK_CAPACITY", "error", NCCLEP, IsSet(F("moe_expert_rank_capacity_factor")),
         "the ncclep backend sizes its receive buffer by the per-rank capacity factor", TD,
         "set moe.expert_rank_capacity_factor (generously: exceeding it traps), or moe.flex_backend: hybridep",
         "The 'ncclep' backend requires moe_expert_rank_capacity_factor to be set: it sizes the per-rank receive "
         "buffer. Exceeding the budget hard-traps, so set it generously.",
         versions=(("megatron_core", ">=0.19.0,<0.20.0"),)),
    Rule("NCCLEP_NEEDS_SUPPORTED_GPU", "error", NCCLEP & ON_GPU, F("gpu_major").isin(9, 10),
         "NCCL EP runs on Hopper and Blackwell only", f"{FDB} validate_flex_dispatcher_backend",
         "use moe.flex_backend: hybridep (or deepep), or moe.dispatcher: alltoall on this GPU",
         "NCCL EP is supported for Hopper and Blackwell GPUs. Current GPU: {gpu_name}", origin="megatron-bridge"),
    Rule("NCCLEP_NEEDS_FLEX", "error", BACKEND == "ncclep", FLEX,
         "the ncclep backend needs the flex dispatcher", TC,
         "set moe.dispatcher: flex", "moe_flex_dispatcher_backend='ncclep' requires moe_token_dispatcher_type='flex'.",
         versions=V19),
    Rule("FLEX_BACKEND_IGNORED_WITHOUT_FLEX", "warning", (DISP != "flex") & (BACKEND == "hybridep"),
         DISP == "flex",
         "moe.flex_backend does nothing unless moe.dispatcher is flex",
         "seeds: perf-expert-parallel-overlap pitfalls (flex != backend flag)",
         "set moe.dispatcher: flex to use HybridEP", None, origin="moeforge"),
    Rule("RANK_CAPACITY_NEEDS_HYBRIDEP_OR_NCCLEP", "error", IsSet(F("moe_expert_rank_capacity_factor")),
         Or(BACKEND == "hybridep", (BACKEND == "ncclep") & AtLeast("megatron_core", "0.19.0")),
         "moe_expert_rank_capacity_factor needs the hybridep backend (or ncclep from 0.19)", TC,
         "set moe.flex_backend: hybridep, or unset moe.expert_rank_capacity_factor",
         "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep' or 'ncclep'.",
         versions=(("megatron_core", ">=0.18.0"),),
         variants=(((("megatron_core", "<0.19.0"),),
                    "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep'."),)),
    Rule("RANK_CAPACITY_NEEDS_OP_FUSER", "error",
         IsSet(F("moe_expert_rank_capacity_factor"))
         & Or(BACKEND == "hybridep", Not(AtLeast("megatron_core", "0.19.0"))),
         F("use_transformer_engine_op_fuser") == True,  # noqa: E712
         "moe_expert_rank_capacity_factor (with hybridep) needs use_transformer_engine_op_fuser", TC,
         "set training.te_op_fuser: true",
         "moe_expert_rank_capacity_factor with the 'hybridep' backend requires "
         "use_transformer_engine_op_fuser to be enabled.",
         versions=(("megatron_core", ">=0.18.0"),),
         variants=(((("megatron_core", "<0.19.0"),),
                    "moe_expert_rank_capacity_factor requires use_transformer_engine_op_fuser to be enabled."),)),
    Rule("RANK_CAPACITY_NEEDS_MCORE_0_18", "error", IsSet(F("moe_expert_rank_capacity_factor")),
         AtLeast("megatron_core", "0.18.0"),
         "moe_expert_rank_capacity_factor exists from megatron-core 0.18 on", TC,
         "unset moe.expert_rank_capacity_factor, or use megatron-core >= 0.18", None, origin="moeforge"),
    Rule("FLEX_NUM_SMS_TUNED_RANGE", "advice", FLEX & IsSet(SMS), (SMS >= 16) & (SMS <= 32),
         "dispatcher SM counts are tuned between 16 and 32 (DeepEP default 20, HybridEP 16, perf harness 32)",
         "seeds: nemo-mbridge-perf-moe-dispatcher-selection (tuning parameters)",
         "sweep moe.flex_num_sms between 16 and 32 on the target hardware", None, origin="moeforge",
         evidence="default moe_deepep_num_sms 20 and moe_hybridep_num_sms 16 are reasonable starting points "
                  "but rarely optimal; the performance harness uses 32 for HybridEP workloads"),
    Rule("MOE_DEEPEP_NUM_SMS_DEPRECATED", "warning", IsSet(F("moe_deepep_num_sms")), Not(IsSet(F("moe_deepep_num_sms"))),
         "moe_deepep_num_sms is deprecated; megatron-core 0.19 routes it to moe_flex_dispatcher_num_sms", TC,
         "use moe_flex_dispatcher_num_sms",
         "moe_deepep_num_sms is deprecated. Use moe_flex_dispatcher_num_sms instead.",
         versions=V19, lint_only=True),
    Rule("MOE_HYBRIDEP_NUM_SMS_DEPRECATED", "warning", IsSet(F("moe_hybridep_num_sms")),
         Not(IsSet(F("moe_hybridep_num_sms"))),
         "moe_hybridep_num_sms is deprecated; megatron-core 0.19 routes it to moe_flex_dispatcher_num_sms", TC,
         "use moe_flex_dispatcher_num_sms",
         "moe_hybridep_num_sms is deprecated. Use moe_flex_dispatcher_num_sms instead.",
         versions=V19, lint_only=True),
    Rule("NUM_SMS_DEPRECATED_CONFLICT", "error",
         IsSet(F("moe_deepep_num_sms")) & IsSet(F("moe_hybridep_num_sms")) & Not(IsSet(SMS)),
         F("moe_deepep_num_sms") == F("moe_hybridep_num_sms"),
         "moe_deepep_num_sms and moe_hybridep_num_sms disagree and moe_flex_dispatcher_num_sms is unset", TC,
         "set one moe_flex_dispatcher_num_sms instead",
         "Conflicting deprecated SM-count knobs {deprecated_num_sms}; set a single moe_flex_dispatcher_num_sms "
         "instead.", versions=V19, lint_only=True),
    Rule("ALLGATHER_NO_VARIABLE_SEQ_LENGTHS", "error",
         (DISP == "allgather") & (F("variable_seq_lengths") == True), DISP != "allgather",  # noqa: E712
         "the allgather dispatcher does not support variable sequence lengths", TC,
         "use moe_token_dispatcher_type: alltoall",
         "Token dispatcher type: {moe_token_dispatcher_type} does not support variable sequence length, "
         "please use alltoall dispatcher instead.", lint_only=True),
)
