"""The optimizer's precision: Transformer Engine's precision-aware FusedAdam.

megatron-core OptimizerConfig.__post_init__ (lower-precision main grads, master weights or
moments only with the precision-aware optimizer; that only with Adam, the distributed optimizer
and a FusedAdam of Transformer Engine whose signature takes the dtypes, TE >= 1.13), Megatron-LM's
validate_args (BF16 main grads only without FP32 gradient accumulation), and Transformer Engine's
FusedAdam itself (BF16 moments from TE 2.3 on).
"""
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.expr import F, AtLeast, TE_INSTALLED

OPT = "megatron-core optimizer/optimizer_config.py OptimizerConfig.__post_init__"
LM_ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
FUSED_ADAM = "Transformer Engine pytorch/optimizers/fused_adam.py FusedAdam.__init__"
AWARE = F("use_precision_aware_optimizer").is_(True)
OFF = "or set optimizer.precision_aware: false"

TRAINING_ONLY = True  # the optimizer exists only in a training run (an inference launch builds none)

RULES = (
    *[Rule(id=f"OPTIMIZER_{name.upper()}_FP32_WITHOUT_PRECISION_AWARE", severity="error", when=F(name) != "float32",
           require=AWARE, message=f"{name} other than float32 needs the precision-aware optimizer", source=OPT,
           fix=f"set optimizer.precision_aware: true, or optimizer.{name}: float32",
           megatron_message=f"{name} can only be fp32 when not using precision-aware optimizer")
      for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")],
    Rule(id="PRECISION_AWARE_OPTIMIZER_NEEDS_DISTRIBUTED_OPTIMIZER", severity="error", when=AWARE,
         require=F("use_distributed_optimizer").is_(True),
         message="the precision-aware optimizer needs the distributed optimizer", source=OPT,
         fix=f"set optimizer.distributed: true, {OFF}",
         megatron_message="--use-precision-aware-optimizer only supported with distributed optimizer"),
    Rule(id="PRECISION_AWARE_OPTIMIZER_NEEDS_TE", severity="error", when=AWARE, require=TE_INSTALLED,
         message="the precision-aware optimizer is Transformer Engine's FusedAdam", source=OPT,
         fix=f"use a platform with Transformer Engine, {OFF}",
         megatron_message="--use-precision-aware-optimizer requires FusedAdam from TransformerEngine, but not found."),
    Rule(id="PRECISION_AWARE_OPTIMIZER_NEEDS_TE_1_13", severity="error", when=AWARE & TE_INSTALLED,
         require=AtLeast("transformer_engine", "1.13.0"),
         message="the precision-aware optimizer needs Transformer Engine >= 1.13.0 (FusedAdam's master_weight_dtype, "
                 "exp_avg_dtype, exp_avg_sq_dtype and use_decoupled_grad)", source=f"{OPT}; {FUSED_ADAM}",
         fix=f"use a platform with TE >= 1.13.0, {OFF}",
         megatron_message="Current FusedAdam of TE doesn't support --use-precision-aware-optimizer, please update TE "
                          "version."),
    *[Rule(id=f"OPTIMIZER_BF16_{name.upper()}_NEEDS_TE_2_3", severity="error",
           when=AWARE & TE_INSTALLED & (F(name) == "bfloat16"), require=AtLeast("transformer_engine", "2.3.0"),
           message=f"a BF16 {name} needs Transformer Engine >= 2.3.0 (FusedAdam before it: fp32/fp16/fp8 only)",
           source=FUSED_ADAM, fix=f"use a platform with TE >= 2.3.0, or set optimizer.{name}: float16 or float32",
           megatron_message=None, origin="moeforge")
      for name in ("exp_avg_dtype", "exp_avg_sq_dtype")],
    Rule(id="OPTIMIZER_BF16_MAIN_GRADS_NOT_WITH_FP32_GRAD_REDUCE_IN_MEGATRON_LM", severity="error",
         when=F("bf16").is_(True) & (F("main_grads_dtype") == "bfloat16"),
         require=F("grad_reduce_in_fp32").is_(False),
         message="BF16 main grads cannot come from gradients accumulated and reduced in FP32 (Megatron-LM refuses "
                 "--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32)", source=LM_ARGS,
         fix="set optimizer.grad_reduce_in_fp32: false (as Megatron-Bridge's DeepSeek-V3 recipe does), or "
             "optimizer.main_grads_dtype: float32",
         megatron_message="--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set",
         origin="megatron-lm"),
)
