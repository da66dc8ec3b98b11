"""Printing plan-layout's answers: the ranked table, JSON (field names fixed: checks read them), and
the full breakdown of one candidate (--explain) so a user can redo the arithmetic."""
from __future__ import annotations

import json
import math

from moeforge.compiler.planner.search import CONFIRM_BUDGET, GIB, Evaluated, Result

SIGNIFICANT = 6   # digits of a step time in JSON: a 10 ms step of a small model keeps its ranking


def record(ev: Evaluated, capacity_gb: float | None) -> dict:
    """One candidate as JSON: layout, pipeline_split (even, account, or megatron-core's pipeline layout text),
    dispatcher, overlap, recompute, memory_gb, step_time_s, mfu, feasible, reasons (and the derived figures the
    table shows)."""
    c, lay = ev.cand, ev.lay
    out = {"layout": {"tp": c.tp, "pp": c.pp, "vpp": c.vpp, "cp": c.cp, "ep": c.ep, "etp": c.etp, "dp": lay.dp,
                      "mbs": c.mbs},
           "pipeline_split": c.split,
           "dispatcher": c.dispatcher, "flex_backend": c.backend, "equivalent_dispatchers": list(ev.equivalent),
           "overlap": {"ep_comm": c.ep_overlap, "delay_wgrad": c.delay_wgrad},
           "recompute": {"granularity": c.recompute, "modules": list(c.modules)},
           "memory_gb": round(ev.mem.total / GIB, 2) if ev.mem else None,
           "capacity_gb": capacity_gb,
           "step_time_s": float(f"{ev.time.total_s:.{SIGNIFICANT}g}") if ev.time else None,
           "tokens_per_s_per_gpu": round(ev.time.tokens_per_s_per_gpu, 1) if ev.time else None,
           "mfu": round(ev.time.mfu, 4) if ev.time else None,
           "dominant": ev.time.dominant if ev.time else None,
           "feasible": ev.feasible, "confirmed": ev.confirmed, "reasons": list(ev.reasons)}
    return out


def as_json(result: Result) -> str:
    """`--format json`: field names are fixed, since checks and the validation read them."""
    cap = result.setting.capacity_gb
    s = result.setting
    return json.dumps({"model": s.model, "platform": s.platform, "gpus": s.gpus, "seq_length": s.seq,
                       "global_batch_size": s.gbs, "considered": result.considered, "kept": result.kept,
                       "candidates": [record(e, cap) for e in result.ranked + result.unconfirmed + result.rejected]},
                      indent=2)


def _mem(ev: Evaluated, cap: float | None) -> str:
    if ev.mem is None:
        return "-"
    used = ev.mem.total / GIB
    return f"{used:5.1f}/{cap:g} ({cap - used:+.1f})" if cap else f"{used:5.1f}"


# What the estimates stand on, under every table: the absolute numbers are the model's (docs/layout-model.md,
# section 6, has the measurements and where it misses them).
CALIBRATION_NOTE = ("step times: docs/layout-model.md, calibrated on H100 alltoall runs with unfused permutation; "
                    "Megatron-Bridge's tuned runs (HybridEP, CUDA graphs) measured up to 1.5x faster (section 6)")


def decimals(values) -> int:
    """Decimals for a column of step times: three significant digits of the smallest, more (up to 9: a tiny
    model's steps are microseconds) while two different times would print alike, so that a small model's rows
    rank (0.0123 s, not 0.01 s)."""
    values = sorted({v for v in values if v and math.isfinite(v) and v > 0})
    if not values:
        return 2
    d = min(9, max(2, 2 - math.floor(math.log10(values[0]))))
    while d < 9 and len({f"{v:.{d}f}" for v in values}) < len(values):
        d += 1
    return d


def table(result: Result) -> str:
    """The ranked table for a terminal: confirmed, then estimated only (~), then rejected (x) with reasons."""
    s, cap = result.setting, result.setting.capacity_gb
    nodes = f"{s.nodes} node{'s' if s.nodes > 1 else ''}"
    more = (f", {len(result.unconfirmed)} more estimated only (~: past the {CONFIRM_BUDGET} compiles the rules "
            f"confirm per search)" if result.unconfirmed else "")
    head = (f"{s.model} on {s.gpus} x {s.platform} ({nodes}), seq {s.seq}, GBS {s.gbs}: "
            f"{result.considered} candidates estimated, {result.kept} within memory, "
            f"{len(result.ranked)} confirmed by the rules{more}")
    cols = ("#", "layout", "pipeline split", "dispatcher", "overlap", "recompute", "memory GB (headroom)", "step s",
            "tok/s/GPU", "MFU", "dominant")
    listed = result.ranked + result.unconfirmed + result.rejected
    d = decimals(ev.time.total_s for ev in listed if ev.time)
    rows = [(cols, None)] + [(_row(str(i), ev, cap, d), None) for i, ev in enumerate(result.ranked, 1)]
    rows += [(_row(f"~{i}", ev, cap, d), None) for i, ev in enumerate(result.unconfirmed, len(result.ranked) + 1)]
    rows += [(_row("x", ev, cap, d), "     rejected: " + "; ".join(ev.reasons[:2])) for ev in result.rejected]
    widths = [max(len(r[i]) for r, _ in rows) for i in range(len(cols))]
    lines = [head, ""]
    for r, note in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
        if note:
            lines.append(note)
    if result.unconfirmed:
        lines += ["", "~ estimated only, not yet compiled through the rules: confirm one with "
                      "`moeforge plan-layout --evaluate RECIPE` or `moeforge check`"]
    return "\n".join(lines + ["", CALIBRATION_NOTE])


def _row(num: str, ev: Evaluated, cap, d: int = 2) -> tuple:
    c, t = ev.cand, ev.time
    return (num, c.describe(), c.split_text(), " = ".join([c.dispatcher_text()] + ev.equivalent), c.overlap_text(),
            c.recompute_text(), _mem(ev, cap),
            f"{t.total_s:.{d}f}" if t else "-", f"{t.tokens_per_s_per_gpu:.0f}" if t else "-",
            f"{t.mfu:.1%}" if t else "-", t.dominant if t else "-")


def explain(ev: Evaluated, capacity_gb: float | None, title: str) -> str:
    """Every memory and time item with its formula."""
    m, t = ev.mem, ev.time
    split = f", pipeline split {ev.cand.split_text()}" if ev.cand.pp > 1 else ""
    lines = [f"{title}: {ev.cand.describe()}, {ev.cand.dispatcher_text()}, overlap {ev.cand.overlap_text()}, "
             f"recompute {ev.cand.recompute_text()}{split}",
             f"  layout: {ev.lay.folding()} (tp*cp*dp*pp = etp*ep*edp*pp)",
             f"  memory per rank (largest: pp rank {ev.pp_rank}), GB = bytes/2^30:"]
    for name in ("weights", "gradients", "optimizer", "activations", "allowance"):
        value = getattr(m, name)
        lines.append(f"    {name:<12} {value / GIB:8.2f}   {m.formulas.get(name, '')}")
    room = f"   of {capacity_gb:g} (headroom {capacity_gb - m.total / GIB:+.2f})" if capacity_gb else ""
    lines.append(f"    {'total':<12} {m.total / GIB:8.2f}{room}")
    lines += ["  " + line for line in t.explain()]  # the step-time model's own account of its items
    if ev.reasons:
        lines.append("  rejected: " + "; ".join(ev.reasons))
    return "\n".join(lines)
