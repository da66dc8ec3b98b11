"""What `moeforge sweep check` and `sweep launch` print: one row per point (its values, verdict and the
planner's estimate), then the refused points' diagnostics, the collapsed points with the knob that
changed nothing, and what the estimate could not say."""
from __future__ import annotations

import json

from moeforge.compiler.diagnostics import printable, render_all
from moeforge.compiler.sweep.builds import relative
from moeforge.compiler.sweep.estimates import of_plan

GIB = 2 ** 30


def short_names(paths: list[str]) -> dict[str, str]:
    """Each knob path's shortest dotted suffix that no other path shares (ep_comm for moe.overlap.ep_comm)."""
    out = {}
    for p in paths:
        parts = p.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(q != p and (q == tail or q.endswith("." + tail)) for q in paths):
                out[p] = tail
                break
        else:
            out[p] = p
    return out


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Aligned columns; every cell through printable() first (a knob value, a log's line: the user's text),
    so the widths are those of what the terminal shows."""
    headers = [printable(str(h)) for h in headers]
    rows = [[printable(str(x)) for x in r] + [""] * (len(headers) - len(r)) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() for r in [headers, *rows]]
    return "\n".join(lines)


def value(v) -> str:
    """A knob value as a table cell: `-` for unset, strings bare, anything else as JSON."""
    return "-" if v is None else v if isinstance(v, str) else json.dumps(v)


def num(v, fmt: str) -> str:
    """A number as a table cell in the given format, `-` when absent."""
    return "-" if v is None else format(v, fmt)


def check_text(checked) -> str:
    """What `sweep check` prints: a row per point with its verdict and estimate, then the collapses and totals."""
    sweep, compiled, collapsed = checked.sweep, checked.compiled, checked.collapsed
    swept = [".".join(p) for p in sweep.swept]
    short = short_names(swept)
    rows, missing, total_h, weak = [], set(), 0.0, set()
    for c in compiled:
        vals = c.point.values
        cells = [c.point.id] + [value(vals[k]) if k in vals else "." for k in swept]
        if c.refused:
            rows.append(cells + ["-"] * 4 + ["refused: " + ", ".join(dict.fromkeys(d.code for d in c.errors
                                                                                if d.is_error))])
            continue
        est = of_plan(c.plan, sweep.repeats)
        if est["missing"]:
            missing.add(est["missing"])
        if est["calibration"].startswith("calibration: weak"):
            weak.add(est["calibration"])
        verdict = f"= {collapsed[c.point.id].twin}" if c.point.id in collapsed else "run"
        if c.point.id not in collapsed and est["gpu_hours"] is not None:
            total_h += est["gpu_hours"]
        mem = num(est["peak_memory_bytes"] / GIB, ".2f") + ("" if est["fits"] is not False else " (too big)")
        rows.append(cells + [num(est["step_time_s"], ".3f"), num(est["tokens_per_s_per_gpu"], ".0f"), mem,
                             num(est["gpu_hours"], ".2f"), verdict])
    n_run = len(checked.launchable)
    lines = [f"sweep {sweep.name} ({sweep.file}): {len(compiled)} point(s) of {sweep.recipe}: {n_run} to run, "
             f"{len(checked.refused)} refused, {len(collapsed)} duplicate(s); {sweep.repeats} repeat(s) each", "",
             table(["point", *[short[k] for k in swept], "est. step s", "est. tok/s/GPU", "est. memory GiB",
                    "est. GPU-h", "verdict"], rows)]
    if any(short[k] != k for k in swept):
        lines.append("  (" + "; ".join(f"{short[k]} = {k}" for k in swept if short[k] != k)
                     + "; '.': the recipe's own value)")
    for c in checked.refused:
        lines += ["", f"{c.point.id} refused, never launched:", render_all(c.errors)]
    if collapsed:
        lines += ["", "collapsed (identical launches run once):"] + [f"  {col.text()}" for col in collapsed.values()]
    if missing:
        lines += [""] + [f"estimates: {m}" for m in sorted(missing)]
    elif n_run:
        lines += ["", f"estimated total: {total_h:.2f} GPU-hours for {n_run} point(s) x {sweep.repeats} repeat(s)"]
    lines += [f"estimates: {w}" for w in sorted(weak)]
    lines.append("est. memory: the planner's peak per rank, with its 5 GiB allowance for the CUDA context and "
                 "workspaces (docs/memory-model.md)")
    return printable_lines(lines)


def launch_text(sweep, todo: list[dict], results: list[dict], top) -> str:
    """What `sweep launch` prints when it ends: runs that failed, and the command that shows the results."""
    if not todo:
        return printable_lines([f"sweep {sweep.name}: every point already has a successful result (results: "
                                f"moeforge results {relative(top)})"])
    lines = []
    if results:
        ok = sum(1 for r in results if r["status"] == "ok")
        lines.append(f"sweep {sweep.name}: {len(results)} run(s): {ok} ok, {len(results) - ok} not")
        for r in results:
            if r["status"] != "ok":
                lines.append(f"  {r['point']} repeat {r['repeat']}: {r['status']}: {r['error']} (log: {r['log']})")
    lines.append(f"results: moeforge results {relative(top)}")
    return printable_lines(lines)


def printable_lines(lines: list[str]) -> str:
    """Lines for a terminal or a CI log: each one through printable() (a line may hold several, each its
    own: the rendered diagnostics are already escaped, and escaping is idempotent on them)."""
    return "\n".join(printable(x) for line in lines for x in line.split("\n"))
