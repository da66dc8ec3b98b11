"""PROVISIONAL step-time model: a placeholder with the final interface, to be replaced at merge.

!!! PROVISIONAL (issue 15, planner branch): the calibrated model is written in parallel by another
helper and replaces this file whole.  Nothing here is calibrated; do not tune against it and do not
test its numbers.  It exists so the layout planner (compiler/planner/) can rank candidates today.

Model: compute = 6 x active parameters x tokens / (world x peak x MFU_GUESS) (Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", arXiv:2001.08361, C ~= 6ND), recompute adds forward work
again, a 1F1B bubble of (pp-1)/(m x vpp) of the compute (Narayanan et al. 2021, arXiv:2104.04473),
and bandwidth-only communication terms.  H100 numbers are hard-coded for every platform (provisional
only; the real model reads plan["platform"]["performance"]).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..layout import Layout
from . import memory

# H100 SXM5 dense BF16 peak, NVIDIA H100 datasheet (https://www.nvidia.com/en-us/data-center/h100/).
PEAK_FLOPS = 989e12
MFU_GUESS = 0.4            # PROVISIONAL guess, the brief's "peak x 0.4"
NVLINK_BPS = 450e9         # H100 NVLink 4: 900 GB/s bidirectional per GPU (datasheet), one direction
IB_BPS = 50e9              # one ConnectX-7 NDR 400 Gb/s per GPU (DGX H100 datasheet)
EP_OVERLAP_HIDDEN = 0.7    # PROVISIONAL guess: share of the EP all-to-all hidden by overlap_moe_expert_parallel_comm
OVERHEAD_S = 0.05          # PROVISIONAL guess: per-step launch/optimizer bookkeeping
PROVISIONAL = True        # the planner's validation test expects failures while this placeholder is in place
KEYS = ("compute", "tp_comm", "cp_comm", "ep_a2a", "pp_bubble", "pp_p2p", "dp_reduce", "optimizer", "overhead")


@dataclass
class StepTime:
    items: dict
    hidden: dict
    formulas: dict
    model_flops: float
    tokens_per_step: int
    world_size: int
    peak_flops: float

    @property
    def total_s(self) -> float:
        return sum(self.items.values())

    @property
    def dominant(self) -> str:
        return max(self.items, key=self.items.get)

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.total_s * self.world_size * self.peak_flops)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_step / self.total_s / self.world_size


_ACTIVE: dict = {}


def active_parameters(tc: dict, model: dict) -> float:
    """Parameters one token passes through: every layer's dense part, top-k of its experts, the output layer."""
    key = (id(model), tc["num_layers"], tc["hidden_size"], tc.get("num_moe_experts"))
    if key not in _ACTIVE:
        _ACTIVE[key] = _active(tc, model)
    return _ACTIVE[key]


def _active(tc: dict, model: dict) -> float:
    one = Layout(world_size=1)
    total = 0.0
    for n in range(1, tc["num_layers"] + 1 + (tc.get("mtp_num_layers") or 0)):
        dense, expert = memory.layer_params(tc, min(n, tc["num_layers"]), one)
        experts = tc.get("num_moe_experts") if memory.is_moe_layer(tc, min(n, tc["num_layers"])) else None
        total += dense + (expert * tc["moe_router_topk"] / experts if experts else expert)
    return total + model["vocab_size"] * tc["hidden_size"]


def estimate(plan: dict, lay: Layout | None = None) -> StepTime:
    """PROVISIONAL: seconds per step of a compiled plan (its layout unless ``lay`` is given)."""
    tc, tr = plan["transformer_config"], plan["training"]
    lay = lay or Layout.from_plan(plan["layout"])
    tokens = tr["global_batch_size"] * tr["seq_length"]
    flops = 6.0 * active_parameters(tc, plan["model"]) * tokens
    compute = flops / (lay.world_size * PEAK_FLOPS * MFU_GUESS)
    gran = tc.get("recompute_granularity")
    recompute = {"full": 1 / 3, "selective": 0.05}.get(gran, 0.0)
    compute *= 1 + recompute
    m = tr.get("num_microbatches") or max(1, tr["global_batch_size"] // (tr["micro_batch_size"] * lay.dp))
    bubble = compute * (lay.pp - 1) / (m * lay.chunks)
    h, bytes_ = tc["hidden_size"], 2
    local_tokens = tokens / lay.dp / lay.cp
    layers = tc["num_layers"] / lay.pp
    tp_bw = NVLINK_BPS
    tp_comm = 0.0 if lay.tp == 1 else 8 * layers * local_tokens * h * bytes_ * (lay.tp - 1) / lay.tp / tp_bw
    cp_comm = 0.0 if lay.cp == 1 else 4 * layers * local_tokens * h * bytes_ / NVLINK_BPS
    domain = plan["platform"].get("nvlink_domain") or 1
    ep_bw = NVLINK_BPS if lay.ep * lay.tp <= domain else IB_BPS
    moe_layers = sum(memory.is_moe_layer(tc, n) for n in range(1, tc["num_layers"] + 1)) / lay.pp
    a2a = 0.0
    if lay.ep > 1:
        routed = local_tokens / lay.tp * tc["moe_router_topk"] * h * bytes_
        a2a = 4 * moe_layers * routed * (lay.ep - 1) / lay.ep / ep_bw
    hidden_a2a = a2a * EP_OVERLAP_HIDDEN if tc.get("overlap_moe_expert_parallel_comm") else 0.0
    if tc.get("moe_token_dispatcher_type") == "flex":
        a2a *= 0.8  # PROVISIONAL guess: fused dispatch kernels
    params = memory.rank_parameters(tc, plan["model"], lay, 0)["total"]
    dp_reduce = 0.0 if lay.dp == 1 else 2 * 2 * params / (IB_BPS if lay.world_size > domain else NVLINK_BPS) * 0.2
    pp_p2p = 0.0 if lay.pp == 1 else 2 * m * lay.chunks * (local_tokens / m) * h * bytes_ / lay.tp / IB_BPS
    items = {"compute": compute, "tp_comm": tp_comm, "cp_comm": cp_comm, "ep_a2a": a2a - hidden_a2a,
             "pp_bubble": bubble, "pp_p2p": pp_p2p, "dp_reduce": dp_reduce, "optimizer": 0.0, "overhead": OVERHEAD_S}
    formulas = {"compute": f"PROVISIONAL 6 x active params x {tokens} tokens / ({lay.world_size} x peak x "
                           f"{MFU_GUESS}) x (1 + recompute {recompute:g})",
                "pp_bubble": f"PROVISIONAL compute x (pp-1)/(m x vpp) = x ({lay.pp}-1)/({m} x {lay.chunks})",
                "ep_a2a": f"PROVISIONAL 4 x moe layers x tokens x topk x h x 2 B / {ep_bw / 1e9:g} GB/s",
                "overhead": "PROVISIONAL fixed"}
    return StepTime(items, {"ep_a2a": hidden_a2a}, formulas, flops, tokens, lay.world_size, PEAK_FLOPS)
