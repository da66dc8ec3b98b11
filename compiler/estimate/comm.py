"""Communication volumes of one training step and the link each one crosses.

Every collective is priced as bytes sent per GPU over the per-GPU bandwidth of the link its
group needs: NVLink when the whole group sits inside one NVLink domain (platform
``nvlink_domain`` GPUs), the inter-node fabric otherwise (each GPU has its own NIC on the
catalogue platforms, so a ring or an all-to-all leaving the domain runs at ``internode_gbps``
per GPU).  Group spans follow megatron-core's rank order (parallel_state, order
"tp-cp-ep-dp-pp"): a TP group is tp consecutive ranks, TP x CP groups tp*cp consecutive ranks,
an EP group ep ranks ``etp`` apart, a DP group dp ranks tp*cp apart, an expert-DP group edp
ranks etp*ep apart, and pipeline neighbours world/pp ranks apart.

Ring collectives (NCCL): an all-gather or reduce-scatter of B bytes sends (n-1)/n x B per GPU,
an all-reduce twice that (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

GB = 1e9
BF16 = 2  # bytes per activation/parameter element on the wire (bf16 training)


@dataclass(frozen=True)
class Links:
    """The platform's links, GB/s per GPU (one direction), and the efficiencies that turn them
    into what NCCL delivers."""

    nvlink_gbps: float
    internode_gbps: float
    nvlink_domain: int
    collective_efficiency: float
    a2a_efficiency: float

    def inside(self, span: int) -> bool:
        """Does a group of ``span`` consecutive ranks fit in one NVLink domain?"""
        return span <= self.nvlink_domain

    def name(self, span: int) -> str:
        """The link a group of ``span`` consecutive ranks uses, as the step-time formulas print it."""
        return "nvlink" if self.inside(span) else "inter-node"

    def ring_s(self, sent_bytes: float, span: int) -> float:
        """Seconds for a ring collective that sends ``sent_bytes`` per GPU over a group spanning
        ``span`` consecutive ranks."""
        bw = self.nvlink_gbps if self.inside(span) else self.internode_gbps
        return sent_bytes / (bw * GB * self.collective_efficiency)

    def a2a_s(self, sent_bytes: float, group: int, stride: int) -> float:
        """Seconds for an all-to-all in which each GPU sends ``sent_bytes`` spread evenly over the
        other ``group - 1`` members, which sit ``stride`` ranks apart.  Members inside the own
        NVLink domain are reached over NVLink, the rest over the fabric, concurrently."""
        local = max(1, min(group, self.nvlink_domain // stride))
        if local >= group:
            return sent_bytes / (self.nvlink_gbps * GB * self.a2a_efficiency)
        per_peer = sent_bytes / max(1, group - 1)
        intra = per_peer * (local - 1) / (self.nvlink_gbps * GB)
        inter = per_peer * (group - local) / (self.internode_gbps * GB)
        return max(intra, inter) / self.a2a_efficiency

    def hierarchical_a2a_s(self, tokens: float, topk: int, hidden: int, group: int, stride: int,
                           expert_groups: tuple[int, int] | None = None) -> float:
        """Seconds for one dispatch (or combine) of DeepEP's / HybridEP's inter-node kernels: a token
        crosses the fabric once per remote NVLink domain holding any of its top-k experts, and is
        forwarded inside that domain over NVLink (DeepEP README, "internode" normal kernels: RDMA
        to the target node, then NVLink; HybridEP likewise); ``remote_domains`` says how many
        it reaches.  The NVLink side carries the local share of the top-k copies, as the flat
        all-to-all does."""
        local = max(1, min(group, self.nvlink_domain // stride))
        if local >= group:
            return self.a2a_s(a2a_bytes(tokens, topk, hidden, group), group, stride)
        remote = remote_domains(group / local, topk, expert_groups)
        inter = tokens * hidden * BF16 * remote / (self.internode_gbps * GB)
        intra = tokens * topk * hidden * BF16 * (local - 1) / group / (self.nvlink_gbps * GB)
        return max(intra, inter) / self.a2a_efficiency

    def a2a_link(self, group: int, stride: int) -> str:
        """The link an all-to-all of ``group`` members ``stride`` ranks apart reaches beyond, for its formula text."""
        return "nvlink" if self.nvlink_domain // stride >= group else "inter-node"


def remote_domains(domains: float, topk: int, expert_groups: tuple[int, int] | None = None) -> float:
    """NVLink domains other than its own that one token's top-k experts reach, on average, when the
    EP group spans ``domains`` equal domains and routing is balanced (random logits: megatron-core's
    moe_router_force_load_balancing).  Each other domain is reached with probability P:

    - free top-k: every expert lands in any domain alike, P = 1 - (1 - 1/D)^k;
    - group-limited routing (``expert_groups`` = (G groups, t chosen); megatron-core
      moe_utils.group_limited_topk, DeepSeek-V3's node-limited routing): a token takes the top t
      of G contiguous expert groups, each scored by its top k/t experts, so each chosen group gets
      its share of the k.  With g = G/D whole groups per domain, P = 1 - C(G-g, t) / C(G, t); with
      each group spread over s = D/G domains, P = t/G x (1 - (1 - 1/s)^(k/t)).  Groups that do not
      tile the domains fall back to free top-k.
    """
    p = 1 - (1 - 1 / domains) ** topk
    if expert_groups and domains == int(domains):
        g_total, chosen = expert_groups
        d = int(domains)
        if g_total >= d and g_total % d == 0:
            p = 1 - math.comb(g_total - g_total // d, chosen) / math.comb(g_total, chosen)
        elif d % g_total == 0:
            p = chosen / g_total * (1 - (1 - g_total / d) ** (topk / chosen))
    return (domains - 1) * p


def tp_bytes(tokens: float, hidden: int, tp: int) -> float:
    """Bytes one GPU sends for one layer's TP collectives over ``tokens`` tokens, forward and
    backward: with sequence parallelism 2 all-gathers + 2 reduce-scatters forward and the same
    backward, without it 2 + 2 all-reduces (the same volume); each moves (tp-1)/tp of the
    layer's [tokens, hidden] activation (Korthikanti et al. 2022, arXiv:2205.05198, sec. 4.2.2)."""
    return 8 * (tp - 1) / tp * tokens * hidden * BF16 if tp > 1 else 0.0


def cp_bytes(tokens_local: float, kv_width: int, cp: int) -> float:
    """Bytes one GPU sends for one attention layer's ring context parallelism (TE p2p):
    forward cp-1 steps passing the local K and V chunk, backward cp-1 steps passing K, V and
    their gradients (3 x the forward volume in all)."""
    return 3 * (cp - 1) * tokens_local * kv_width * BF16 if cp > 1 else 0.0


def a2a_bytes(tokens_local: float, topk: int, hidden: int, ep: int) -> float:
    """Bytes one GPU sends in one dispatch (or combine) all-to-all: each of its tokens goes to
    top-k experts, spread evenly over the EP ranks (forced/balanced routing), (ep-1)/ep of them
    leave the GPU.  The standard alltoall dispatcher sends one copy per routed expert."""
    return tokens_local * topk * hidden * BF16 * (ep - 1) / ep if ep > 1 else 0.0


def dp_bytes(params: float, n: int, grad_bytes: int, distributed: bool) -> tuple[float, float]:
    """(gradient reduction, parameter gather) bytes one GPU sends per step for ``params``
    parameters replicated over ``n`` ranks.  Distributed optimizer: reduce-scatter of the
    gradients and all-gather of the bf16 parameters; otherwise one all-reduce."""
    if n <= 1:
        return 0.0, 0.0
    share = (n - 1) / n * params
    if distributed:
        return share * grad_bytes, share * BF16
    return 2 * share * grad_bytes, 0.0
