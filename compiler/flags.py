"""Canonical knob -> where it goes in each target, per megatron-core version.

One row per knob: the section of the plan it lands in (TransformerConfig, DDP config,
optimizer, training), its TransformerConfig field name by version, the Megatron-LM
pretrain_gpt.py flag by version, and the Megatron-Bridge override path. None means the
target has no such setting. Templates never decide names; they loop over this table.
"""
from __future__ import annotations

from dataclasses import dataclass

from .rules.expr import version_int

V17 = version_int("0.17.0")


@dataclass(frozen=True)
class Target:
    section: str                       # tc | ddp | optimizer | training | env | none
    tc: tuple = ()                     # ((min_mcore, name), ...) newest last
    mlm: tuple = ()                    # ((min_mcore, "--flag"), ...)
    bridge: str | None = None          # Megatron-Bridge override path

    def tc_name(self, mcore: int) -> str | None:
        return _pick(self.tc, mcore)

    def mlm_flag(self, mcore: int) -> str | None:
        return _pick(self.mlm, mcore)


def _pick(table: tuple, mcore: int):
    chosen = None
    for since, name in table:
        if mcore >= since:
            chosen = name
    return chosen


def _tc(name, flag=None, bridge_prefix="model", section="tc"):
    flag = flag if flag is not None else "--" + name.replace("_", "-")
    return Target(section, ((0, name),), ((0, flag),) if flag else (), f"{bridge_prefix}.{name}")


TABLE: dict[str, Target] = {
    "tensor_model_parallel_size": _tc("tensor_model_parallel_size"),
    "pipeline_model_parallel_size": _tc("pipeline_model_parallel_size"),
    "virtual_pipeline_model_parallel_size": Target(
        "tc", ((0, "virtual_pipeline_model_parallel_size"),),
        ((0, "--num-virtual-stages-per-pipeline-rank"),), "model.virtual_pipeline_model_parallel_size"),
    "context_parallel_size": _tc("context_parallel_size"),
    "expert_model_parallel_size": _tc("expert_model_parallel_size"),
    "expert_tensor_parallel_size": _tc("expert_tensor_parallel_size"),
    "sequence_parallel": _tc("sequence_parallel"),
    "bf16": _tc("bf16"),
    "fp16": _tc("fp16"),
    "fp8": Target("tc", ((0, "fp8"),), ((0, "--fp8-format"),), "model.fp8"),
    "fp8_recipe": _tc("fp8_recipe"),
    "fp4": Target("tc", ((0, "fp4"),), ((0, "--fp4-format"),), "model.fp4"),
    "fp4_recipe": _tc("fp4_recipe"),
    "moe_router_dtype": _tc("moe_router_dtype"),
    "moe_token_dispatcher_type": _tc("moe_token_dispatcher_type"),
    "moe_flex_dispatcher_backend": _tc("moe_flex_dispatcher_backend"),
    # 0.16 has one SM knob per backend; 0.17+ folds them (the emitter picks by backend)
    "moe_flex_dispatcher_num_sms": Target(
        "tc", ((0, "moe_{backend}_num_sms"), (V17, "moe_flex_dispatcher_num_sms")),
        ((0, "--moe-{backend}-num-sms"), (V17, "--moe-flex-dispatcher-num-sms")),
        "model.moe_flex_dispatcher_num_sms"),
    "overlap_moe_expert_parallel_comm": Target(
        "tc", ((0, "overlap_moe_expert_parallel_comm"),), ((0, "--overlap-moe-expert-parallel-comm"),),
        "comm_overlap.overlap_moe_expert_parallel_comm"),
    "delay_wgrad_compute": Target(
        "tc", ((0, "delay_wgrad_compute"),), ((0, "--delay-wgrad-compute"),), "comm_overlap.delay_wgrad_compute"),
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
        "tc", ((0, "cuda_graph_scope"), (V17, "cuda_graph_modules")),
        ((0, "--cuda-graph-scope"), (V17, "--cuda-graph-modules")), "model.cuda_graph_modules"),
    "tp_comm_overlap": Target("tc", ((0, "tp_comm_overlap"),), ((0, "--tp-comm-overlap"),),
                              "comm_overlap.tp_comm_overlap"),
    "overlap_p2p_comm": Target("tc", ((0, "overlap_p2p_comm"),), ((0, "--overlap-p2p-communication"),),
                               "comm_overlap.overlap_p2p_comm"),
    "gradient_accumulation_fusion": Target(
        "tc", ((0, "gradient_accumulation_fusion"),), ((0, "--no-gradient-accumulation-fusion"),),
        "model.gradient_accumulation_fusion"),
    "overlap_grad_reduce": Target("ddp", (), ((0, "--overlap-grad-reduce"),), "ddp.overlap_grad_reduce"),
    "overlap_param_gather": Target("ddp", (), ((0, "--overlap-param-gather"),), "ddp.overlap_param_gather"),
    "use_distributed_optimizer": Target("ddp", (), ((0, "--use-distributed-optimizer"),),
                                        "ddp.use_distributed_optimizer"),
    "micro_batch_size": Target("training", (), ((0, "--micro-batch-size"),), "train.micro_batch_size"),
    "global_batch_size": Target("training", (), ((0, "--global-batch-size"),), "train.global_batch_size"),
    "seq_length": Target("training", (), ((0, "--seq-length"),), "model.seq_length"),
    "train_iters": Target("training", (), ((0, "--train-iters"),), "train.train_iters"),
    "seed": Target("training", (), ((0, "--seed"),), "rng.seed"),
    "lr": Target("optimizer", (), ((0, "--lr"),), "optimizer.lr"),
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
