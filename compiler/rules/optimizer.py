"""The optimizer's precision: Transformer Engine's precision-aware FusedAdam.

megatron-core OptimizerConfig.__post_init__ (lower-precision main grads, master weights or
moments only with the precision-aware optimizer; that only with Adam, the distributed optimizer
and a FusedAdam of Transformer Engine whose signature takes the dtypes, TE >= 1.13), Megatron-LM's
validate_args (BF16 main grads only without FP32 gradient accumulation), and Transformer Engine's
FusedAdam itself (BF16 moments from TE 2.3 on).
"""
from compiler.rules import Rule
from compiler.rules.expr import F, AtLeast, TE_INSTALLED

OPT = "megatron-core optimizer/optimizer_config.py OptimizerConfig.__post_init__"
LM_ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
FUSED_ADAM = "Transformer Engine pytorch/optimizers/fused_adam.py FusedAdam.__init__"
AWARE = F("use_precision_aware_optimizer") == True  # noqa: E712
OFF = "or set optimizer.precision_aware: false"

TRAINING_ONLY = True  # the optimizer exists only in a training run (an inference launch builds none)

RULES = (
    *[Rule(f"OPTIMIZER_{name.upper()}_FP32_WITHOUT_PRECISION_AWARE", "error", F(name) != "float32", AWARE,
           f"{name} other than float32 needs the precision-aware optimizer", OPT,
           f"set optimizer.precision_aware: true, or optimizer.{name}: float32",
           f"{name} can only be fp32 when not using precision-aware optimizer")
      for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")],
    Rule("PRECISION_AWARE_OPTIMIZER_NEEDS_DISTRIBUTED_OPTIMIZER", "error", AWARE,
         F("use_distributed_optimizer") == True,  # noqa: E712
         "the precision-aware optimizer needs the distributed optimizer", OPT,
         f"set optimizer.distributed: true, {OFF}",
         "--use-precision-aware-optimizer only supported with distributed optimizer"),
    Rule("PRECISION_AWARE_OPTIMIZER_NEEDS_TE", "error", AWARE, TE_INSTALLED,
         "the precision-aware optimizer is Transformer Engine's FusedAdam", OPT,
         f"use a platform with Transformer Engine, {OFF}",
         "--use-precision-aware-optimizer requires FusedAdam from TransformerEngine, but not found."),
    Rule("PRECISION_AWARE_OPTIMIZER_NEEDS_TE_1_13", "error", AWARE & TE_INSTALLED,
         AtLeast("transformer_engine", "1.13.0"),
         "the precision-aware optimizer needs Transformer Engine >= 1.13.0 (FusedAdam's master_weight_dtype, "
         "exp_avg_dtype, exp_avg_sq_dtype and use_decoupled_grad)", f"{OPT}; {FUSED_ADAM}",
         f"use a platform with TE >= 1.13.0, {OFF}",
         "Current FusedAdam of TE doesn't support --use-precision-aware-optimizer, please update TE version."),
    *[Rule(f"OPTIMIZER_BF16_{name.upper()}_NEEDS_TE_2_3", "error",
           AWARE & TE_INSTALLED & (F(name) == "bfloat16"), AtLeast("transformer_engine", "2.3.0"),
           f"a BF16 {name} needs Transformer Engine >= 2.3.0 (FusedAdam before it: fp32/fp16/fp8 only)",
           FUSED_ADAM, f"use a platform with TE >= 2.3.0, or set optimizer.{name}: float16 or float32",
           None, origin="moeforge")
      for name in ("exp_avg_dtype", "exp_avg_sq_dtype")],
    Rule("OPTIMIZER_BF16_MAIN_GRADS_NOT_WITH_FP32_GRAD_REDUCE_IN_MEGATRON_LM", "error",
         (F("bf16") == True) & (F("main_grads_dtype") == "bfloat16"),  # noqa: E712
         F("grad_reduce_in_fp32") == False,  # noqa: E712
         "BF16 main grads cannot come from gradients accumulated and reduced in FP32 (Megatron-LM refuses "
         "--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32)", LM_ARGS,
         "set optimizer.grad_reduce_in_fp32: false (as Megatron-Bridge's DeepSeek-V3 recipe does), or "
         "optimizer.main_grads_dtype: float32",
         "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set",
         origin="megatron-lm"),
)
