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
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, IsSet, Or, TE_INSTALLED

BRIDGE = "Megatron-Bridge training/comm_overlap.py CommOverlapConfig._get_model_comm_overlap_cfgs"
ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
TPO = F("tp_comm_overlap").is_(True)
TP = F("tensor_model_parallel_size")

RULES = (
    Rule(id="TP_OVERLAP_NEEDS_TP", severity="warning", when=TPO, require=TP >= 2,
         message="TP communication overlap needs TP >= 2; Megatron-Bridge drops it", source=BRIDGE,
         fix="set overlap.tp_comm: false (or parallelism.tp >= 2 with parallelism.sp: true)",
         megatron_message="Disabling tensor parallel communication overlap due to TP size < 2.",
         origin="megatron-bridge", silent={"tp_comm_overlap": False}),
    Rule(id="TP_OVERLAP_NEEDS_SP", severity="warning", when=TPO & (TP >= 2), require=F("sequence_parallel").is_(True),
         message="TP communication overlap needs sequence parallelism; Megatron-Bridge drops it (Megatron-LM refuses "
                 "it)", source=f"{BRIDGE}; {ARGS}", fix="set parallelism.sp: true, or overlap.tp_comm: false",
         megatron_message="Disabling tensor parallel communication overlap due to sequence_parallel=False.",
         origin="megatron-bridge", silent={"tp_comm_overlap": False},
         also=(("Megatron-LM arguments.py (AssertionError)",
                "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism "
                "is enabled"),)),
    # Megatron-LM asserts where Bridge drops it (after turning SP off at TP = 1); lint-config only,
    # the recipe compiler keeps Bridge's silent rule.
    Rule(id="TP_OVERLAP_NEEDS_SP_IN_MEGATRON_LM", severity="error", when=TPO, require=F("sequence_parallel").is_(True),
         message="TP communication overlap needs sequence parallelism (Megatron-LM refuses it; at TP = 1 it has "
                 "already turned sequence parallelism off)", source=ARGS,
         fix="set sequence_parallel: true with tensor_model_parallel_size >= 2, or tp_comm_overlap: false",
         megatron_message="Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is "
                          "enabled", origin="megatron-lm", lint_only=True),
    Rule(id="TP_OVERLAP_NEEDS_TE", severity="warning", when=TPO & (TP >= 2) & F("sequence_parallel").is_(True),
         require=TE_INSTALLED, message="TP communication overlap needs Transformer Engine; Megatron-Bridge drops it",
         source=BRIDGE, fix="use a platform with Transformer Engine, or set overlap.tp_comm: false",
         megatron_message="Disabling tensor parallel communication overlap due to TE not detected.",
         origin="megatron-bridge", silent={"tp_comm_overlap": False}),
    Rule(id="PP_OVERLAP_NEEDS_VPP", severity="warning", when=F("overlap_p2p_comm").is_(True),
         require=IsSet(F("virtual_pipeline_model_parallel_size")),
         message="PP communication overlap needs the interleaved schedule (a virtual pipeline size); Megatron-LM "
                 "turns it off", source=ARGS, fix="set parallelism.vpp (with PP > 1), or overlap.p2p: false",
         megatron_message="WARNING: Setting args.overlap_p2p_comm and args.align_param_gather to False since "
                          "non-interleaved schedule does not support overlapping p2p communication and aligned param "
                          "AG", origin="megatron-lm", silent={"overlap_p2p_comm": False}),
    Rule(id="PP_INTERLEAVED_WITHOUT_P2P_OVERLAP_NEEDS_PP3", severity="error",
         when=IsSet(F("virtual_pipeline_model_parallel_size")) & F("overlap_p2p_comm").is_(False),
         require=F("pipeline_model_parallel_size") > 2,
         message="the interleaved schedule without PP overlap needs PP > 2", source=ARGS,
         fix="set overlap.p2p: true (Megatron-Bridge does this for PP > 1 with VPP), or parallelism.pp > 2",
         megatron_message="When interleaved schedule is used and p2p communication overlap is disabled, "
                          "pipeline-model-parallel size should be greater than 2 to avoid having multiple p2p sends "
                          "and recvs between same 2 ranks per communication batch", origin="megatron-lm"),
    Rule(id="DP_PARAM_GATHER_NEEDS_DIST_OPT", severity="error", when=F("overlap_param_gather").is_(True),
         require=Or(F("use_distributed_optimizer").is_(True), F("use_megatron_fsdp").is_(True)),
         message="parameter all-gather overlap needs the distributed optimizer (or Megatron-FSDP); megatron-core DDP "
                 "silently ignores it otherwise",
         source=f"{ARGS}; megatron-core distributed/distributed_data_parallel.py",
         fix="set optimizer.distributed: true, or overlap.param_gather: false",
         megatron_message="--overlap-param-gather only supported with distributed optimizer or megatron fsdp",
         origin="megatron-lm", variants=(((("megatron_core", ">=0.19.0"),),
                                          "--overlap-param-gather only supported with distributed optimizer, megatron fsdp, "
                                          "or dist_muon"),)),
    # megatron-core's DDP accepts it (then one bucket: nothing to overlap), but Megatron-LM's
    # validate_args refuses it, and a recipe emits megatron-lm.args: an error, so no preference
    # can ever choose it.
    Rule(id="DP_PARAM_GATHER_NEEDS_GRAD_REDUCE", severity="error", when=F("overlap_param_gather").is_(True),
         require=F("overlap_grad_reduce").is_(True),
         message="parameter all-gather overlap needs gradient reduce-scatter overlap: Megatron-LM refuses it (and "
                 "megatron-core would use one bucket, with nothing to overlap)",
         source=f"{ARGS}; megatron-core distributed/distributed_data_parallel.py (bucket_size)",
         fix="set overlap.grad_reduce: true, or overlap.param_gather: false",
         megatron_message="Must use --overlap-param-gather with --overlap-grad-reduce", origin="megatron-lm"),
    Rule(id="DP_OVERLAP_BRIDGE_NEEDS_DIST_OPT", severity="advice",
         when=F("overlap_grad_reduce").is_(True) & F("use_distributed_optimizer").is_(False)
         & F("use_megatron_fsdp").is_(False), require=F("use_distributed_optimizer").is_(True),
         message="Megatron-Bridge applies its DP overlap settings only with the distributed optimizer (plain DDP "
                 "grad-reduce overlap still works in megatron-core)",
         source="Megatron-Bridge training/comm_overlap.py CommOverlapConfig.setup",
         fix="set optimizer.distributed: true (the seeds pair DP overlap with the distributed optimizer)",
         megatron_message=None, origin="megatron-bridge"),
)
