"""Points whose launches are identical run once: each later one is collapsed into the first, naming the
swept knob that changed nothing and why, from the plans' own provenance (plan.json `decisions`): pinned
elsewhere, forced by a rule, rewritten by the front-end, chosen by the solver, or read by no launch here.

(Megatron-Bridge issue 6006: a recipe default silently overrode the swept value, and the sweep ran one
configuration twice.)"""
from __future__ import annotations

import json
from dataclasses import dataclass

from moeforge.compiler.sweep.points import Compiled

# plan decision source -> the kind of reason, as results.json and `sweep check` name it
WHY = {"pinned": "pinned elsewhere", "model": "pinned elsewhere", "platform": "pinned elsewhere",
       "rule": "forced by a rule", "megatron": "rewritten by the front-end", "preference": "chosen by the solver",
       "solver": "chosen by the solver", "derived": "derived from other values", "default": "megatron-core's default",
       "override": "set by the sweep"}
UNSET = "(the recipe's)"


@dataclass(frozen=True)
class Knob:
    knob: str
    values: dict          # point id -> the value the point sets (UNSET where it sets none)
    planned: object       # the value both plans have (None when they differ: a value no launch reads)
    why: str              # one of WHY's values, or "read by no launch here", or "the same value"
    detail: str

    def to_json(self) -> dict:
        """The manifest's record of one collapsed knob (builds.py writes it beside the duplicate point)."""
        return {"knob": self.knob, "values": self.values, "planned": self.planned, "why": self.why,
                "detail": self.detail}


@dataclass(frozen=True)
class Collapsed:
    point: str
    twin: str             # the earlier point with the same launch, which runs
    knobs: tuple          # Knob, ...

    def text(self) -> str:
        """One line saying which point this one duplicates and why, for the check's output and the manifest."""
        if not self.knobs:
            return f"{self.point} = {self.twin}: the same values"
        return f"{self.point} = {self.twin}: " + "; ".join(k.detail for k in self.knobs)


def collapse(compiled: list[Compiled]) -> dict[str, Collapsed]:
    """point id -> how it collapses into an earlier point with the same launch (refused points take no part)."""
    first: dict[str, Compiled] = {}
    out = {}
    for c in compiled:
        if c.refused:
            continue
        twin = first.setdefault(c.fingerprint, c)
        if twin is not c:
            out[c.point.id] = Collapsed(c.point.id, twin.point.id, tuple(_knobs(c, twin)))
    return out


def _knobs(a: Compiled, b: Compiled) -> list[Knob]:
    va, vb = a.point.values, b.point.values
    out = []
    for name in dict.fromkeys([*vb, *va]):
        x, y = va.get(name, UNSET), vb.get(name, UNSET)
        if _same(x, y):
            continue
        shown = {a.point.id: _as_set(x, a, name), b.point.id: _as_set(y, b, name)}
        out.append(explain(name, {a.point.id: x, b.point.id: y}, _decision(a.plan, name), _decision(b.plan, name),
                           shown))
    return out


def _as_set(value, c: Compiled, name: str) -> str:
    """How a point's setting of a knob reads: its value, or the recipe's own where the point sets none."""
    if value != UNSET:
        return json.dumps(value)
    node = c.composed.data
    for part in name.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return f"{json.dumps(node)} {UNSET}"


def _same(x, y) -> bool:
    return json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)


def _decision(plan: dict, knob: str) -> dict | None:
    return next((d for d in plan.get("decisions", ()) if d.get("knob") == knob), None)


def explain(knob: str, values: dict, da: dict | None, db: dict | None, texts: dict | None = None) -> Knob:
    """Why a knob set to different values in two points left their launches identical (texts: point ->
    how its setting reads, default its value)."""
    shown = ", ".join(f"{(texts or {}).get(p) or _show(v)} in {p}" for p, v in values.items())
    if da is None or db is None:
        return Knob(knob, values, None, "read by no launch here",
                    f"{knob} ({shown}) is not a value the plan or the launch reads")
    if not _same(da["value"], db["value"]):
        return Knob(knob, values, None, "read by no launch here",
                    f"{knob} ({shown}) is planned differently ({_show(da['value'])} and {_show(db['value'])}) but "
                    "no launch reads it in this configuration")
    # the same value in both plans: the side whose own setting is not what was planned says why
    (pa, xa), (pb, xb) = values.items()
    decided = [(p, d) for p, x, d in ((pa, xa, da), (pb, xb, db)) if d["source"] != "override" or not _same(x, d["value"])]
    point, d = decided[0] if decided else (pa, da)
    why = WHY.get(d["source"], d["source"]) if decided else "the same value"
    return Knob(knob, values, d["value"], why, f"{knob} ({shown}) changed nothing: {_reason(d, point)}")


def _reason(d: dict, point: str) -> str:
    value, source = _show(d["value"]), d["source"]
    if source == "rule":
        return f"in {point} rule {d['rule']} forces {value} ({d.get('reason')})"
    if source == "megatron":
        return f"in {point} the front-end rewrites it to {value} ({d.get('rule')}: {d.get('reason')})"
    if source in ("preference", "solver"):
        return f"in {point} the solver chooses {value}" + (f" ({d['rule']}: {d.get('reason')})" if d.get("rule") else "")
    if source in ("pinned", "model", "platform"):
        return f"in {point} it is pinned to {value} at {d.get('where')}"
    if source == "default":
        return f"in {point} it is megatron-core's default, {value}"
    if source == "derived":
        return f"in {point} it is derived as {value} ({d.get('reason')})"
    return f"both points plan {value}"


def _show(v) -> str:
    return v if v == UNSET else json.dumps(v)
