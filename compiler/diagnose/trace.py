"""A torch.profiler Chrome trace (runtime --profile) read into the step's time split: communication, compute,
and the host's gaps between them.

Per profiled step (the runtime's ``moeforge.step N`` annotation): on a GPU, time inside communication
kernels (NCCL) that no compute kernel overlaps is exposed communication, compute kernels are compute, and
the step's span not covered by any kernel is the host's (launch gaps, Python, a CPU-bound step); on a CPU
(gloo), time inside the main thread's collective ops or gloo's own threads' collectives (where an
asynchronous all-reduce runs while the caller waits, in no operator) that no ATen operator overlaps is
communication, the self time of the main thread's ATen operators (the arithmetic) compute, and the rest of
the span (Python, autograd Functions and the engine around them) the host's.  Plain JSON: no
torch here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from moeforge.compiler import bounded

COMM_MARKS = ("nccl", "gloo:", "c10d::", "all_to_all", "alltoall", "allreduce", "all_reduce", "allgather",
              "all_gather", "reduce_scatter", "reducescatter", "record_param_comms", "send", "recv")
STEP_MARK = "moeforge.step"
GLOO_WORK = "gloo:"  # gloo runs a collective on its own thread: the caller's wait shows as no operator


class TraceError(ValueError):
    pass


@dataclass
class TraceSplit:
    steps: int
    step_s: float            # mean span of the profiled steps
    communication_s: float   # exposed
    compute_s: float
    host_s: float
    device: str              # "gpu" (kernels) or "cpu" (operators)
    path: str


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _clip(intervals, lo: float, hi: float):
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def _minus(a: list, b: list) -> float:
    """Length of the union ``a`` not covered by the union ``b``."""
    total = 0.0
    for x0, x1 in a:
        covered = sum(max(0.0, min(x1, y1) - max(x0, y0)) for y0, y1 in b if y1 > x0 and y0 < x1)
        total += (x1 - x0) - covered
    return total


def is_comm(name: str) -> bool:
    low = name.lower()
    return any(m in low for m in COMM_MARKS)


def _arithmetic(ops: list[dict], comm: list) -> list[dict]:
    """The ATen operators outside communication: on a CPU the arithmetic itself.  Other frames (autograd
    Functions, the engine's evaluate_function, annotations) are Python and framework code: the host overhead
    a GPU shows as gaps between kernels."""
    return [e for e in ops if e["name"].startswith("aten::") and not is_comm(e["name"])
            and not any(a <= e["ts"] < b for a, b in comm)]


def _self_time(ops: list[dict], chosen: list[dict]) -> float:
    """Summed self time (own duration less its children's) of the ``chosen`` among ``ops``."""
    ordered = sorted(ops, key=lambda e: (e["ts"], -e.get("dur", 0)))
    own = {id(e): float(e.get("dur", 0)) for e in ordered}
    stack: list[dict] = []
    for e in ordered:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1].get("dur", 0):
            stack.pop()
        if stack:
            own[id(stack[-1])] -= e.get("dur", 0)
        stack.append(e)
    return sum(max(own[id(e)], 0.0) for e in chosen)


def split(path: Path | str) -> TraceSplit:
    path = Path(path)
    try:
        doc = bounded.read_json(path, bounded.LIMITS["trace"])
    except bounded.Unreadable as exc:
        raise TraceError(f"{path}: not a readable Chrome trace ({exc}): profile fewer steps (--profile)") from None
    events = [e for e in (doc.get("traceEvents") if isinstance(doc, dict) else doc) or []
              if e.get("ph") == "X" and "ts" in e]
    steps = [e for e in events if str(e.get("name", "")).startswith(STEP_MARK)]
    if not steps:
        raise TraceError(f"{path}: no '{STEP_MARK} N' span: was it written by the runtime's --profile?")
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    comm = compute = host = span = 0.0
    for step in steps:
        lo, hi = step["ts"], step["ts"] + step["dur"]
        span += hi - lo
        if kernels:
            ks = [e for e in kernels if e["ts"] < hi and e["ts"] + e.get("dur", 0) > lo]
            c = _union(_clip([(e["ts"], e["ts"] + e["dur"]) for e in ks if is_comm(e["name"])], lo, hi))
            k = _union(_clip([(e["ts"], e["ts"] + e["dur"]) for e in ks if not is_comm(e["name"])], lo, hi))
            exposed = _minus(c, k)
            busy = _length(_union(c + k))
        else:
            ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("tid") == step.get("tid")
                   and lo <= e["ts"] < hi]
            own = _union(_clip([(e["ts"], e["ts"] + e["dur"]) for e in ops if is_comm(e["name"])], lo, hi))
            workers = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("tid") != step.get("tid")
                       and str(e.get("name", "")).startswith(GLOO_WORK)]
            arithmetic = _arithmetic(ops, own)
            c = _union(own + _clip(workers, lo, hi))
            exposed = _minus(c, _union([(e["ts"], e["ts"] + e["dur"]) for e in arithmetic]))
            busy = exposed + _self_time(ops, arithmetic)
        comm += exposed
        compute += busy - exposed
        host += (hi - lo) - busy
    n, us = len(steps), 1e-6
    return TraceSplit(n, span / n * us, comm / n * us, compute / n * us, host / n * us,
                      "gpu" if kernels else "cpu", str(path))


def critical(splits: list[TraceSplit]) -> TraceSplit | None:
    """Of the ranks' splits, the rank the others waited for: the least exposed communication.  A rank that
    reaches a collective first waits there for the last one, and that wait is the other rank's work (load
    imbalance, or a busy host), not the network; the last to arrive shows what the step is made of."""
    return min(splits, key=lambda s: s.communication_s, default=None)
