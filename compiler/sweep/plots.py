"""The results as pictures (matplotlib, imported here only), made to answer the sweep's question, "which knob
value won?": the knob values are the x axis (with two knobs varying, the first is the axis and the second the
legend; with more, each tick names them all), and three panels share it: throughput, the cost of the runs and
peak memory. An estimate is drawn beside a measurement only where both measure the same thing (tokens/s/GPU;
memory only when the measurement is the allocator's peak, never a CPU process's RSS against the allocator
estimate). The cost is the steady-state part of the runs' GPU-hours, with the rest of their wall-clock
(start-up) stacked apart (compiler/sweep/cost.py).

Written as results.png and a self-contained results.html (the figure as inline SVG, text kept as text, and the
table as an HTML table; no script, nothing fetched). The series drawn are returned as data
(results.plot.json), so what the picture shows can be checked without reading pixels."""
from __future__ import annotations

import html
import io
import json
import math

from moeforge.compiler.sweep import cost
from moeforge.compiler.sweep.report import num, short_names, value

MIB = 2 ** 20


class NoPlotting(Exception):
    """matplotlib is not installed (it is an optional dependency of the compiler)."""


def _get(p: dict, *path):
    node = p
    for key in path:
        node = (node or {}).get(key)
    return node


def _varying(doc: dict) -> list[str]:
    """The swept knob paths whose value differs between points, in the sweep's order."""
    pts = doc["points"]
    return [k for k in doc["sweep"]["swept"]
            if len({json.dumps(p["values"].get(k), sort_keys=True) for p in pts}) > 1]


def _verdict(p: dict) -> str:
    return "" if p["status"] == "ok" else f"= {p['duplicate_of']}" if p["duplicate_of"] else p["status"]


def axis(doc: dict) -> dict:
    """Where each point stands: {x: knob or None, group: knob or None, ticks, slot per point, group per point,
    groups (legend labels)}. Two varying knobs: the first on the axis, the second in the legend (when every
    (x, group) pair is one point); otherwise one slot per point, labelled with every varying knob's value."""
    pts, varying = doc["points"], _varying(doc)
    short = short_names(varying) if varying else {}
    if len(varying) == 2:
        a, b = varying
        xs = list(dict.fromkeys(value(p["values"].get(a)) for p in pts))
        gs = list(dict.fromkeys(value(p["values"].get(b)) for p in pts))
        pairs = [(xs.index(value(p["values"].get(a))), gs.index(value(p["values"].get(b)))) for p in pts]
        if len(set(pairs)) == len(pairs):
            return {"x": a, "xlabel": short[a], "group": b, "ticks": xs,
                    "groups": [f"{short[b]} = {g}" for g in gs], "slot": [s for s, _ in pairs],
                    "in_group": [g for _, g in pairs]}
    if len(varying) == 1:
        ticks = [value(p["values"].get(varying[0])) for p in pts]
        xlabel = short[varying[0]]
    else:
        # values only, one line per knob in the order the axis label names them ('.': the recipe's own value)
        ticks = ["\n".join(value(p["values"][k]) if k in p["values"] else "." for k in varying) or p["id"]
                 for p in pts]
        xlabel = " / ".join(short[k] for k in varying) or "point"
    return {"x": varying[0] if len(varying) == 1 else None, "xlabel": xlabel, "group": None, "ticks": ticks,
            "groups": [None], "slot": list(range(len(pts))), "in_group": [0] * len(pts)}


def _same_memory(p: dict) -> bool:
    """The measured peak is the allocator's (what the estimate's `allocated` predicts)."""
    return str(_get(p, "measured", "memory_source") or "").startswith("torch.cuda")


def series(doc: dict) -> dict:
    """The axis and the panels the figure draws: per series one value per point (None: nothing drawn)."""
    pts = doc["points"]

    def mib(v):
        return v / MIB if v else None

    memory_same = all(_same_memory(p) for p in pts if p["measured"])
    sources = sorted({str(_get(p, "measured", "memory_source")) for p in pts if _get(p, "measured", "memory_source")})
    estimate_tok = [_get(p, "estimate", "tokens_per_s_per_gpu") for p in pts]
    rss = any("rss" in src.lower() for src in sources)
    notes = {"throughput": "" if any(v is not None for v in estimate_tok) else
             "no estimate drawn: the platform has no step-time model (see the notes under the table)",
             "memory": "" if memory_same else
             ("measured: the process's RSS" if rss else f"measured: {', '.join(sources) or 'nothing'}"[:60])
             + "; the estimate is the allocator's peak, not comparable: not drawn"}
    mem = [{"label": "measured", "kind": "bar",
            "values": [mib(_get(p, "measured", "peak_memory_bytes_max")) for p in pts]}]
    if memory_same:
        mem.append({"label": "estimate (allocated)", "kind": "marker",
                    "values": [mib(_get(p, "estimate", "allocated_bytes")) for p in pts]})
    return {"points": [p["id"] for p in pts], "verdicts": [_verdict(p) for p in pts], "axis": axis(doc), "panels": [
        {"title": "throughput: higher is better", "ylabel": "tokens/s/GPU", "note": notes["throughput"], "series": [
            {"label": "measured", "kind": "bar", "values": [_get(p, "measured", "tokens_per_s_per_gpu") for p in pts]},
            {"label": "estimate", "kind": "marker", "values": estimate_tok}]},
        {"title": "cost of the runs' steps at the steady-state step: lower is better", "ylabel": "GPU-hours",
         "note": "start-up +N above a bar: the rest of its runs' wall-clock (start-up, failed runs), kept apart",
         "series": [
             {"label": "steady-state steps", "kind": "bar", "values": [cost.steady_gpu_hours(p) for p in pts]},
             {"label": "start-up and the rest of the wall-clock", "kind": "label",
              "values": [cost.startup_gpu_hours(p) for p in pts]}]},
        {"title": "peak memory per rank (largest rank)", "ylabel": "MiB (process RSS)" if rss and not memory_same
         else "MiB", "note": notes["memory"], "series": mem}]}


def figure(doc: dict, data: dict | None = None):
    """The matplotlib Figure: one panel per entry of series(doc), bars per legend group, estimates as markers."""
    try:
        from matplotlib.figure import Figure  # lazy: matplotlib is optional (results without plots)
    except ImportError:
        raise NoPlotting("matplotlib is not installed: pip install 'moeforge[plots]' (the table, CSV and JSON "
                         "are written without it)") from None
    data = data or series(doc)
    ax_ = data["axis"]
    groups = ax_["groups"]
    width = 0.8 / len(groups)
    xpos = [s + (g - (len(groups) - 1) / 2) * width for s, g in zip(ax_["slot"], ax_["in_group"])]
    n = len(ax_["ticks"])
    fig = Figure(figsize=(max(7.0, 1.1 * n * max(1, len(groups) / 2) + 3), 9.0), layout="constrained")
    fig.suptitle(f"sweep {doc['sweep']['name']}: which value wins", fontsize=12)
    axes = fig.subplots(len(data["panels"]), 1, sharex=True)
    colors = [f"C{i}" for i in range(10)]
    for ax, panel in zip(axes, data["panels"]):
        bars = [None] * len(xpos)
        for s in panel["series"]:
            if s["kind"] == "label":  # beside the bar, not stacked on it: the bar is what the knob changed
                for i, v in enumerate(s["values"]):
                    if v is not None:
                        ax.annotate(f"start-up +{v:.3g}", (xpos[i], bars[i] or 0), xytext=(0, 2),
                                    textcoords="offset points", ha="center", va="bottom", fontsize=7, color="dimgrey")
                continue
            if s["kind"] == "marker":
                pts = [(x, v) for x, v in zip(xpos, s["values"]) if v is not None]
                if pts:
                    ax.scatter([x for x, _ in pts], [v for _, v in pts], marker="D", s=28, color="black", zorder=3,
                               label=s["label"])
                continue
            for g, name in enumerate(groups):
                idx = [i for i, gi in enumerate(ax_["in_group"]) if gi == g and s["values"][i] is not None]
                if not idx:
                    continue
                ax.bar([xpos[i] for i in idx], [s["values"][i] for i in idx], width * 0.9, color=colors[g % 10],
                       label=s["label"] if name is None else name)
            bars = list(s["values"])
        for i, verdict in enumerate(data["verdicts"]):
            if verdict:  # a point without a bar says why, where its bar would be
                ax.annotate(verdict, (xpos[i], 0), xytext=(0, 3), textcoords="offset points", ha="center",
                            va="bottom", rotation=90, fontsize=7, color="dimgrey")
        ax.set_title(panel["title"], fontsize=10, loc="left")
        ax.set_ylabel(panel["ylabel"])
        if panel["note"]:
            ax.set_xlabel(panel["note"], fontsize=7, color="dimgrey", loc="right")
        ax.margins(y=0.15)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[-1].set_xlim(-0.6, n - 0.4)  # every slot, a point without a bar at either end included
    axes[-1].set_xticks(range(n), ax_["ticks"], fontsize=9)
    note = data["panels"][-1]["note"]
    axes[-1].set_xlabel(ax_["xlabel"] + (f"\n{note}" if note else ""), loc="center", fontsize=9, color="black")
    return fig


def png(fig) -> bytes:
    """The figure as PNG bytes without a Software stamp, so the same results draw the same file."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def svg(fig) -> str:
    """The figure as inline SVG for results.html, dates and ids fixed so the page is deterministic."""
    import matplotlib  # lazy: as above

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "moeforge"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def table_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """The results table as headers and cells (plain text; the page escapes them)."""
    swept = doc["sweep"]["swept"]
    short = short_names(swept)
    base = doc["baseline"]
    headers = ["point", *[short[k] for k in swept], "status", "step ms (± half spread)", "tok/s/GPU", "est. tok/s/GPU",
               "peak MiB (largest rank)", "est. allocated MiB", "steady-state GPU-h", "start-up GPU-h"]
    headers += [f"vs {base}"] if base else []
    body = []
    for p in doc["points"]:
        m, e, rel = p["measured"] or {}, p["estimate"] or {}, p["relative"] or {}
        step = m.get("step_time_s") or {}
        spread = f" (±{step['spread'] * 1e3 / 2:.1f})" if step.get("spread") is not None else ""
        ratio_ = (p["ratio"] or {}).get("tokens_per_s_per_gpu")
        cells = [p["id"], *[value(p["values"][k]) if k in p["values"] else "." for k in swept],
                 _verdict(p) or "ok", (num(step["median"] * 1e3, ".1f") + spread) if step.get("median") else "-",
                 num(m.get("tokens_per_s_per_gpu"), ".0f"),
                 num(e.get("tokens_per_s_per_gpu"), ".0f") + (f" (x{ratio_:.2f})" if ratio_ else ""),
                 num(m["peak_memory_bytes_max"] / MIB, ".0f") if m.get("peak_memory_bytes_max") else "-",
                 num(e["allocated_bytes"] / MIB, ".1f") if e.get("allocated_bytes") else "-",
                 _hours(cost.steady_gpu_hours(p)), _hours(cost.startup_gpu_hours(p))]
        if base:
            cells.append(f"step x{rel['step_time']:.2f}, tok/s x{rel['tokens_per_s_per_gpu']:.2f}" if rel else "-")
        body.append(cells)
    return headers, body


def _hours(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.3g}"


def _notes(doc: dict) -> list[str]:
    pts = doc["points"]
    out = [f"peak memory measured as {s}" for s in sorted({str(_get(p, "measured", "memory_source"))
                                                           for p in pts if _get(p, "measured", "memory_source")})]
    out += sorted({n for p in pts for n in ((p["ratio"] or {}).get("notes") or [])})
    out += [f"estimates: {c}" for c in sorted({str(_get(p, "estimate", "calibration")) for p in pts
                                               if _get(p, "estimate", "calibration")})]
    out += [f"{p['id']} {p['status']}: {p['error']}" for p in pts
            if p["status"] not in ("ok", "duplicate", "refused") and p["error"]]
    return out


def page(doc: dict, fig, table_text: str | None = None) -> str:
    """A self-contained HTML page: title, the figure as inline SVG, the table as an HTML table, its notes; every
    text escaped (``table_text``, the terminal's table, is not used: the page has its own)."""
    esc = html.escape
    title = esc(f"moeforge sweep {doc['sweep']['name']}")
    headers, body = table_rows(doc)
    thead = "<tr>" + "".join(f"<th scope=\"col\">{esc(h)}</th>" for h in headers) + "</tr>"
    tbody = "\n".join("<tr>" + "".join(f"<th scope=\"row\">{esc(c)}</th>" if i == 0 else f"<td>{esc(c)}</td>"
                                       for i, c in enumerate(row)) + "</tr>" for row in body)
    notes = "".join(f"<li>{esc(n)}</li>" for n in _notes(doc))
    summary = esc(f"{len(doc['points'])} point(s) of {doc['sweep'].get('recipe') or '?'}, "
                  f"{doc['sweep']['repeats']} repeat(s), {doc['sweep']['warmup_steps']} warm-up step(s) skipped "
                  f"per run ({doc['directory']})")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title>\n<style>body{{font-family:sans-serif;margin:1.5em}}"
            "table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:.25em .6em;"
            "text-align:right}thead th{background:#f0f0f0}tbody th{text-align:left}"
            "figure{margin:0}svg{max-width:100%;height:auto}</style></head>\n<body>\n"
            f"<h1>{title}</h1>\n<p>{esc(doc['sweep'].get('description') or '')}</p>\n<p>{summary}</p>\n"
            f"<figure>{svg(fig)}</figure>\n<h2>results</h2>\n"
            f"<table>\n<thead>{thead}</thead>\n<tbody>\n{tbody}\n</tbody>\n</table>\n"
            f"<ul>{notes}</ul>\n</body></html>\n")
