"""The planner against tuned Megatron-Bridge configurations (issue 15's acceptance check).

For each tuned row (tests/data/bridge_tuned_layouts.json, parsed from the Megatron-Bridge perf
recipes): plan-layout with the same model, platform, GPU count, sequence length and GBS must
(a) find the tuned layout legal (compiled through the pipeline) and within memory, and (b) rank it
in its top RANK_LIMIT or estimate it within RATIO_LIMIT of its own best.  Run as a module to print
the table (``--update-readme``: into README.md between its validation markers, as `make validate-layouts`
does):  python -m moeforge.compiler.planner.validation tests/data/bridge_tuned_layouts.json [--update-readme]
"""
from __future__ import annotations

import json
import sys

from moeforge.compiler.diagnostics import CompileError, printable
from moeforge.compiler.knobs.layout import LayoutError
from moeforge.compiler.planner import search, space, splits

RANK_LIMIT = 10       # issue 15: "rank it in its top 10
RATIO_LIMIT = 1.15    # or estimate it within 15 % of its own best"


def tuned_candidate(row: dict, s: space.Setting) -> space.Candidate:
    """A tuned Bridge configuration as a planner candidate, so the planner estimates exactly that layout."""
    split = row.get("pipeline_split") or splits.conventional(s.arch, row["pp"], row["vpp"]) or "even"
    return space.Candidate(tp=row["tp"], pp=row["pp"], vpp=row["vpp"], cp=row["cp"], ep=row["ep"], etp=row["etp"],
                           mbs=row["mbs"], split=split, dispatcher=row["dispatcher"], backend=row["flex_backend"],
                           ep_overlap=row["ep_overlap"], delay_wgrad=row["delay_wgrad"], recompute=row["recompute"],
                           modules=tuple(row["recompute_modules"]) if row["recompute"] == "selective" else ())


def row_setting(row: dict) -> space.Setting:
    """The planner setting a tuned configuration ran under (model, platform, GPUs, seq, GBS, routing)."""
    return search.setting(row["model"], row["platform"], row["ngpu"], row["seq"], row["gbs"],
                          row["force_load_balancing"])


def tuned_plan(row: dict) -> dict:
    """The compiled plan of a tuned row's layout and settings (LayoutError, CompileError as raised)."""
    s = row_setting(row)
    cand = tuned_candidate(row, s)
    cand.layout(s)
    comp = search.Compiler(s)
    try:
        return comp.compile(cand.recipe(s))
    finally:
        comp.close()


def validate(row: dict, searched=None) -> dict:
    """rank (1 + analytic candidates estimated faster: an upper bound), the tuned and best estimates
    (``searched``: the search of a setting, search.search(s, top=1) unless given, so that a caller asking for
    the same searches again can keep them)."""
    s = row_setting(row)
    cand = tuned_candidate(row, s)
    out = {"row": f"{row['model']} {row['gpu']} x{row['ngpu']}", "layout": cand.describe(), "legal": False,
           "within_memory": False, "rank": None, "tuned_s": None, "best_s": None, "ratio": None, "reasons": []}
    try:
        lay = cand.layout(s)
    except LayoutError as exc:
        out["reasons"] = [f"layout: {exc}"]
        return out
    try:
        plan = tuned_plan(row)
    except CompileError as exc:
        out["reasons"] = search.reasons_of(exc)
        return out
    ev = search.measure(search.Evaluated(cand, lay), plan, s.capacity_gb)
    result = (searched or (lambda setting: search.search(setting, top=1)))(s)
    best = min([e.step_s for e in result.ranked[:1]] + [ev.step_s])
    out.update(legal=True, within_memory=ev.feasible, reasons=ev.reasons, tuned_s=ev.step_s, best_s=best,
               ratio=ev.step_s / best, memory_gb=ev.memory_gb,
               rank=1 + sum(e.step_s < ev.step_s for e in result.estimated))
    return out


def passes(v: dict) -> bool:
    """Issue 15's bar: legal, within memory, and ranked in the top RANK_LIMIT or within RATIO_LIMIT of the best."""
    return v["legal"] and v["within_memory"] and (v["rank"] <= RANK_LIMIT or v["ratio"] <= RATIO_LIMIT)


def table(results: list[dict]) -> str:
    """The validation results as a Markdown table, for the report the acceptance check writes."""
    lines = ["| tuned configuration | layout | legal | memory GB | rank | tuned s | best s | ratio | pass |",
             "|---|---|---|---|---|---|---|---|---|"]
    for v in results:
        mem = f"{v['memory_gb']:.1f}" if v.get("memory_gb") is not None else "-"
        num = (lambda x, f: f.format(x) if x is not None else "-")
        over = " (over)" if v.get("memory_gb") is not None and not v["within_memory"] else ""
        lines.append(f"| {v['row']} | {v['layout']} | {'yes' if v['legal'] else 'no'} | {mem}{over} | "
                     f"{num(v['rank'], '{}')} | "
                     f"{num(v['tuned_s'], '{:.2f}')} | {num(v['best_s'], '{:.2f}')} | {num(v['ratio'], '{:.2f}')} | "
                     f"{'yes' if passes(v) else 'no'} |")
    return "\n".join(lines)


README_BEGIN, README_END = "<!-- validation:begin -->", "<!-- validation:end -->"


def update_readme(text: str, results: list[dict]) -> str:
    """README text with the table between the validation markers replaced (unchanged without them)."""
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        return text
    passed = sum(passes(v) for v in results)
    folds = sum(not (v["reasons"] and v["reasons"][0].startswith("layout: ")) for v in results)
    return (text[:begin + len(README_BEGIN)] + "\n" + table(results) + f"\n\n{passed} of the {folds} rows whose "
            f"layout folds pass ({len(results)} rows; written by `make validate-layouts`).\n" + text[end:])


if __name__ == "__main__":
    from pathlib import Path

    rows = json.load(open(sys.argv[1]))["rows"]
    results = [validate(r) for r in rows]
    print("\n".join(map(printable, table(results).split("\n"))))
    if "--update-readme" in sys.argv[2:]:
        from moeforge.compiler.files import write_file_atomically

        readme = Path(__file__).resolve().parents[2] / "README.md"
        write_file_atomically(readme, update_readme(readme.read_text(), results))
