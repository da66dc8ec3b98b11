"""`moeforge explain`: every decision, its value, and where it came from or why."""
from __future__ import annotations

import json
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.knobs import table as K
from moeforge.compiler.recipe.compose import display_path
from moeforge.compiler.rules import hazards as H
from moeforge.compiler.knobs.display import display
from moeforge.compiler.solver.values import Resolved

ORDER = {"override": 0, "pinned": 1, "rule": 2, "megatron": 3, "preference": 4, "solver": 5, "model": 6,
         "platform": 7, "derived": 8, "default": 9}
LEGEND = ("precedence (lowest first): platform, model, extends ancestors, the recipe, --set overrides; "
          "then the solver: rules force, preferences choose, megatron-core defaults fill the rest")


def changed(d) -> bool:
    """The decision's value is not the knob's megatron-core default."""
    return d.value != K.BY_FIELD[d.field].default


def decisions(r: Resolved, only_changed: bool = False) -> list:
    """The table's rows: knobs only, by source precedence (ORDER) then name; only_changed drops Megatron defaults."""
    rows = [d for d in r.decisions.values() if d.field in K.BY_FIELD and (not only_changed or changed(d))]
    return sorted(rows, key=lambda d: (ORDER.get(d.source, 99), display(d.field)))


def why(d) -> str:
    """The table's last column: the rule and its reason for a solver decision, else where the value was set."""
    if d.rule and d.source in ("rule", "preference", "megatron"):
        return f"{d.rule}: {d.reason}"
    return d.where or d.reason or ""


def _estimate_line(e: dict) -> str:
    time = (f"step {e['step_time_s']:.4g} s ({e['dominant']})" if e["step_time_s"] is not None
            else "no step time (the platform has no performance block and no calibration)")
    return f"estimate: {time}, peak memory {e['peak_memory_gib']:.3g} GiB per rank; {e['calibration_note']}"


def explain(r: Resolved, fmt: str = "text", only_changed: bool = False, estimated: dict | None = None) -> str:
    """`moeforge explain`'s output: the decision table as text, or JSON with diagnostics and cleared hazards."""
    chosen = decisions(r, only_changed)
    if fmt == "json":
        return json.dumps({"recipe": r.composed.recipe_id, "file": r.composed.file, "changed_only": only_changed,
                           **({"estimate": estimated} if estimated is not None else {}),
                           "decisions": [{"knob": display(d.field), "field": d.field, "value": d.value,
                                          "source": d.source, "rule": d.rule, "where": d.where, "reason": d.reason,
                                          "default": K.BY_FIELD[d.field].default, "auto": d.field in r.auto}
                                         for d in chosen],
                           "diagnostics": [d.to_json() for d in r.diagnostics],
                           "hazards_cleared_by_versions": [H.plan_entry(h) for h in _cleared(r)]},
                          indent=2, default=str)
    rows = [(display(d.field), _show(d.value), d.source, why(d)) for d in chosen]
    width = [max([len(row[i]) for row in rows] or [0]) for i in range(3)]
    lines = [f"{r.composed.recipe_id}  ({r.composed.file})", *_files(r),
             *([_estimate_line(estimated)] if estimated is not None else []), LEGEND, ""]
    if only_changed:
        lines[-1:] = ["only the values that differ from megatron-core's defaults (--changed)", ""]
    lines += [f"{a:<{width[0]}}  {b:<{width[1]}}  {c:<{width[2]}}  {d}".rstrip() for a, b, c, d in rows]
    if r.diagnostics:  # rules' and field hazards' (HAZARD_*) findings, side by side
        lines += ["", *[d.render() for d in r.diagnostics]]
    cleared = _cleared(r)
    if cleared:
        lines += ["", "field hazards cleared only by the platform's versions (moeforge hazards; plan.json lists them):",
                  *[f"  {h.id} ({h.symptom}): applies when " + ", ".join(f"{p} {s}" for p, s in h.affected)
                    for h in cleared]]
    return "\n".join(lines)


def _cleared(r: Resolved) -> list:
    return H.cleared_by_versions(r.env, H.platform_versions(r.composed.data.get("platform")))


def _files(r: Resolved) -> list[str]:
    """Which platform and model file won: the project's (recipes/platforms/...) or the built-in one."""
    out = []
    for key in ("platform", "model"):
        path = r.composed.files.get(key)
        if path:
            shown = display_path(Path(path), project.recipes())
            where = f"{shown}: {path}" if shown.startswith(project.BUILTIN_PREFIX) else shown
            out.append(f"{key} {(r.composed.data.get(key) or {}).get('name', '?')} from {where}")
    return out


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
