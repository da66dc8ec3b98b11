"""How the decoder layers split over pipeline stages: Megatron's conventions and the split the step-time
model prices fastest.

A pipeline of pp ranks x vpp chunks has S = pp x vpp virtual stages; stage i is chunk i // pp of rank i % pp.
The conventional splits are Megatron's even split (num_layers / S), its account_for_embedding/loss split
((num_layers + 2) / S, as Megatron-Bridge runs Qwen3-235B) and the explicit layout where E, every t, every m
and L take one slot each (Megatron-Bridge's DeepSeek-V3 helper for PP8 x VP4: 'Et|(tt|)*30mL').  None of them
weighs the output layer: on a model with MTP and a wide vocabulary the last stage holds far more work than the
others.  The balanced splits (``balanced``) give each rank the same time as the step-time model prices it
(steptime.compute_weight), the rank holding the loss fewer decoder layers; for DeepSeek-V3 on PP16 the first
is Megatron-Bridge's tuned 'Et*4|(t*4|)*14tmL'.  ``Pruning`` tells the search which of a layout's splits can
be its fastest.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from moeforge.compiler.estimate import flops, steptime
from moeforge.compiler.estimate.steptime_terms import elementwise_bytes
from moeforge.compiler.knobs.pipeline_layout import stages as layout_stages

BISECT_STEPS = 60


@dataclass(frozen=True)
class Weights:
    """The step-time model's compute per token of each decoder layer, of all MTP layers together and of
    the output layer (relative units: steptime.compute_weight), and the model's layer counts."""

    layers: tuple
    mtp: float
    output: float
    mtp_layers: int

    @classmethod
    def of(cls, plan: dict) -> "Weights":
        """From a compiled plan of the model on the platform (any layout: per-token FLOPs do not depend on it)."""
        tc, vocab, seq = plan["transformer_config"], plan["model"]["vocab_size"], plan["training"]["seq_length"]
        perf = steptime.performance(plan)
        mtp = tc.get("mtp_num_layers") or 0

        def weight(layers=(), mtp_layers=0, output=False) -> float:
            chunk = {"layers": list(layers), "mtp": mtp_layers, "output": output}
            return steptime.compute_weight(flops.chunk_flops(tc, vocab, seq, chunk, megatron=False), perf,
                                           elementwise=elementwise_bytes(plan, perf, len(layers) + mtp_layers))

        return cls(tuple(weight([n]) for n in range(1, tc["num_layers"] + 1)),
                   weight(mtp_layers=mtp) if mtp else 0.0, weight(output=True), mtp)


def conventional(arch: dict, pp: int, vpp: int | None) -> str | None:
    """Megatron's split of num_layers over pp x vpp virtual stages: evenly; with the embedding and the loss
    counted as one layer each (Megatron-Bridge's account_for_* for Qwen3-235B: 94 + 2 = 96); or an explicit
    pipeline layout where E, every t, every m and L take one slot each (DeepSeek-V3: 61 + E + m + L = 64 slots,
    Megatron-Bridge set_deepseek_v3_pipeline_model_parallel_layout).  None: no split of equal stages exists."""
    n, stages = arch["num_layers"], pp * (vpp or 1)
    mtp = arch.get("mtp_num_layers") or 0
    if pp == 1:
        return "even" if vpp is None else None
    if n % stages == 0:
        return "even"      # MTP, where the model has it, goes on the last stage
    if (n + 2) % stages == 0:
        return "account"
    slots = ["E"] + ["t"] * n + ["m"] * mtp + ["L"]
    if len(slots) % stages:
        return None
    per = len(slots) // stages
    parts = ["".join(slots[i:i + per]) for i in range(0, len(slots), per)]
    if any("t" not in p and "m" not in p for p in parts):
        return None
    return text(parts)


def stages_of(split: str, arch: dict, pp: int, vpp: int | None) -> list[str]:
    """The virtual stages a split stands for, each a string over E/t/m/L (as pipeline_layout.stages)."""
    n, count = arch["num_layers"], pp * (vpp or 1)
    tail = "m" * (arch.get("mtp_num_layers") or 0) + "L"
    if split == "even":
        per = [n // count] * count
    elif split == "account":
        per = [(n + 2) // count] * count
        per[0], per[-1] = per[0] - 1, per[-1] - 1
    else:
        return layout_stages(split)
    return [("E" if i == 0 else "") + "t" * k + (tail if i == count - 1 else "") for i, k in enumerate(per)]


def balanced(w: Weights, pp: int, vpp: int | None) -> list[str]:
    """The pipeline layouts whose ranks the step-time model prices alike, as text megatron-core parses; none
    where there are fewer decoder layers than stages need.

    The decoder layers count at their mean compute, the MTP and output layers on the last stage at
    ``tail`` = their compute in decoder layers, x.  The ranks' communication (all-to-all, TP, CP) comes with the
    decoder layers only, so a layer's share of a rank's time is larger than its compute's, and the tail's
    smaller: one split for each of x, x - 1, ... down to 0 (each different split once), priced by the search."""
    v = vpp or 1
    n = len(w.layers)
    if pp == 1 or n == 0 or n < pp * v - (1 if w.mtp_layers else 0):
        return []
    x = (w.mtp + w.output) / (sum(w.layers) / n)
    out: list[str] = []
    for k in range(math.floor(x) + 1):
        split = _balanced(n, w.mtp_layers, pp, v, x - k)
        if split not in out:
            out.append(split)
    return out


def _balanced(n: int, mtp: int, pp: int, v: int, tail: float) -> str:
    """n decoder layers over pp ranks of v chunks, the last stage holding the MTP and output layers, worth
    ``tail`` decoder layers: each rank r takes at most R - tail_r layers, R, the largest rank's time in layers,
    the least for which the ranks hold every layer.  The last ranks take their fill first, so the first rank,
    which holds the most micro-batches in flight under 1F1B, holds the fewest layers; within a rank the layers
    spread evenly over its chunks, the later chunks taking the odd ones."""
    count = pp * v
    least = [v] * pp
    if mtp:
        least[-1] = v - 1   # a last stage of MTP and loss only ('mL') is a stage megatron-core runs
    extra = [0.0] * (pp - 1) + [tail]

    def caps(r_layers: float) -> list[int]:
        return [math.floor(r_layers - extra[r] + 1e-9) for r in range(pp)]

    low, high = 0.0, n + tail + 1.0
    for _ in range(BISECT_STEPS):
        mid = (low + high) / 2
        c = caps(mid)
        if all(c[r] >= least[r] for r in range(pp)) and sum(c) >= n:
            high = mid
        else:
            low = mid
    cap = caps(high)
    per_rank, left = list(least), n - sum(least)
    for r in reversed(range(pp)):
        add = min(cap[r] - least[r], left)
        per_rank[r] += add
        left -= add
    counts = [0] * count
    for r in range(pp):
        chunks = list(range(r, count, pp))
        load = {i: tail if i == count - 1 else 0.0 for i in chunks}
        for i in chunks:
            counts[i] = 0 if (i == count - 1 and mtp) else 1
        for _ in range(per_rank[r] - sum(counts[i] for i in chunks)):
            i = min(reversed(chunks), key=lambda j: counts[j] + load[j])
            counts[i] += 1
    return text([("E" if i == 0 else "") + "t" * k + ("m" * mtp + "L" if i == count - 1 else "")
                 for i, k in enumerate(counts)])


def text(stages: list[str]) -> str:
    """Virtual stages as megatron-core's layout syntax: runs of a layer as 'x*k', runs of equal stages other
    than the last as '(s|)*r' ('Et*4|(t*4|)*14tmL')."""
    def short(stage: str) -> str:
        out, i = "", 0
        while i < len(stage):
            j = i
            while j < len(stage) and stage[j] == stage[i]:
                j += 1
            out += stage[i] + (f"*{j - i}" if j - i > 1 else "")
            i = j
        return out

    parts, i = [], 0
    body, last = stages[:-1], stages[-1]
    while i < len(body):
        j = i
        while j < len(body) and body[j] == body[i]:
            j += 1
        parts.append(f"({short(body[i])}|)*{j - i}" if j - i > 1 else short(body[i]) + "|")
        i = j
    return "".join(parts) + short(last)


def profile(stages: list[str], w: Weights, pp: int) -> tuple[float, int]:
    """The compute and the layer count (decoder and MTP layers: what its communication grows with) of the rank
    the step-time model takes as the busiest, the one of most compute."""
    compute, layers, seen = [0.0] * pp, [0] * pp, 0
    for i, stage in enumerate(stages):
        t = stage.count("t")
        compute[i % pp] += sum(w.layers[seen:seen + t]) + (w.mtp if "m" in stage else 0.0) \
            + (w.output if "L" in stage else 0.0)
        layers[i % pp] += t + stage.count("m")
        seen += t
    busiest = max(range(pp), key=lambda r: compute[r])
    return compute[busiest], layers[busiest]


def options(arch: dict, w: Weights, pp: int, vpp: int | None) -> list[tuple[str, tuple, tuple]]:
    """The splits the search prices for pp x vpp, each with the splits that dominate it and its profile: the
    balanced ones and the conventional one (spelled 'even' or 'account' where a balanced one is that split),
    those no other beats first.  A split dominates another when its busiest rank has no more compute and no
    more layers: it is no slower whatever a layer's communication costs, and the other can win only by needing
    less recompute."""
    found = balanced(w, pp, vpp)
    usual = conventional(arch, pp, vpp)
    every = {b: stages_of(b, arch, pp, vpp) for b in found}
    if usual is not None:
        same = [b for b in found if every[b] == stages_of(usual, arch, pp, vpp)]
        every = {(usual if b in same else b): st for b, st in every.items()}
        if not same:
            every[usual] = stages_of(usual, arch, pp, vpp)
    prof = {b: profile(st, w, pp) for b, st in every.items()}
    order = list(every)
    out = []
    for b in order:
        beaten = tuple(o for o in order if o != b and prof[o][0] <= prof[b][0] and prof[o][1] <= prof[b][1]
                       and (prof[o] != prof[b] or order.index(o) < order.index(b)))
        out.append((b, beaten, prof[b]))
    return sorted(out, key=lambda o: bool(o[1]))


class Pruning:
    """Which of a layout's splits are worth pricing.  A split is priced unless another split of the same sizes
    (TP, CP, PP, VPP, EP, ETP, MBS, EP overlap) is no slower for every variant of the layout: one that dominates it
    (options), or the first split priced, when the per-layer communication of its variants (the most exposed)
    cannot pay for this split's larger compute.  Even then it is priced where it fits with lighter recompute than
    those splits took (``lighter``), the one way it can be faster."""

    def __init__(self, arch: dict, w: Weights, recompute_options: int):
        self.arch, self.w, self.none = arch, w, recompute_options
        self.splits: dict = {}   # (pp, vpp) -> {split: (dominating splits, profile)}
        self.took: dict = {}     # sizes + (split,) -> the recompute option taken (self.none: none fits)
        self.first: dict = {}    # sizes -> (split, profile, exposed communication per layer, seconds per compute)

    def lighter(self, cand, overlap: bool) -> int | None:
        """None: price the split; else the recompute option (exclusive) it must fit with to be priced."""
        key = (cand.pp, cand.vpp)
        if key not in self.splits:
            self.splits[key] = {b: (d, p) for b, d, p in options(self.arch, self.w, cand.pp, cand.vpp)}
        dominating, (compute, layers) = self.splits[key][cand.split]
        sizes = _sizes(cand, overlap)
        beaten = list(dominating)
        first = self.first.get(sizes)
        if first is not None and first[0] != cand.split:
            split, (compute0, layers0), comm, seconds = first
            if (compute - compute0) * seconds >= max(0.0, comm * (layers0 - layers)):
                beaten.append(split)
        if not beaten:
            return None
        return min(self.took.get(sizes + (b,), self.none) for b in beaten)

    def record(self, cand, overlap: bool, took: int, comm_per_layer: float = 0.0, seconds: float = 0.0) -> None:
        """What pricing a split found: the recompute option it took and, once it fitted, the most exposed
        communication per layer of its variants and its busiest stage's compute seconds per unit of weight."""
        sizes = _sizes(cand, overlap)
        self.took[sizes + (cand.split,)] = took
        if took < self.none and sizes not in self.first:
            self.first[sizes] = (cand.split, self.splits[(cand.pp, cand.vpp)][cand.split][1], comm_per_layer, seconds)


def _sizes(cand, overlap: bool) -> tuple:
    return cand.tp, cand.cp, cand.pp, cand.vpp, cand.ep, cand.etp, cand.mbs, overlap
