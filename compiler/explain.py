"""`moeforge explain`: every decision, its value, and where it came from or why."""
from __future__ import annotations

from . import knobs as K
from .pipeline import Resolved

ORDER = {"override": 0, "pinned": 1, "rule": 2, "megatron": 3, "preference": 4, "model": 5,
         "platform": 6, "derived": 7, "default": 8}
LEGEND = ("precedence (lowest first): platform, model, extends ancestors, the recipe, --set overrides; "
          "then the solver: rules force, preferences choose, megatron-core defaults fill the rest")


def explain(r: Resolved) -> str:
    rows = []
    for d in sorted(r.decisions.values(), key=lambda d: (ORDER.get(d.source, 9), K.display(d.field))):
        if d.field not in K.BY_FIELD:
            continue
        why = d.where or d.reason or ""
        if d.rule and d.source in ("rule", "preference", "megatron"):
            why = f"{d.rule}: {d.reason}"
        rows.append((K.display(d.field), _show(d.value), d.source, why))
    width = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{r.composed.recipe_id}  ({r.composed.file})", *_files(r), LEGEND, ""]
    lines += [f"{a:<{width[0]}}  {b:<{width[1]}}  {c:<{width[2]}}  {d}" for a, b, c, d in rows]
    if r.diagnostics:
        lines += ["", *[d.render() for d in r.diagnostics]]
    return "\n".join(lines)


def _files(r: Resolved) -> list[str]:
    """Which platform and model file won: the project's (recipes/platforms/...) or the built-in one."""
    from pathlib import Path

    from . import project
    from .compose import display_path

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
