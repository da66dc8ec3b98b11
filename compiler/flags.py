"""Canonical knob -> where it goes in each target, per megatron-core version.

One row per knob: the section of the plan it lands in (TransformerConfig, DDP config,
optimizer, training), its TransformerConfig field name by version, and the Megatron-Bridge
override path. Megatron-LM flags follow from the TransformerConfig name and Megatron-LM's
own per-release flag list (compiler/megatron_args.py). Templates never decide names.
"""
from __future__ import annotations

from dataclasses import dataclass

from .rules.expr import version_int

V17 = version_int("0.17.0")


@dataclass(frozen=True)
class Target:
    section: str                       # tc | ddp | optimizer | training | env | none
    tc: tuple = ()                     # ((min_mcore, name), ...) newest last
    bridge: str | None = None          # Megatron-Bridge override path

    def tc_name(self, mcore: int) -> str | None:
        return _pick(self.tc, mcore)


def _pick(table: tuple, mcore: int):
    chosen = None
    for since, name in table:
        if mcore >= since:
            chosen = name
    return chosen


def _tc(name):
    return Target("tc", ((0, name),), f"model.{name}")


TABLE: dict[str, Target] = {
    "tensor_model_parallel_size": _tc("tensor_model_parallel_size"),
    "pipeline_model_parallel_size": _tc("pipeline_model_parallel_size"),
    "virtual_pipeline_model_parallel_size": Target(
        "tc", ((0, "virtual_pipeline_model_parallel_size"),), "model.virtual_pipeline_model_parallel_size"),
    "context_parallel_size": _tc("context_parallel_size"),
    "expert_model_parallel_size": _tc("expert_model_parallel_size"),
    "expert_tensor_parallel_size": _tc("expert_tensor_parallel_size"),
    "sequence_parallel": _tc("sequence_parallel"),
    "bf16": _tc("bf16"),
    "fp16": _tc("fp16"),
    "fp8": Target("tc", ((0, "fp8"),), "model.fp8"),
    "fp8_recipe": _tc("fp8_recipe"),
    "fp4": Target("tc", ((0, "fp4"),), "model.fp4"),
    "fp4_recipe": _tc("fp4_recipe"),
    "moe_router_dtype": _tc("moe_router_dtype"),
    "moe_token_dispatcher_type": _tc("moe_token_dispatcher_type"),
    "moe_flex_dispatcher_backend": _tc("moe_flex_dispatcher_backend"),
    # 0.16 has one SM knob per backend; 0.17+ folds them (the emitter picks by backend)
    "moe_flex_dispatcher_num_sms": Target(
        "tc", ((0, "moe_{backend}_num_sms"), (V17, "moe_flex_dispatcher_num_sms")),
        "model.moe_flex_dispatcher_num_sms"),
    "overlap_moe_expert_parallel_comm": Target(
        "tc", ((0, "overlap_moe_expert_parallel_comm"),),
        "comm_overlap.overlap_moe_expert_parallel_comm"),
    "delay_wgrad_compute": Target(
        "tc", ((0, "delay_wgrad_compute"),), "comm_overlap.delay_wgrad_compute"),
    "moe_shared_expert_overlap": _tc("moe_shared_expert_overlap"),
    "moe_router_force_load_balancing": _tc("moe_router_force_load_balancing"),
    "moe_permute_fusion": _tc("moe_permute_fusion"),
    "moe_grouped_gemm": _tc("moe_grouped_gemm"),
    "moe_pad_expert_input_to_capacity": _tc("moe_pad_expert_input_to_capacity"),
    "moe_expert_capacity_factor": _tc("moe_expert_capacity_factor"),
    "recompute_granularity": _tc("recompute_granularity"),
    "recompute_method": _tc("recompute_method"),
    "recompute_num_layers": _tc("recompute_num_layers"),
    "recompute_modules": _tc("recompute_modules"),
    "cuda_graph_impl": _tc("cuda_graph_impl"),
    "cuda_graph_modules": Target(
        "tc", ((0, "cuda_graph_scope"), (V17, "cuda_graph_modules")), "model.cuda_graph_modules"),
    "tp_comm_overlap": Target("tc", ((0, "tp_comm_overlap"),),
                              "comm_overlap.tp_comm_overlap"),
    "overlap_p2p_comm": Target("tc", ((0, "overlap_p2p_comm"),),
                               "comm_overlap.overlap_p2p_comm"),
    "gradient_accumulation_fusion": Target(
        "tc", ((0, "gradient_accumulation_fusion"),),
        "model.gradient_accumulation_fusion"),
    "fp8_param": _tc("fp8_param"),
    "fp4_param": _tc("fp4_param"),
    "moe_router_padding_for_quantization": _tc("moe_router_padding_for_quantization"),
    "moe_expert_rank_capacity_factor": _tc("moe_expert_rank_capacity_factor"),
    "overlap_dispatch_backward_with_experts_wgrad": _tc("overlap_dispatch_backward_with_experts_wgrad"),
    "ep_overlap_early_attn_memory_release": _tc("ep_overlap_early_attn_memory_release"),
    "use_transformer_engine_op_fuser": _tc("use_transformer_engine_op_fuser"),
    "fine_grained_activation_offloading": _tc("fine_grained_activation_offloading"),
    "offload_modules": _tc("offload_modules"),
    "use_te_rng_tracker": _tc("use_te_rng_tracker"),
    "pipeline_model_parallel_layout": _tc("pipeline_model_parallel_layout"),
    "num_layers_in_first_pipeline_stage": _tc("num_layers_in_first_pipeline_stage"),
    "num_layers_in_last_pipeline_stage": _tc("num_layers_in_last_pipeline_stage"),
    "account_for_embedding_in_pipeline_split": _tc("account_for_embedding_in_pipeline_split"),
    "account_for_loss_in_pipeline_split": _tc("account_for_loss_in_pipeline_split"),
    "overlap_grad_reduce": Target("ddp", (), "ddp.overlap_grad_reduce"),
    "overlap_param_gather": Target("ddp", (), "ddp.overlap_param_gather"),
    "use_distributed_optimizer": Target("ddp", (),
                                        "ddp.use_distributed_optimizer"),
    "micro_batch_size": Target("training", (), "train.micro_batch_size"),
    "global_batch_size": Target("training", (), "train.global_batch_size"),
    "seq_length": Target("training", (), "model.seq_length"),
    "train_iters": Target("training", (), "train.train_iters"),
    "seed": Target("training", (), "rng.seed"),
    "lr": Target("optimizer", (), "optimizer.lr"),
}


def tc_name(field: str, mcore: int, backend: str | None = None) -> str | None:
    target = TABLE.get(field)
    if not target or target.section != "tc":
        return None
    name = target.tc_name(mcore)
    if name and "{backend}" in name:
        if backend not in ("deepep", "hybridep"):
            return None
        name = name.format(backend=backend)
    return name
