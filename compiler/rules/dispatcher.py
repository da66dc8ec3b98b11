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
from moeforge.compiler.knobs.facts import FLEX_BACKENDS
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, AtLeast, IsSet, Not, Or, TE_INSTALLED

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
ETP = F("expert_tensor_parallel_size")
RANKS = F("hybridep_ranks_per_nvlink_domain")
SMS = F("moe_flex_dispatcher_num_sms")
DEEPEP_GPU = Or(F("gpu_major").isin(8, 9), F("gpu_product").isin("B200", "B300"))
HYBRIDEP_GPU = F("gpu_major").isin(8, 9, 10)
ENABLE_DEEPEP = F("moe_enable_deepep").is_(True)
V19 = (("megatron_core", ">=0.19.0"),)

RULES = (
    Rule(id="FLEX_NEEDS_BACKEND", severity="warning", when=FLEX, require=IsSet(BACKEND),
         message="the flex dispatcher without a backend is not flex: Megatron-Bridge quietly uses alltoall",
         source=f"{FDB} validate_flex_dispatcher_backend",
         fix="set moe.flex_backend to deepep or hybridep, or moe.dispatcher: alltoall", megatron_message=None,
         origin="megatron-bridge", silent={"moe_token_dispatcher_type": "alltoall"},
         also=(("megatron-core (token_dispatcher.py)",
                "Invalid backend: NonePlease set --moe-flex-dispatcher-backend=deepep or "
                "--moe-flex-dispatcher-backend=hybridep"),)),
    Rule(id="FLEX_NEEDS_TP_X_EP", severity="error", when=FLEX,
         require=Or(F("expert_model_parallel_size") > 1, F("tensor_model_parallel_size") > 1),
         message="the flex dispatcher needs TP x EP > 1", source=TD,
         fix="set parallelism.ep > 1, or moe.dispatcher: alltoall",
         megatron_message="Flex token dispatcher requires TPxEP > 1"),
    Rule(id="DEEPEP_NEEDS_SUPPORTED_GPU", severity="error", when=DEEPEP & ON_GPU, require=DEEPEP_GPU,
         message="DeepEP runs on Ampere, Hopper and B200/B300 only (not GB200/GB300, not B100)",
         source=f"{FDB} validate_flex_dispatcher_backend / apply_flex_dispatcher_backend",
         fix="use moe.flex_backend: hybridep on GB200/GB300 NVL72, or moe.dispatcher: alltoall",
         megatron_message="DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300) GPUs. Current GPU: "
                          "{gpu_name}", origin="megatron-bridge",
         also=(("megatron-bridge apply_flex_dispatcher_backend (warning; falls back to alltoall)",
                "DeepEP is only applicable to Ampere, Hopper, and Blackwell (B200/B300) GPUs. "
                "Current GPU: {gpu_name}. Falling back to alltoall."),)),
    Rule(id="HYBRIDEP_NEEDS_SUPPORTED_GPU", severity="error", when=HYBRIDEP & ON_GPU, require=HYBRIDEP_GPU,
         message="HybridEP runs on Ampere, Hopper and Blackwell (B200/B300, GB200/GB300 NVL72) only",
         source=f"{FDB} validate_flex_dispatcher_backend / apply_flex_dispatcher_backend",
         fix="use moe.dispatcher: alltoall on this GPU",
         megatron_message="HybridEP is supported for GB200, GB300 with NVL72 and for Ampere, Hopper, B200 and B300 "
                          "GPUs", origin="megatron-bridge",
         also=(("megatron-bridge apply_flex_dispatcher_backend (warning; falls back to alltoall)",
                "HybridEP is only applicable for GB200, GB300 with NVL72 and for Ampere, Hopper, B200 and "
                "B300 GPUs. Current GPU: {gpu_name}. Falling back to alltoall."),)),
    Rule(id="DEEPEP_PACKAGE_INSTALLED", severity="error", when=DEEPEP,
         require=F(FLEX_BACKENDS["deepep"].fact).is_(True),
         message="flex + deepep needs the DeepEP package on the platform (backend availability gate)",
         source=f"seeds: nemo-mbridge-perf-moe-dispatcher-selection (availability gate); {TD}",
         fix="install DeepEP in the container (platform.software.deep_ep: true), or use moe.dispatcher: alltoall",
         megatron_message="DeepEP is not installed. Please install DeepEP package from "
                          "https://github.com/deepseek-ai/deepep.", origin="moeforge"),
    Rule(id="HYBRIDEP_PACKAGE_INSTALLED", severity="error", when=HYBRIDEP,
         require=F(FLEX_BACKENDS["hybridep"].fact).is_(True),
         message="flex + hybridep needs the HybridEP package on the platform (backend availability gate)",
         source=f"seeds: nemo-mbridge-perf-moe-dispatcher-selection (availability gate); {TD}",
         fix="install HybridEP (DeepEP hybrid-ep branch; platform.software.hybrid_ep: true), or use moe.dispatcher: "
             "alltoall",
         megatron_message="HybridEP is not installed. Please install HybridEP package from "
                          "https://github.com/deepseek-ai/DeepEP/tree/hybrid-ep.", origin="moeforge"),
    Rule(id="HYBRIDEP_RANKS_MATCH_NVLINK_DOMAIN", severity="error", when=HYBRIDEP & IsSet(RANKS),
         require=Or((EP <= NVL) & (RANKS == EP), (EP > NVL) & (RANKS == NVL)),
         message="NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN must be min(EP, NVLink domain size) (min(EP, 8) on NVL8 "
                 "systems, EP on NVL72)",
         source=f"{HARNESS}; seeds: HybridEP tuning (a mismatch costs performance and sometimes correctness)",
         fix="leave moe.hybridep_ranks_per_nvlink_domain auto, or set it to min(EP, platform.nvlink_domain)",
         megatron_message=None, origin="moeforge"),  # the harness sets it; HybridEP reads it under every front-end
    Rule(id="HYBRIDEP_EP_WITHIN_NVL72", severity="error", when=HYBRIDEP & (NVL >= 72), require=EP <= NVL,
         message="on an NVL72 system HybridEP's EP group must fit in the 72-GPU NVLink domain", source=HARNESS,
         fix="set parallelism.ep <= 72",
         megatron_message="HybridEP expert parallel size must not exceed the 72-rank NVLink domain.",
         origin="megatron-bridge"),
    Rule(id="SHARED_EXPERT_OVERLAP_DISPATCHER", severity="error",
         when=IsSet(F("moe_shared_expert_intermediate_size")) & F("moe_shared_expert_overlap").is_(True),
         require=Or(DISP == "alltoall", FLEX & AtLeast("megatron_core", "0.18.0")),
         message="shared-expert overlap needs the alltoall dispatcher (alltoall or flex from megatron-core 0.18)",
         source=TC, fix="set moe.overlap.shared_expert: false, or moe.dispatcher: alltoall",
         megatron_message="moe_shared_expert_overlap only works with alltoall or flex token dispatcher.",
         variants=(((("megatron_core", "<0.18.0"),),
                    "moe_shared_expert_overlap only works with alltoall token dispatcher."),)),
    Rule(id="SHARED_EXPERT_OVERLAP_OFF_WITH_FLEX", severity="warning", when=FLEX & BACKEND.isin("deepep", "hybridep"),
         require=F("moe_shared_expert_overlap").is_(False),
         message="Megatron-Bridge turns shared-expert overlap off when it activates DeepEP/HybridEP",
         source=f"{FDB} apply_flex_dispatcher_backend", fix="set moe.overlap.shared_expert: false",
         megatron_message=None, origin="megatron-bridge", silent={"moe_shared_expert_overlap": False}),
    Rule(id="DEEPEP_NO_PAD_TO_CAPACITY", severity="error", when=FLEX & Or(BACKEND == "deepep", ENABLE_DEEPEP),
         require=F("moe_pad_expert_input_to_capacity").is_(False),
         message="DeepEP cannot pad expert inputs to capacity", source=TC,
         fix="set moe.pad_expert_input_to_capacity: false, or use hybridep/alltoall",
         megatron_message="Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity"),
    Rule(id="CAPACITY_FACTOR_NEEDS_AUX_LOSS_TYPE", severity="error", when=IsSet(F("moe_expert_capacity_factor")),
         require=F("moe_router_load_balancing_type") != "sinkhorn",
         message="an expert capacity factor only works with aux_loss, seq_aux_loss, global_aux_loss or none load "
                 "balancing", source=TC, fix="unset moe.expert_capacity_factor, or change the load-balancing type",
         megatron_message="moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss or none "
                          "load balancing"),
    Rule(id="PAD_TO_CAPACITY_NEEDS_CAPACITY_FACTOR", severity="error",
         when=F("moe_pad_expert_input_to_capacity").is_(True), require=IsSet(F("moe_expert_capacity_factor")),
         message="padding expert inputs to capacity needs an expert capacity factor", source=TC,
         fix="set moe.expert_capacity_factor, or moe.pad_expert_input_to_capacity: false",
         megatron_message="moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity"),
    Rule(id="MOE_ENABLE_DEEPEP_NEEDS_FLEX", severity="error", when=ENABLE_DEEPEP, require=FLEX,
         message="moe_enable_deepep needs the flex dispatcher", source=TC,
         fix="replace moe_enable_deepep with moe_token_dispatcher_type: flex and moe_flex_dispatcher_backend: deepep",
         megatron_message="DeepEP backend is only supported with flex token dispatcher.", lint_only=True),
    Rule(id="MOE_ENABLE_DEEPEP_NOT_HYBRIDEP", severity="error", when=ENABLE_DEEPEP, require=BACKEND != "hybridep",
         message="moe_enable_deepep contradicts moe_flex_dispatcher_backend=hybridep", source=TC,
         fix="drop moe_enable_deepep", megatron_message="Only one backend is supported for flex token dispatcher.",
         lint_only=True),
    Rule(id="MOE_ENABLE_DEEPEP_DEPRECATED", severity="warning", when=ENABLE_DEEPEP,
         require=F("moe_enable_deepep").is_(False), message="moe_enable_deepep is deprecated", source=TC,
         fix="use moe_token_dispatcher_type: flex with moe_flex_dispatcher_backend: deepep",
         # two adjacent literals without a space in the source
         megatron_message="moe_enable_deepep is deprecated.Please use --moe-flex-dispatcher-backend=deepep instead.",
         lint_only=True),
    Rule(id="NCCLEP_NEEDS_MCORE_0_19", severity="error", when=NCCLEP, require=AtLeast("megatron_core", "0.19.0"),
         message="the ncclep flex backend exists from megatron-core 0.19 on", source=TD,
         fix="use moe.flex_backend: deepep or hybridep, or a platform with megatron-core >= 0.19",
         megatron_message="Invalid backend: ncclepPlease set --moe-flex-dispatcher-backend=deepep or "
                          "--moe-flex-dispatcher-backend=hybridep", versions=(("megatron_core", "<0.19.0"),)),
    # MoEFlexTokenDispatcher's NCCL EP manager (0.19): TE's NCCL EP ops, and a receive buffer sized by the rank
    # capacity (later releases run without one, eagerly)
    Rule(id="NCCLEP_NEEDS_TE", severity="error", when=NCCLEP, require=TE_INSTALLED,
         message="the ncclep backend is Transformer Engine's NCCL EP", source=TD,
         fix="use a platform whose Transformer Engine is built with NCCL EP, or moe.flex_backend: deepep / hybridep",
         megatron_message="TransformerEngine NCCL EP is unavailable. The 'ncclep' backend requires a "
                          "TransformerEngine build with NCCL EP support (NVTE_BUILD_WITH_NCCL_EP=1).", versions=V19),
    Rule(id="NCCLEP_NEEDS_RANK_CAPACITY", severity="error", when=NCCLEP,
         require=IsSet(F("moe_expert_rank_capacity_factor")),
         message="the ncclep backend sizes its receive buffer by the per-rank capacity factor", source=TD,
         fix="set moe.expert_rank_capacity_factor (generously: exceeding it traps), or moe.flex_backend: hybridep",
         megatron_message="The 'ncclep' backend requires moe_expert_rank_capacity_factor to be set: it sizes the "
                          "per-rank receive buffer. Exceeding the budget hard-traps, so set it generously.",
         versions=(("megatron_core", ">=0.19.0,<0.20.0"),)),
    Rule(id="NCCLEP_NEEDS_SUPPORTED_GPU", severity="error", when=NCCLEP & ON_GPU, require=F("gpu_major").isin(9, 10),
         message="NCCL EP runs on Hopper and Blackwell only", source=f"{FDB} validate_flex_dispatcher_backend",
         fix="use moe.flex_backend: hybridep (or deepep), or moe.dispatcher: alltoall on this GPU",
         megatron_message="NCCL EP is supported for Hopper and Blackwell GPUs. Current GPU: {gpu_name}",
         origin="megatron-bridge"),
    Rule(id="NCCLEP_NEEDS_FLEX", severity="error", when=BACKEND == "ncclep", require=FLEX,
         message="the ncclep backend needs the flex dispatcher", source=TC, fix="set moe.dispatcher: flex",
         megatron_message="moe_flex_dispatcher_backend='ncclep' requires moe_token_dispatcher_type='flex'.",
         versions=V19),
    Rule(id="FLEX_BACKEND_IGNORED_WITHOUT_FLEX", severity="warning", when=(DISP != "flex") & (BACKEND == "hybridep"),
         require=DISP == "flex", message="moe.flex_backend does nothing unless moe.dispatcher is flex",
         source="seeds: perf-expert-parallel-overlap pitfalls (flex != backend flag)",
         fix="set moe.dispatcher: flex to use HybridEP", megatron_message=None, origin="moeforge"),
    Rule(id="RANK_CAPACITY_NEEDS_HYBRIDEP_OR_NCCLEP", severity="error",
         when=IsSet(F("moe_expert_rank_capacity_factor")),
         require=Or(BACKEND == "hybridep", (BACKEND == "ncclep") & AtLeast("megatron_core", "0.19.0")),
         message="moe_expert_rank_capacity_factor needs the hybridep backend (or ncclep from 0.19)", source=TC,
         fix="set moe.flex_backend: hybridep, or unset moe.expert_rank_capacity_factor",
         megatron_message="moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep' or "
                          "'ncclep'.", versions=(("megatron_core", ">=0.18.0"),),
         variants=(((("megatron_core", "<0.19.0"),),
                    "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep'."),)),
    Rule(id="RANK_CAPACITY_NEEDS_OP_FUSER", severity="error", when=IsSet(F("moe_expert_rank_capacity_factor"))
                                                              & Or(BACKEND == "hybridep", Not(AtLeast("megatron_core", "0.19.0"))),
         require=F("use_transformer_engine_op_fuser").is_(True),
         message="moe_expert_rank_capacity_factor (with hybridep) needs use_transformer_engine_op_fuser", source=TC,
         fix="set training.te_op_fuser: true",
         megatron_message="moe_expert_rank_capacity_factor with the 'hybridep' backend requires "
                          "use_transformer_engine_op_fuser to be enabled.", versions=(("megatron_core", ">=0.18.0"),),
         variants=(((("megatron_core", "<0.19.0"),),
                    "moe_expert_rank_capacity_factor requires use_transformer_engine_op_fuser to be enabled."),)),
    Rule(id="RANK_CAPACITY_NEEDS_MCORE_0_18", severity="error", when=IsSet(F("moe_expert_rank_capacity_factor")),
         require=AtLeast("megatron_core", "0.18.0"),
         message="moe_expert_rank_capacity_factor exists from megatron-core 0.18 on", source=TC,
         fix="unset moe.expert_rank_capacity_factor, or use megatron-core >= 0.18", megatron_message=None,
         origin="moeforge"),
    Rule(id="FLEX_NUM_SMS_TUNED_RANGE", severity="advice", when=FLEX & IsSet(SMS), require=(SMS >= 16) & (SMS <= 32),
         message="dispatcher SM counts are tuned between 16 and 32 (DeepEP default 20, HybridEP 16, perf harness 32)",
         source="seeds: nemo-mbridge-perf-moe-dispatcher-selection (tuning parameters)",
         fix="sweep moe.flex_num_sms between 16 and 32 on the target hardware", megatron_message=None,
         origin="moeforge",
         evidence="default moe_deepep_num_sms 20 and moe_hybridep_num_sms 16 are reasonable starting points but "
                  "rarely optimal; the performance harness uses 32 for HybridEP workloads"),
    Rule(id="MOE_DEEPEP_NUM_SMS_DEPRECATED", severity="warning", when=IsSet(F("moe_deepep_num_sms")),
         require=Not(IsSet(F("moe_deepep_num_sms"))),
         message="moe_deepep_num_sms is deprecated; megatron-core 0.19 routes it to moe_flex_dispatcher_num_sms",
         source=TC, fix="use moe_flex_dispatcher_num_sms",
         megatron_message="moe_deepep_num_sms is deprecated. Use moe_flex_dispatcher_num_sms instead.", versions=V19,
         lint_only=True),
    Rule(id="MOE_HYBRIDEP_NUM_SMS_DEPRECATED", severity="warning", when=IsSet(F("moe_hybridep_num_sms")),
         require=Not(IsSet(F("moe_hybridep_num_sms"))),
         message="moe_hybridep_num_sms is deprecated; megatron-core 0.19 routes it to moe_flex_dispatcher_num_sms",
         source=TC, fix="use moe_flex_dispatcher_num_sms",
         megatron_message="moe_hybridep_num_sms is deprecated. Use moe_flex_dispatcher_num_sms instead.", versions=V19,
         lint_only=True),
    Rule(id="NUM_SMS_DEPRECATED_CONFLICT", severity="error",
         when=IsSet(F("moe_deepep_num_sms")) & IsSet(F("moe_hybridep_num_sms")) & Not(IsSet(SMS)),
         require=F("moe_deepep_num_sms") == F("moe_hybridep_num_sms"),
         message="moe_deepep_num_sms and moe_hybridep_num_sms disagree and moe_flex_dispatcher_num_sms is unset",
         source=TC, fix="set one moe_flex_dispatcher_num_sms instead",
         megatron_message="Conflicting deprecated SM-count knobs {deprecated_num_sms}; set a single "
                          "moe_flex_dispatcher_num_sms instead.", versions=V19, lint_only=True),
    Rule(id="ALLGATHER_NO_VARIABLE_SEQ_LENGTHS", severity="error",
         when=(DISP == "allgather") & F("variable_seq_lengths").is_(True), require=DISP != "allgather",
         message="the allgather dispatcher does not support variable sequence lengths", source=TC,
         fix="use moe_token_dispatcher_type: alltoall",
         megatron_message="Token dispatcher type: {moe_token_dispatcher_type} does not support variable sequence "
                          "length, please use alltoall dispatcher instead.", lint_only=True),
    # Found by tests/fuzz/test_runtime_truth.py: with expert TP the alltoall dispatcher gathers each rank's tokens over
    # the expert-TP group with uneven split sizes (dispatch_postprocess -> _gather_along_first_dim's list all_gather);
    # NCCL takes uneven sizes, gloo raises "ProcessGroupGloo::allgather: invalid tensor size" at the first MoE layer.
    Rule(id="GLOO_ALLTOALL_NO_EXPERT_TP", severity="error",
         when=(F("distributed_backend") == "gloo") & (DISP == "alltoall"),
         require=Or(IsSet(ETP) & (ETP == 1), Not(IsSet(ETP)) & (F("tensor_model_parallel_size") == 1)),
         message="over gloo the alltoall dispatcher cannot gather uneven token counts across expert-TP ranks "
                 "(expert tensor parallelism above 1)",
         source="megatron-core tensor_parallel/mappings.py _gather_along_first_dim (torch.distributed.all_gather "
                "of uneven splits, line 150 of 0.16.1), from transformer/moe/token_dispatcher.py "
                "MoEAlltoAllTokenDispatcher.dispatch_postprocess (line 696), at the first MoE layer's forward",
         fix="set parallelism.etp: 1, or moe.dispatcher: allgather", megatron_message=None, origin="moeforge"),
)
