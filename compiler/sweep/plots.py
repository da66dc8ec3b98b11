"""The results as pictures (matplotlib, imported here only): throughput (tokens/s/GPU) and peak memory per
point, each measured beside the planner's estimate, as results.png and a self-contained results.html (the
figure as inline SVG, with text kept as text, and the table; no script, nothing fetched). The series drawn
are also returned as data (results.plot.json), so what the picture shows can be checked without reading
pixels. Every point has its place on the x axis, a refused or collapsed one with its verdict under it."""
from __future__ import annotations

import html
import io
import math

MIB = 2 ** 20


class NoPlotting(Exception):
    """matplotlib is not installed (it is an optional dependency of the compiler)."""


def series(doc: dict) -> dict:
    """The panels and series the figure draws: values per point, None where there is nothing to draw."""
    pts = doc["points"]

    def get(p, *path):
        node = p
        for key in path:
            node = (node or {}).get(key)
        return node

    def mem(p, *path):
        v = get(p, *path)
        return v / MIB if v else None

    labels = [p["id"] + ("" if p["status"] == "ok" else f"\n= {p['duplicate_of']}" if p["duplicate_of"]
                         else f"\n{p['status']}") for p in pts]
    return {"points": [p["id"] for p in pts], "labels": labels, "panels": [
        {"title": "throughput", "ylabel": "tokens/s/GPU", "series": [
            {"label": "measured", "values": [get(p, "measured", "tokens_per_s_per_gpu") for p in pts]},
            {"label": "estimate", "values": [get(p, "estimate", "tokens_per_s_per_gpu") for p in pts]}]},
        {"title": "peak memory per rank (largest rank)", "ylabel": "MiB", "series": [
            {"label": "measured", "values": [mem(p, "measured", "peak_memory_bytes_max") for p in pts]},
            {"label": "estimate (allocated)", "values": [mem(p, "estimate", "allocated_bytes") for p in pts]}]}]}


def figure(doc: dict, data: dict | None = None):
    """The matplotlib Figure: one panel per entry of series(doc), one bar container per series."""
    try:
        from matplotlib.figure import Figure  # lazy: matplotlib is optional (results without plots)
    except ImportError:
        raise NoPlotting("matplotlib is not installed: pip install 'moeforge[plots]' (the table, CSV and JSON "
                         "are written without it)") from None
    data = data or series(doc)
    n = len(data["points"])
    fig = Figure(figsize=(max(6.0, 0.9 * n + 2), 7.0), layout="constrained")
    axes = fig.subplots(len(data["panels"]), 1)
    width = 0.38
    for ax, panel in zip(axes, data["panels"]):
        for k, s in enumerate(panel["series"]):
            values = [math.nan if v is None else v for v in s["values"]]
            offset = (k - (len(panel["series"]) - 1) / 2) * width
            ax.bar([i + offset for i in range(n)], values, width, label=s["label"],
                   hatch="//" if k else None, alpha=0.85)
        ax.set_title(panel["title"])
        ax.set_ylabel(panel["ylabel"])
        ax.set_xticks(range(n), data["labels"], fontsize=8)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"sweep {doc['sweep']['name']}: measured beside estimated")
    return fig


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def svg(fig) -> str:
    import matplotlib  # lazy: as above

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "moeforge"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def page(doc: dict, fig, table_text: str) -> str:
    """A self-contained HTML page: title, the figure as inline SVG, the table."""
    title = html.escape(f"moeforge sweep {doc['sweep']['name']}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title>\n<style>body{{font-family:sans-serif;margin:1.5em}}"
            "pre{font-size:12px;background:#f6f6f6;padding:1em;overflow-x:auto}</style></head>\n<body>\n"
            f"<h1>{title}</h1>\n<p>{html.escape(doc['sweep'].get('description') or '')}</p>\n"
            f"<figure>{svg(fig)}</figure>\n<h2>results</h2>\n<pre>{html.escape(table_text)}</pre>\n</body></html>\n")
