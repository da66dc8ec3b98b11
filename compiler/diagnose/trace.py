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

import bisect
import math
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
    """Length of the union ``a`` not covered by the union ``b`` (both sorted and disjoint, as _union makes
    them): one merge pass, O(len(a) + len(b)); a profiled step holds 10^5 events of each."""
    total, j = 0.0, 0
    for x0, x1 in a:
        while j < len(b) and b[j][1] <= x0:
            j += 1
        covered, k = 0.0, j
        while k < len(b) and b[k][0] < x1:
            covered += max(0.0, min(x1, b[k][1]) - max(x0, b[k][0]))
            k += 1
        total += (x1 - x0) - covered
    return total


def _inside(union: list, t: float) -> bool:
    """Whether ``t`` lies in one of the sorted, disjoint ``union``'s half-open intervals (bisection)."""
    i = bisect.bisect_right(union, (t, math.inf)) - 1
    return i >= 0 and union[i][0] <= t < union[i][1]


def is_comm(name: str) -> bool:
    """Whether a trace event is communication (NCCL/gloo kernel or c10d op), by its name's markers."""
    low = name.lower()
    return any(m in low for m in COMM_MARKS)


def _arithmetic(ops: list[dict], comm: list) -> list[dict]:
    """The ATen operators outside communication: on a CPU the arithmetic itself.  Other frames (autograd
    Functions, the engine's evaluate_function, annotations) are Python and framework code: the host overhead
    a GPU shows as gaps between kernels."""
    return [e for e in ops if e["name"].startswith("aten::") and not is_comm(e["name"])
            and not _inside(comm, e["ts"])]


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


def _events(path: Path, doc) -> list[dict]:
    """The complete ('X') events, each checked: an object, with a finite ``ts`` and a finite, non-negative
    ``dur`` (microseconds); TraceError names the first that is not, by its index."""
    listed = doc.get("traceEvents") if isinstance(doc, dict) else doc
    where = "traceEvents" if isinstance(doc, dict) else "the trace"
    if listed is None:
        listed = []
    if not isinstance(listed, list):
        raise TraceError(f"{path}: {where}: expected a list of events, got {type(listed).__name__}: "
                         "pass the Chrome trace the runtime's --profile wrote")
    out = []
    for i, e in enumerate(listed):
        if not isinstance(e, dict):
            raise TraceError(f"{path}: {where}[{i}]: expected an event object, got {type(e).__name__}: "
                             "pass the Chrome trace the runtime's --profile wrote")
        if e.get("ph") != "X":
            continue
        for key in ("ts", "dur"):
            v = e.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or (key == "dur" and v < 0):
                got = "missing" if key not in e else repr(v)[:40]
                raise TraceError(f"{path}: {where}[{i}].{key}: expected a finite number"
                                 f"{' >= 0 (microseconds)' if key == 'dur' else ' (microseconds)'}, got {got}: "
                                 "a complete ('X') event has both; pass the trace the runtime's --profile wrote")
        if not isinstance(e.get("name", ""), str):
            raise TraceError(f"{path}: {where}[{i}].name: expected a string: pass the trace the runtime's --profile "
                             "wrote")
        e.setdefault("name", "")
        out.append(e)
    return out


def split(path: Path | str) -> TraceSplit:
    """One trace's step split into exposed communication, compute and host gaps, averaged over its profiled steps."""
    path = Path(path)
    try:
        doc = bounded.read_json(path, bounded.LIMITS["trace"])
    except bounded.Unreadable as exc:
        where = f":{exc.where}" if exc.where else ""
        raise TraceError(f"{path}{where}: not a readable Chrome trace ({exc}): profile fewer steps (--profile)") from None
    events = _events(path, doc)
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
