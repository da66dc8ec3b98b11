"""The canonical knobs: one table from Megatron's field name to its place in a recipe.

Rules, the solver, lint-config and the emitters all speak these names (megatron-core
TransformerConfig / ModelParallelConfig / DDP field names, Megatron-LM training arguments,
and a few moeforge facts), so a rule reads like the Megatron check it mirrors.
"""
from __future__ import annotations

# AUTO, FRONTENDS, BYTE_*, IO_SECTIONS, FACTS: re-exported, the rest of the compiler reads them as K.NAME
from moeforge.compiler.knobs.model import LOAD_BALANCING_TYPES, MODEL_KNOBS  # noqa: F401
from moeforge.compiler.knobs.row import AUTO, FRONTENDS, Form, Knob
from moeforge.compiler.knobs.row import tc as _tc
from moeforge.compiler.knobs.facts import (ACTIVATION_FUNCS, FACT_BY_FIELD, FACTS, FLEX_BACKENDS, GPU_PRODUCTS,  # noqa: F401
                                  gpu_product)
from moeforge.compiler.knobs.training_io import BYTE_EOD, BYTE_VOCAB, EXIT_SIGNAL, IO_KNOBS, IO_SECTIONS, LOGS_DIR_DEFAULT, \
    RESUME_SCHEDULERS

RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")
OFFLOAD_MODULES = ("core_attn", "attn_proj", "expert_fc1", "moe_act", "attn_norm", "mlp_norm", "qkv_linear",
                   "fused_group_mlp")

_K = Knob
# torch dtype names as the plan spells them, and Megatron-LM's spelling of its optimizer dtype arguments
DTYPE_NAMES = ("float32", "bfloat16", "float16")
DTYPE_LM = (("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16"))
OPTIMIZER_PRECISION = ("use_precision_aware_optimizer", "main_grads_dtype", "main_params_dtype", "exp_avg_dtype",
                       "exp_avg_sq_dtype")
V17 = 17_000  # version_int("0.17.0"): megatron-core renamed several fields there


KNOBS: tuple[Knob, ...] = (
    # --- parallel layout -------------------------------------------------------------
    _tc("tensor_model_parallel_size", "parallelism.tp", "int", 1),
    _tc("pipeline_model_parallel_size", "parallelism.pp", "int", 1),
    _tc("virtual_pipeline_model_parallel_size", "parallelism.vpp", "opt_int", None, auto=True, bound="num_layers",
        lm="num_virtual_stages_per_pipeline_rank"),
    _tc("context_parallel_size", "parallelism.cp", "int", 1),
    _tc("expert_model_parallel_size", "parallelism.ep", "int", 1),
    _tc("expert_tensor_parallel_size", "parallelism.etp", "opt_int", None, auto=True,
        doc="None means megatron-core uses TP; Megatron-Bridge sets 1 when EP > 1"),
    _tc("sequence_parallel", "parallelism.sp", "bool", False, auto=True),
    _K("num_nodes", "resources.nodes", "int", 1),
    _K("world_size", None, "opt_int", None, doc="nodes x GPUs per node"),
    _K("data_parallel_size", None, "opt_int", None, doc="world / (TP x CP x PP)"),
    _K("expert_data_parallel_size", None, "opt_int", None, doc="world / (ETP x EP x PP)"),
    # --- training shape and optimizer --------------------------------------------------
    _K("micro_batch_size", "training.micro_batch_size", "int", 1, section="training", bridge="train.micro_batch_size"),
    _K("global_batch_size", "training.global_batch_size", "opt_int", None, section="training",
       bridge="train.global_batch_size",
       form=Form(nullable=False)),
    _K("seq_length", "training.seq_length", "int", 4096, section="training",
       bridge=("model.seq_length", "dataset.seq_length")),  # Bridge asserts the two agree
    _K("train_iters", "training.train_iters", "int", 10, section="training", bridge="train.train_iters"),
    _K("seed", "training.seed", "int", 1234, section="training", bridge="rng.seed",
       form=Form(minimum=0)),
    # the optimizer's numbers live in recipe section `schedule` and in plan section `optimizer` under
    # megatron-core OptimizerConfig names (moeforge.runtime.train passes plan.optimizer to OptimizerConfig)
    _K("lr", "schedule.lr", "float", 1e-4, section="optimizer", bridge="optimizer.lr",
       doc="peak learning rate (OptimizerConfig.lr, Megatron-LM --lr)",
       form=Form(description="Peak learning rate (default 1e-4).", exclusive_minimum=0)),
    _K("min_lr", "schedule.min_lr", "float", 0.0, section="optimizer", bridge="optimizer.min_lr",
       doc="the learning rate the decay ends at (OptimizerConfig.min_lr; Megatron-LM --min-lr: 0.0)",
       form=Form(description="Learning rate at the end of the decay (default 0).", minimum=0)),
    # Bridge's scheduler sets every step's decay from its start/end values (OptimizerParamScheduler; its default
    # is 0.033), as Megatron-LM's does from --weight-decay
    _K("weight_decay", "schedule.weight_decay", "float", 0.01, section="optimizer",
       bridge=("optimizer.weight_decay", "scheduler.start_weight_decay", "scheduler.end_weight_decay"),
       doc="decoupled weight decay (megatron-core OptimizerConfig, Megatron-LM --weight-decay: 0.01)",
       form=Form(description=("Decoupled weight decay (OptimizerConfig.weight_decay, Megatron-LM --weight-decay; "
                              "default 0.01)."), minimum=0)),
    _K("apply_wd_to_qk_layernorm", "schedule.apply_wd_to_qk_layernorm", "bool", False, section="optimizer",
       bridge="optimizer.apply_wd_to_qk_layernorm",
       doc="weight decay on the QK-norm weights too (OptimizerConfig, Megatron-LM --apply-wd-to-qk-layernorm): "
           "Megatron-Bridge's Qwen3-Next recipes set it",
       form=Form(description=("Apply weight decay to the QK-norm weights too "
                              "(OptimizerConfig.apply_wd_to_qk_layernorm, Megatron-LM --apply-wd-to-qk-layernorm; "
                              "default false). Megatron-Bridge's Qwen3-Next recipes set it."))),
    _K("clip_grad", "schedule.clip_grad", "float", 1.0, section="optimizer", bridge="optimizer.clip_grad",
       doc="gradient clipping by global L2 norm",
       form=Form(description=("Clip gradients to this global L2 norm (Megatron-LM --clip-grad; default 1.0; 0 "
                              "disables)."), minimum=0)),
    _K("adam_beta1", "schedule.adam_beta1", "float", 0.9, section="optimizer", bridge="optimizer.adam_beta1",
       form=Form(description="Adam beta1 (default 0.9).", minimum=0, exclusive_maximum=1)),
    _K("adam_beta2", "schedule.adam_beta2", "float", 0.999, section="optimizer", bridge="optimizer.adam_beta2",
       form=Form(description="Adam beta2 (default 0.999).", minimum=0, exclusive_maximum=1)),
    _K("adam_eps", "schedule.adam_eps", "float", 1e-8, section="optimizer", bridge="optimizer.adam_eps",
       form=Form(description="Adam epsilon (default 1e-8).", exclusive_minimum=0)),
    _K("grad_reduce_in_fp32", "optimizer.grad_reduce_in_fp32", "bool", False, auto=True, section="ddp",
       lm="accumulate_allreduce_grads_in_fp32", bridge="mixed_precision.grad_reduce_in_fp32",
       doc="accumulate and reduce gradients in fp32 (megatron-core DDP)",
       form=Form(description=("Accumulate and reduce gradients in FP32 (megatron-core DDP grad_reduce_in_fp32). auto: "
                              "true with BF16, as Megatron-LM and Megatron-Bridge do; false with BF16 writes "
                              "--grad-reduce-in-bf16."))),
    # --- precision -------------------------------------------------------------------
    _tc("bf16", None, "bool", False, doc="from precision.dtype", bridge="mixed_precision.bf16"),
    _tc("fp16", None, "bool", False, doc="from precision.dtype", bridge="mixed_precision.fp16"),
    _tc("fp8", "precision.fp8", "enum", None, (None, "e4m3", "hybrid"), bridge="mixed_precision.fp8",
        form=Form(values=("e4m3", "hybrid", None))),
    _tc("fp8_recipe", "precision.fp8_recipe", "enum", "delayed",
        ("delayed", "tensorwise", "mxfp8", "blockwise", "custom"), bridge="mixed_precision.fp8_recipe"),
    _tc("fp4", "precision.fp4", "enum", None, (None, "e2m1"), bridge="mixed_precision.fp4",
        form=Form(values=("e2m1", None))),
    _tc("fp4_recipe", "precision.fp4_recipe", "enum", "nvfp4", ("nvfp4", "custom"),
        bridge="mixed_precision.fp4_recipe"),
    # Bridge's MixedPrecisionConfig keeps *_param and *_param_gather in step (__setattr__): its __init__ sets
    # *_param_gather after *_param, so a *_param given alone is reset to the gather's default
    _tc("fp8_param", "precision.fp8_param", "bool", False, lm="fp8_param_gather",
        bridge=("mixed_precision.fp8_param", "mixed_precision.fp8_param_gather")),
    _tc("fp4_param", "precision.fp4_param", "bool", False, lm="fp4_param_gather",
        bridge=("mixed_precision.fp4_param", "mixed_precision.fp4_param_gather")),
    # DDP and OptimizerConfig both read it (plan: ddp, copied to optimizer); Bridge's MixedPrecisionConfig sets both
    _K("reuse_grad_buf_for_mxfp8_param_ag", "precision.reuse_grad_buf_for_mxfp8_param_ag", "bool", False, auto=True,
       section="ddp", bridge="mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
       doc="MXFP8 parameters all-gathered through the gradient buffer (Megatron-LM --reuse-grad-buf-for-mxfp8-param-"
           "ag): Megatron-Bridge requires it with FP8 parameters under MXFP8, and its MXFP8 presets set it",
       form=Form(description=("All-gather MXFP8 parameters through the gradient buffer (DDP and OptimizerConfig "
                              "reuse_grad_buf_for_mxfp8_param_ag, Megatron-LM --reuse-grad-buf-for-mxfp8-param-ag). "
                              "Needs fp8_param; Megatron-Bridge requires it with fp8_param under MXFP8. auto: on "
                              "exactly then."))),
    _tc("moe_router_dtype", "moe.router.dtype", "enum", None, (None, "fp32", "fp64"),
        form=Form(values=("fp32", "fp64", None))),
    *MODEL_KNOBS,  # the model document's: architecture, MoE, GPTModel arguments (compiler/knobs/model.py)
    # --- MoE dispatch and overlap ----------------------------------------------------
    _tc("moe_token_dispatcher_type", "moe.dispatcher", "enum", "allgather",
        ("allgather", "alltoall", "flex"), auto=True),
    _tc("moe_flex_dispatcher_backend", "moe.flex_backend", "enum", "deepep",
        (None, "deepep", "hybridep", "ncclep"), auto=True,
        form=Form(values=("deepep", "hybridep", "ncclep", None))),
    _tc("moe_flex_dispatcher_num_sms", "moe.flex_num_sms", "opt_int", None, auto=True,
        names=((0, "moe_{backend}_num_sms"), (V17, "moe_flex_dispatcher_num_sms")),
        doc="0.16: moe_deepep_num_sms (20) / moe_hybridep_num_sms (16)",
        form=Form(maximum=256)),
    _K("hybridep_ranks_per_nvlink_domain", "moe.hybridep_ranks_per_nvlink_domain", "opt_int", None,
       auto=True, doc="NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"),
    _tc("overlap_moe_expert_parallel_comm", "moe.overlap.ep_comm", "bool", False, auto=True,
        bridge="model.overlap_moe_expert_parallel_comm"),
    _tc("delay_wgrad_compute", "moe.overlap.delay_wgrad", "bool", False, auto=True,
        bridge=("model.delay_wgrad_compute", "ddp.delay_wgrad_compute")),
    _tc("moe_shared_expert_overlap", "moe.overlap.shared_expert", "bool", False, auto=True),
    _tc("moe_router_force_load_balancing", "moe.router.force_load_balancing", "bool", False),
    _tc("moe_permute_fusion", "moe.permute_fusion", "bool", False),
    _tc("moe_grouped_gemm", "moe.grouped_gemm", "bool", False),
    _tc("moe_pad_expert_input_to_capacity", "moe.pad_expert_input_to_capacity", "bool", False),
    _tc("moe_expert_capacity_factor", "moe.expert_capacity_factor", "float", None,
        form=Form(exclusive_minimum=0)),
    _tc("moe_router_padding_for_quantization", "moe.router.padding_for_quantization", "bool", False),
    _tc("moe_expert_rank_capacity_factor", "moe.expert_rank_capacity_factor", "float", None,
        doc="megatron-core 0.18+: per-rank token budget (hybridep; 0.19 also ncclep)",
        form=Form(exclusive_minimum=0)),
    _tc("overlap_dispatch_backward_with_experts_wgrad", "moe.overlap.dispatch_backward_with_wgrad", "bool", False,
        doc="megatron-core 0.18+; the alternative to EP overlap + delayed wgrad"),
    _tc("ep_overlap_early_attn_memory_release", "moe.overlap.early_attn_memory_release", "bool", False),
    _tc("use_transformer_engine_op_fuser", "training.te_op_fuser", "bool", False,
        doc="megatron-core 0.18+"),
    # --- kernels and numerics that Megatron-LM's defaults change ---------------------------
    # megatron-core defaults them off (True for the fp32 softmax); Megatron-LM turns the fusions on.
    # The plan states each, so both front-ends build the same thing.
    _tc("bias_activation_fusion", "kernels.bias_activation_fusion", "bool", False, auto=True, lm=None,
        doc="Megatron-LM: --no-bias-swiglu-fusion / --no-bias-gelu-fusion, by activation",
        form=Form(description=("Fused bias + activation (TransformerConfig.bias_activation_fusion; Megatron-LM "
                               "--no-bias-swiglu-fusion / --no-bias-gelu-fusion)."))),
    _tc("masked_softmax_fusion", "kernels.masked_softmax_fusion", "bool", False, auto=True,
        form=Form(description=("Fused scale-mask-softmax (masked_softmax_fusion; Megatron-LM "
                               "--no-masked-softmax-fusion)."))),
    _tc("bias_dropout_fusion", "kernels.bias_dropout_fusion", "bool", False, auto=True,
        form=Form(description=("Fused bias + dropout + add (bias_dropout_fusion; Megatron-LM "
                               "--no-bias-dropout-fusion)."))),
    _tc("apply_rope_fusion", "kernels.apply_rope_fusion", "bool", False, auto=True,
        form=Form(description=("Fused RoPE kernel from Transformer Engine (apply_rope_fusion; Megatron-LM "
                               "--no-rope-fusion)."))),
    _tc("persist_layer_norm", "kernels.persist_layer_norm", "bool", False, lm=None,
        doc="Megatron-LM: --no-persist-layer-norm (Apex's persistent LayerNorm kernel)",
        form=Form(description=("Apex's persistent LayerNorm kernel (persist_layer_norm; Megatron-LM "
                               "--no-persist-layer-norm). Default false: needs Apex."))),
    _tc("attention_softmax_in_fp32", "kernels.attention_softmax_in_fp32", "bool", True,
        form=Form(description=("Attention softmax in FP32 (megatron-core default true; Megatron-LM "
                               "--attention-softmax-in-fp32, default false)."))),
    _tc("cross_entropy_loss_fusion", "kernels.cross_entropy_loss_fusion", "bool", False,
        form=Form(description=("Fused cross-entropy loss (TransformerConfig.cross_entropy_loss_fusion; Megatron-LM "
                               "--cross-entropy-loss-fusion). Default false."))),
    _tc("cross_entropy_fusion_impl", "kernels.cross_entropy_fusion_impl", "enum", "native", ("native", "te"),
        form=Form(description="Implementation of the fused cross entropy (native or te).")),
    _tc("moe_router_fusion", "kernels.moe_router_fusion", "bool", False, doc="Transformer Engine's fused router",
        form=Form(description="Transformer Engine's fused MoE router (moe_router_fusion). Default false.")),
    _tc("calculate_per_token_loss", "training.calculate_per_token_loss", "bool", False,
        doc="average the loss over all tokens of the global batch instead of per micro-batch",
        form=Form(description=("Average the loss over every token of the global batch rather than per micro-batch "
                               "(calculate_per_token_loss; default false)."))),
    _tc("first_last_layers_bf16", "precision.first_last_layers_bf16", "bool", False,
        bridge=("mixed_precision.first_last_layers_bf16",), doc="keep the first/last layers in BF16 under FP8/FP4",
        form=Form(description="Keep the first and last layers in BF16 under FP8/FP4 (first_last_layers_bf16).")),
    _tc("num_layers_at_start_in_bf16", "precision.num_layers_at_start_in_bf16", "int", 1,
        bridge=("mixed_precision.num_layers_at_start_in_bf16",),
        form=Form(description="With first_last_layers_bf16: how many leading layers stay BF16 (default 1).",
                  minimum=0)),
    _tc("num_layers_at_end_in_bf16", "precision.num_layers_at_end_in_bf16", "int", 1,
        bridge=("mixed_precision.num_layers_at_end_in_bf16",),
        form=Form(description="With first_last_layers_bf16: how many trailing layers stay BF16 (default 1).",
                  minimum=0)),
    _tc("attention_backend", "kernels.attention_backend", "enum", "auto",
        ("auto", "flash", "fused", "unfused", "local"),
        doc="megatron-core AttnBackend; Megatron-Bridge's providers leave it None (Transformer Engine chooses)",
        form=Form(description=("megatron-core's attention backend (TransformerConfig.attention_backend; Megatron-LM "
                               "--attention-backend): auto lets Transformer Engine choose. Default auto."))),
    _tc("cp_comm_type", "parallelism.cp_comm_type", "enum", "p2p", ("p2p", "a2a", "allgather", "a2a+p2p"),
        doc="megatron-core's None means p2p; stated as Megatron-LM states it (--cp-comm-type p2p)",
        form=Form(description=("Context-parallel communication (TransformerConfig.cp_comm_type; Megatron-LM "
                               "--cp-comm-type; default p2p)."))),
    # --- recompute -------------------------------------------------------------------
    _tc("recompute_granularity", "recompute.granularity", "enum", None, (None, "full", "selective"),
        form=Form(values=("full", "selective", None))),
    _tc("recompute_method", "recompute.method", "enum", None, (None, "uniform", "block"),
        form=Form(values=("uniform", "block", None))),
    _tc("recompute_num_layers", "recompute.num_layers", "opt_int", None, bound="num_layers"),
    _tc("recompute_modules", "recompute.modules", "set", None, RECOMPUTE_MODULES),
    _tc("fine_grained_activation_offloading", "recompute.offload.enabled", "bool", False),
    _tc("offload_modules", "recompute.offload.modules", "set", None, OFFLOAD_MODULES),
    # --- CUDA graphs -----------------------------------------------------------------
    _tc("cuda_graph_impl", "cuda_graph.impl", "enum", "none",
        ("none", "local", "transformer_engine", "full_iteration"), auto=True),
    _tc("cuda_graph_modules", "cuda_graph.modules", "set", None, CUDA_GRAPH_MODULES, auto=True,
        names=((0, "cuda_graph_scope"), (V17, "cuda_graph_modules")),
        doc="megatron-core < 0.18 names it cuda_graph_scope"),
    _tc("use_te_rng_tracker", "cuda_graph.te_rng_tracker", "bool", False, auto=True, lm="te_rng_tracker",
        bridge=("model.use_te_rng_tracker", "rng.te_rng_tracker"),
        doc="Megatron-Bridge requires it for any CUDA graph; Megatron-LM turns it on with a warning"),
    # --- TP / PP / DP overlap --------------------------------------------------------
    _tc("tp_comm_overlap", "overlap.tp_comm", "bool", False, auto=True, bridge="model.tp_comm_overlap"),
    _tc("overlap_p2p_comm", "overlap.p2p", "bool", False, auto=True, bridge="model.overlap_p2p_comm",
        # Megatron-LM 0.19 arguments.py: --no-overlap-p2p-communication, store_false (default True)
        frontend_defaults=(("megatron-lm", True),)),
    _K("overlap_grad_reduce", "overlap.grad_reduce", "bool", False, auto=True, section="ddp",
       bridge="ddp.overlap_grad_reduce"),
    _K("overlap_param_gather", "overlap.param_gather", "bool", False, auto=True, section="ddp",
       bridge=("ddp.overlap_param_gather", "optimizer.overlap_param_gather")),
    _K("use_distributed_optimizer", "optimizer.distributed", "bool", False, auto=True, section="ddp",
       bridge="ddp.use_distributed_optimizer"),
    _tc("gradient_accumulation_fusion", "training.gradient_accumulation_fusion", "bool", False, auto=True,
        # Megatron-LM 0.19 arguments.py: --no-gradient-accumulation-fusion, store_false (default True)
        frontend_defaults=(("megatron-lm", True),)),
    _K("use_megatron_fsdp", "optimizer.megatron_fsdp", "bool", False,
       form=Form(description=("Megatron-FSDP is not planned yet: the plan, megatron-lm.args, bridge.overrides and the "
                              "runtime build megatron-core's DDP (with the distributed optimizer where "
                              "optimizer.distributed says so), and Megatron-FSDP also needs its checkpoint format "
                              "(fsdp_dtensor), its sharding strategy and its own wrapper; remove "
                              "optimizer.megatron_fsdp or set it false."), values=(False,))),
    # DDP and optimizer fields the plan states (derived: no recipe path; compiler/targets/plan.py megatron_view), so that
    # no front-end's own default or recipe stands in for them: Megatron-LM builds both configs from its
    # arguments (training.py get_model / get_megatron_optimizer_config), and Megatron-Bridge's recipes set some
    # (several average in the collective)
    _K("align_param_gather", None, "bool", False, section="ddp", lm=None, bridge="ddp.align_param_gather",
       doc="Megatron-LM derives it (validate_args: on for the interleaved schedule, off otherwise), as "
           "Megatron-Bridge's CommOverlapConfig does; the param all-gathers of all pipeline stages start together"),
    _K("average_in_collective", None, "bool", False, section="ddp", lm="ddp_average_in_collective",
       bridge="ddp.average_in_collective", doc="average the gradients inside the reduce collective: off, the "
                                               "default of megatron-core and Megatron-LM"),
    # the precision-aware optimizer (Transformer Engine's FusedAdam): lower-precision main grads, master weights
    # and Adam moments, as Megatron-Bridge's DeepSeek-V3 recipe runs it (BF16 main grads and moments); each dtype's
    # domain is what Megatron-LM's argument accepts (--main-grads-dtype fp32|bf16, --main-params-dtype fp32|fp16;
    # the moments' fp8 is left out)
    _K("use_precision_aware_optimizer", "optimizer.precision_aware", "bool", False, section="optimizer",
       bridge="optimizer.use_precision_aware_optimizer",
       doc="Transformer Engine's FusedAdam keeps main grads, master weights and Adam moments in the dtypes below "
           "(OptimizerConfig, Megatron-LM --use-precision-aware-optimizer; off by default)",
       form=Form(description=("Transformer Engine's precision-aware FusedAdam "
                              "(OptimizerConfig.use_precision_aware_optimizer, Megatron-LM "
                              "--use-precision-aware-optimizer; default false): keeps main grads, master weights and "
                              "Adam moments in the dtypes below. Needs the distributed optimizer and Transformer "
                              "Engine >= 1.13 (BF16 moments: >= 2.3). Megatron-Bridge's DeepSeek-V3 recipe runs it "
                              "with BF16 main grads and moments."))),
    *(_K(name, f"optimizer.{name}", "enum", "float32", domain, section="optimizer", bridge=f"optimizer.{name}",
         lm_values=DTYPE_LM, doc=f"{what}; float32 unless optimizer.precision_aware (megatron-core requires it)",
         form=Form(description=f"dtype of {what} (Megatron-LM --{name.replace('_', '-')}{more}); float32 (the "
                               "default) unless precision_aware is true."))
      for name, domain, what, more in (
          ("main_grads_dtype", ("float32", "bfloat16"), "the main gradients the optimizer reads",
           "; bfloat16 reduces BF16 gradients in BF16"),
          ("main_params_dtype", ("float32", "float16"), "the master weights", ""),
          ("exp_avg_dtype", DTYPE_NAMES, "Adam's first moment", ""),
          ("exp_avg_sq_dtype", DTYPE_NAMES, "Adam's second moment", ""))),
    *IO_KNOBS,  # training I/O: entry point, data, tokenizer, checkpoints, LR schedule, logging, eval
    # --- launch (rendered by the launch templates; not in the plan) ------------------------------
    _K("logs_dir", "launch.logs_dir", "str", None, lm=None, bridge=None,
       doc=f"where the launchers write logs; null: {LOGS_DIR_DEFAULT} (moeforge.compiler.targets.emit.launch_settings)",
       form=Form(description="Where the launchers write logs (default logs/<recipe name>).", min_length=1,
                 max_length=1024, nullable=False, default_text="logs/<recipe name>")),
    _K("signal_margin_s", "launch.signal_margin_s", "int", 120, lm=None, bridge=None, unit="seconds",
       doc=f"Slurm sends {EXIT_SIGNAL} this long before the time limit (sbatch --signal)",
       form=Form(description=("Seconds before the time limit at which Slurm sends SIGUSR1 (Megatron-LM then saves a "
                              "checkpoint and exits); default 120."), minimum=0, maximum=65535)),
    _K("exclusive", "launch.exclusive", "bool", None, lm=None, bridge=None,
       doc="whole nodes (sbatch --exclusive); default true on a GPU platform (DEPENDENT_DEFAULTS)",
       form=Form(description="Take whole nodes (sbatch --exclusive); default true on a GPU platform.")),
    # --- checks (what moeforge itself does with a finding; not in the plan) ---------------------------
    _K("hazards", "hazards", "enum", "warn", ("warn", "error"), lm=None, bridge=None,
       doc="a pinned combination that matches a field hazard (moeforge.compiler.rules.hazards) whose versions apply: "
           "warn, or error (as --strict does; for CI)",
       form=Form(description=("What a pinned combination matching a known field hazard (NaN, hang, crash, wrong "
                              "result) is: warn (default) or error, as --strict makes it. `moeforge hazards RECIPE` "
                              "lists them."))),
    # --- lint-config only --------------------------------------------------------------
    # Megatron fields a recipe cannot set (deprecated spellings, list/str-valued layout
    # knobs). lint-config reads them; for recipes the rules see megatron-core's default
    # (moeforge.compiler.rules specialises the catalogue), see LINT_ONLY below.
    _K("moe_layer_freq", None, "int", 1,  # computed for recipes from model.moe.layer_freq
       doc="int N: every Nth layer is MoE; lint-config reads a list as 1 (all MoE) or 2 (some dense)"),
    _tc("pipeline_model_parallel_layout", "parallelism.pipeline_layout", "str", None,
        doc="uneven pipeline layout, e.g. Et|(tt|)*30mL",
        form=Form(min_length=1, max_length=4096, pattern="[A-Za-z0-9|()*+,\\[\\] ]+")),
    _tc("num_layers_in_first_pipeline_stage", "parallelism.first_stage_layers", "opt_int", None, bound="num_layers",
        lm="decoder_first_pipeline_num_layers"),
    _tc("num_layers_in_last_pipeline_stage", "parallelism.last_stage_layers", "opt_int", None, bound="num_layers",
        lm="decoder_last_pipeline_num_layers"),
    _tc("account_for_embedding_in_pipeline_split", "parallelism.account_for_embedding", "bool", False),
    _tc("account_for_loss_in_pipeline_split", "parallelism.account_for_loss", "bool", False),
    _K("moe_enable_deepep", None, "bool", False, doc="deprecated: flex + moe_flex_dispatcher_backend=deepep"),
    _K("moe_deepep_num_sms", None, "opt_int", None, doc="0.16-0.18: int, default 20; 0.19: deprecated"),
    _K("moe_hybridep_num_sms", None, "opt_int", None, doc="0.16-0.17: int, default 16; 0.19: deprecated"),
    _K("enable_cuda_graph", None, "bool", False, doc="deprecated: cuda_graph_impl=local"),
    _K("external_cuda_graph", None, "bool", False, doc="deprecated: cuda_graph_impl=transformer_engine"),
    _K("cuda_graph_scope", None, "set", None, CUDA_GRAPH_MODULES,
       doc="megatron-core < 0.18 name of cuda_graph_modules (lint-config maps it)"),
    _K("moe_use_legacy_grouped_gemm", None, "bool", False, doc="megatron-core 0.16 only"),
    _K("moe_router_padding_for_fp8", None, "bool", False, doc="deprecated: moe_router_padding_for_quantization"),
    _K("variable_seq_lengths", None, "bool", False),
    _K("fine_grained_offloading_max_inflight_offloads", None, "opt_int", None,
       doc="0.19: the offloads in flight under a full-iteration CUDA graph (no recipe setting)"),
    *(_K(f"{q}_quantizer_factory", None, "str", None, doc=f"the Python import path of a custom {q.upper()} recipe's "
         "quantizer factory: neither Megatron-LM 0.19 nor Megatron-Bridge has an argument for it")
      for q in ("fp8", "fp4")),
)

BY_FIELD: dict[str, Knob] = {k.field: k for k in KNOBS}
BY_PATH: dict[str, Knob] = {k.path: k for k in KNOBS if k.path}

# Knobs without a recipe path that the compiler still fills in for a recipe: bf16/fp16
# from precision.dtype, the world and data-parallel sizes from resources and layout, and what the
# training-I/O values imply (moeforge.compiler.solver.inputs.derived_pins).
COMPUTED = frozenset({"bf16", "fp16", "world_size", "data_parallel_size", "expert_data_parallel_size",
                      "moe_layer_freq", "tokenizer_vocab_size", "null_tokenizer_eod_id", "use_persistent_ckpt_worker",
                      "exit_signal_handler", "exit_signal", "lr_warmup_fraction", *RESUME_SCHEDULERS.values()} - {None})
# Defaults that depend on other values: field -> (values, recipe name) -> default. `values` holds every
# other knob's value and the platform facts.
DEPENDENT_DEFAULTS = {
    "data_kind": lambda v, name: "mock" if v.get("entrypoint") == "megatron-lm" else "synthetic",
    "ckpt_load": lambda v, name: "auto" if v.get("save") is not None else "none",
    "exclusive": lambda v, name: v.get("device") == "cuda",
}
# Enum knobs whose domain lists keywords; any other string is a path (checkpoint.load: auto | none | DIR).
OPEN_ENUMS = frozenset({"ckpt_load"})
# Knobs holding paths (or, for data_blend, [{weight, path}]): a ${VAR} in them is kept literally and
# resolved at launch, and named in a compile-time warning (rule PATH_ENV_VARS_RESOLVED_AT_LAUNCH).
PATH_FIELDS = ("data_paths", "data_blend", "data_cache_path", "tokenizer_path", "save", "ckpt_load",
               "tensorboard_dir", "logs_dir")
# Megatron fields only lint-config reads; a recipe always has megatron-core's default for the rules. The plan's
# derived DDP rows (align_param_gather, average_in_collective: no recipe path) fall in here too; no rule reads them.
LINT_ONLY = frozenset(k.field for k in KNOBS if k.path is None and k.field not in COMPUTED)


def knob(field: str) -> Knob:
    """A knob by field name for code that names one (megatron_args, bridge_overrides): a typo is a KeyError."""
    return BY_FIELD[field]


def effective(field: str, values: dict):
    """The knob's value in ``values`` (plan fields), or what megatron-core derives when it is unset."""
    value = values.get(field)
    return value if value is not None else BY_FIELD[field].derived(values.get)


# Fields only an attention variant reads, by the plan field that turns it on (a GPTModelProvider has no MLA
# fields, Megatron-LM refuses --rope-type yarn without MLA; the linear-attention sizes are read by
# experimental_attention_variant's layers only): the emitters write them only when the variant is in use.
VARIANT_ONLY = {
    **dict.fromkeys(("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rope_type",
                     "rotary_scaling_factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
                     "mscale_all_dim"), "multi_latent_attention"),
    **dict.fromkeys(("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                     "linear_num_value_heads"), "experimental_attention_variant"),
}

# MLATransformerConfig's own defaults (megatron-core 0.16-0.19) that an MLA plan states when the model document
# leaves them unset: Megatron-LM's flags default otherwise (--kv-lora-rank 32, --rotary-scaling-factor 1.0) and
# Bridge's override would be null
MLA_DEFAULTS = {"kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128,
                "rope_type": "yarn", "rotary_scaling_factor": 40.0, "original_max_position_embeddings": 4096,
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}
# YarnRotaryEmbedding's defaults, which a YaRN plan (ordinary attention) states for the yarn_* config attributes
# the model document leaves unset: GPTModel reads them off the config with no default of its own (moeforge's
# runtime would fail), Megatron-LM fills these in (argument_utils._apply_yarn_config_from_args) and Bridge's
# provider would leave None
YARN_DEFAULTS = {"yarn_rotary_scaling_factor": 1.0, "yarn_original_max_position_embeddings": 4096,
                 "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0, "yarn_mscale": 1.0, "yarn_mscale_all_dim": 0.0,
                 "yarn_correction_range_round_to_int": True}

# Megatron-LM's activation flags as megatron-core's (activation_func, gated_linear_unit); no flag: GELU, not gated
# (megatron/training/argument_utils.py core_transformer_config_from_args)
LM_ACTIVATIONS = {"swiglu": ("silu", True), "quick_geglu": ("quick_gelu", True),
                  "squared_relu": ("squared_relu", False)}


def mlp_activation(arch: dict) -> tuple[str, bool] | None:
    """(activation_func, gated_linear_unit) that a model document's architecture states, or None when it
    names no activation (megatron-core's defaults, gelu and not gated, hold).  swiglu is silu, gated."""
    activation = arch.get("activation")
    if not activation:
        return None
    return ("silu" if activation == "swiglu" else activation,
            activation == "swiglu" or bool(arch.get("gated_linear_unit")))


def architecture_activation(func: str, gated: bool) -> dict:
    """mlp_activation's inverse: the architecture entries for megatron-core's (activation_func,
    gated_linear_unit)."""
    return {"activation": "swiglu"} if (func, gated) == ("silu", True) else {"activation": func,
                                                                               "gated_linear_unit": bool(gated)}
