"""TP / PP / DP communication overlap prerequisites.

- TP overlap (tp_comm_overlap) needs TP >= 2, sequence parallelism and Transformer Engine.
  Megatron-Bridge silently drops it (three warnings, made explicit here as `silent`
  rules); Megatron-LM asserts on the sequence-parallel case.
- PP overlap (overlap_p2p_comm) only exists for the interleaved (VPP) schedule: Megatron-LM
  silently turns it off otherwise; without it the interleaved schedule needs PP > 2.
- DP overlap: overlap_param_gather needs the distributed optimizer (or Megatron-FSDP) and
  overlap_grad_reduce (Megatron-LM asserts; megatron-core's DDP just ignores
  overlap_param_gather without the distributed optimizer); Megatron-Bridge applies its
  CommOverlapConfig DP overlap only with the distributed optimizer.
"""
from compiler.rules import Rule
from compiler.rules.expr import F, IsSet, Or, TE_INSTALLED

BRIDGE = "Megatron-Bridge training/comm_overlap.py CommOverlapConfig._get_model_comm_overlap_cfgs"
ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
TPO = F("tp_comm_overlap") == True  # noqa: E712
TP = F("tensor_model_parallel_size")

RULES = (
    Rule("TP_OVERLAP_NEEDS_TP", "warning", TPO, TP >= 2,
         "TP communication overlap needs TP >= 2; Megatron-Bridge drops it", BRIDGE,
         "set overlap.tp_comm: false (or parallelism.tp >= 2 with parallelism.sp: true)",
         "Disabling tensor parallel communication overlap due to TP size < 2.",
         origin="megatron-bridge", silent={"tp_comm_overlap": False}),
    Rule("TP_OVERLAP_NEEDS_SP", "warning", TPO & (TP >= 2), F("sequence_parallel") == True,  # noqa: E712
         "TP communication overlap needs sequence parallelism; Megatron-Bridge drops it "
         "(Megatron-LM refuses it)", f"{BRIDGE}; {ARGS}",
         "set parallelism.sp: true, or overlap.tp_comm: false",
         "Disabling tensor parallel communication overlap due to sequence_parallel=False.",
         origin="megatron-bridge", silent={"tp_comm_overlap": False},
         also=(("Megatron-LM arguments.py (AssertionError)",
                "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism "
                "is enabled"),)),
    # Megatron-LM asserts where Bridge drops it (after turning SP off at TP = 1); lint-config only,
    # the recipe compiler keeps Bridge's silent rule.
    Rule("TP_OVERLAP_NEEDS_SP_IN_MEGATRON_LM", "error", TPO, F("sequence_parallel") == True,  # noqa: E712
         "TP communication overlap needs sequence parallelism (Megatron-LM refuses it; at TP = 1 it has "
         "already turned sequence parallelism off)", ARGS,
         "set sequence_parallel: true with tensor_model_parallel_size >= 2, or tp_comm_overlap: false",
         "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled",
         origin="megatron-lm", lint_only=True),
    Rule("TP_OVERLAP_NEEDS_TE", "warning", TPO & (TP >= 2) & (F("sequence_parallel") == True),  # noqa: E712
         TE_INSTALLED,
         "TP communication overlap needs Transformer Engine; Megatron-Bridge drops it", BRIDGE,
         "use a platform with Transformer Engine, or set overlap.tp_comm: false",
         "Disabling tensor parallel communication overlap due to TE not detected.",
         origin="megatron-bridge", silent={"tp_comm_overlap": False}),
    Rule("PP_OVERLAP_NEEDS_VPP", "warning", F("overlap_p2p_comm") == True,  # noqa: E712
         IsSet(F("virtual_pipeline_model_parallel_size")),
         "PP communication overlap needs the interleaved schedule (a virtual pipeline size); "
         "Megatron-LM turns it off", ARGS,
         "set parallelism.vpp (with PP > 1), or overlap.p2p: false",
         "WARNING: Setting args.overlap_p2p_comm and args.align_param_gather to False since "
         "non-interleaved schedule does not support overlapping p2p communication and aligned param AG",
         origin="megatron-lm", silent={"overlap_p2p_comm": False}),
    Rule("PP_INTERLEAVED_WITHOUT_P2P_OVERLAP_NEEDS_PP3", "error",
         IsSet(F("virtual_pipeline_model_parallel_size")) & (F("overlap_p2p_comm") == False),  # noqa: E712
         F("pipeline_model_parallel_size") > 2,
         "the interleaved schedule without PP overlap needs PP > 2", ARGS,
         "set overlap.p2p: true (Megatron-Bridge does this for PP > 1 with VPP), or parallelism.pp > 2",
         "When interleaved schedule is used and p2p communication overlap is disabled, pipeline-model-parallel "
         "size should be greater than 2 to avoid having multiple p2p sends and recvs between same 2 ranks "
         "per communication batch",
         origin="megatron-lm"),
    Rule("DP_PARAM_GATHER_NEEDS_DIST_OPT", "error", F("overlap_param_gather") == True,  # noqa: E712
         Or(F("use_distributed_optimizer") == True, F("use_megatron_fsdp") == True),  # noqa: E712
         "parameter all-gather overlap needs the distributed optimizer (or Megatron-FSDP); "
         "megatron-core DDP silently ignores it otherwise",
         f"{ARGS}; megatron-core distributed/distributed_data_parallel.py",
         "set optimizer.distributed: true, or overlap.param_gather: false",
         "--overlap-param-gather only supported with distributed optimizer or megatron fsdp",
         origin="megatron-lm",
         variants=(((("megatron_core", ">=0.19.0"),),
                    "--overlap-param-gather only supported with distributed optimizer, megatron fsdp, "
                    "or dist_muon"),)),
    # megatron-core's DDP accepts it (then one bucket: nothing to overlap), but Megatron-LM's
    # validate_args refuses it, and a recipe emits megatron-lm.args: an error, so no preference
    # can ever choose it.
    Rule("DP_PARAM_GATHER_NEEDS_GRAD_REDUCE", "error", F("overlap_param_gather") == True,  # noqa: E712
         F("overlap_grad_reduce") == True,  # noqa: E712
         "parameter all-gather overlap needs gradient reduce-scatter overlap: Megatron-LM refuses it "
         "(and megatron-core would use one bucket, with nothing to overlap)",
         f"{ARGS}; megatron-core distributed/distributed_data_parallel.py (bucket_size)",
         "set overlap.grad_reduce: true, or overlap.param_gather: false",
         "Must use --overlap-param-gather with --overlap-grad-reduce", origin="megatron-lm"),
    Rule("DP_OVERLAP_BRIDGE_NEEDS_DIST_OPT", "advice",
         (F("overlap_grad_reduce") == True) & (F("use_distributed_optimizer") == False)  # noqa: E712
         & (F("use_megatron_fsdp") == False),  # noqa: E712
         F("use_distributed_optimizer") == True,  # noqa: E712
         "Megatron-Bridge applies its DP overlap settings only with the distributed optimizer "
         "(plain DDP grad-reduce overlap still works in megatron-core)",
         "Megatron-Bridge training/comm_overlap.py CommOverlapConfig.setup",
         "set optimizer.distributed: true (the seeds pair DP overlap with the distributed optimizer)",
         None, origin="megatron-bridge"),
)
