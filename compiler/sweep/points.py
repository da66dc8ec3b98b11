"""The points of a sweep and their compile.

A point is the base recipe with the sweep's fixed overrides, then its own values, as `--set` overrides
(so a knob path means what it means to `moeforge compile --set`), and `name=<sweep>-<point>` so every
job, log and PyTorchJob of the sweep has a name of its own. Each point goes through the same compile as
`moeforge check` (moeforge.compiler.driver.compile); a refused point keeps its diagnostics, moved from the `--set`
text to the line of the sweep file that set the value.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field, replace

from moeforge.compiler import driver
from moeforge.compiler.diagnostics import CompileError, Note, Position, error
from moeforge.compiler.recipe.compose import resolve_recipe
from moeforge.compiler.sweep.document import Knob, Sweep

MAX_POINTS = 1000


@dataclass(frozen=True)
class Point:
    index: int
    id: str                       # p00, p01, ...
    knobs: tuple                  # Knob, ...: the point's own values (axes, then an explicit point's)

    @property
    def values(self) -> dict:
        """The point's knob values by dotted path, as the check and the results table list them."""
        return {k.name: k.value for k in self.knobs}


@dataclass
class Compiled:
    point: Point
    overrides: list                       # the --set texts, fixed ones first
    plan: dict | None = None
    composed: object = None               # compose.Composed, for emit
    warnings: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # the diagnostics of a refused point
    fingerprint: str | None = None

    @property
    def refused(self) -> bool:
        """Whether the compile refused the point (no plan): such a point is reported, never launched."""
        return self.plan is None


def expand(sweep: Sweep) -> list[Point]:
    """The product of the axes (the first axis slowest), then the explicit points."""
    combos = list(itertools.islice(itertools.product(*[knobs for _, knobs in sweep.axes]), MAX_POINTS + 1)) \
        if sweep.axes else []
    rows = combos + [tuple(p) for p in sweep.points]
    if len(rows) > MAX_POINTS:
        where = sweep.axes[0][1][0].key_pos if sweep.axes else sweep.points[0][0].key_pos
        raise CompileError([error("E_SWEEP_TOO_MANY_POINTS", f"the sweep has more than {MAX_POINTS} points", where,
                                  help="split it into several sweeps, or drop values from the axes")])
    width = max(2, len(str(len(rows) - 1)))
    return [Point(i, f"p{i:0{width}d}", tuple(row)) for i, row in enumerate(rows)]


def set_text(k: Knob) -> str:
    """The --set text for a knob: its value as YAML flow text, which the --set parser (YAML) reads back as
    written (JSON would do, but for a character outside the Basic Multilingual Plane: JSON writes it as a
    surrogate pair, which YAML reads as two characters, so /tmp/d\U0001F600x would land in the plan as the
    text "/tmp/d\\ud83d\\ude00x")."""
    return f"{k.name}={flow(k.value)}"


def flow(value) -> str:
    """A scalar or a flat list as YAML flow text; a string double-quoted, every character outside printable
    ASCII escaped the way YAML reads it back (\\xNN, \\uNNNN, \\UNNNNNNNN)."""
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if not isinstance(value, str):
        return json.dumps(value)
    out = []
    for ch in value:
        n = ord(ch)
        if ch in "\\\"":
            out.append("\\" + ch)
        elif 0x20 <= n < 0x7f:
            out.append(ch)
        else:
            out.append(f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")
    return '"' + "".join(out) + '"'



def compile_recipe(recipe: str, overrides: list[str]):
    """(composed, plan, warnings): the compile `moeforge check` and `compile` run; CompileError when refused."""
    compiled = driver.compile(recipe, overrides)
    return compiled.composed, compiled.plan, list(compiled.diagnostics)


def compile_point(sweep: Sweep, point: Point) -> Compiled:
    """Compile one point as `moeforge compile --set ...` would; errors are located at the sweep file's value."""
    knobs = [*sweep.fixed, *point.knobs]
    overrides = [set_text(k) for k in knobs] + [f"name={sweep.name}-{point.id}"]
    out = Compiled(point, overrides)
    where = {f"--set {set_text(k)}": k.value_pos for k in knobs}
    try:
        out.composed, out.plan, warnings = compile_recipe(sweep.recipe, overrides)
    except CompileError as exc:
        out.errors = [_located(d, where) for d in exc.diagnostics]
        return out
    out.warnings = [_located(d, where) for d in warnings]
    out.fingerprint = fingerprint(out.plan, out.composed.data)
    return out


def compile_all(sweep: Sweep, points: list[Point]) -> list[Compiled]:
    """Every point compiled; CompileError at the `recipe:` line when the base recipe does not resolve (one
    error for the sweep, not the same one per point)."""
    check_recipe(sweep)
    return [compile_point(sweep, p) for p in points]


def check_recipe(sweep: Sweep) -> None:
    """The sweep's base recipe resolves as every command resolves an id (compose.resolve_recipe)."""
    try:
        resolve_recipe(sweep.recipe)
    except CompileError as exc:
        where = sweep.doc.pos(("recipe",)) if sweep.doc is not None else Position(sweep.file)
        raise CompileError([replace(d, pos=where) for d in exc.diagnostics]) from None


def _located(d, where: dict):
    """A diagnostic whose position (or a note's) is a `--set` text of the sweep: at the sweep's line instead."""
    def move(pos: Position | None) -> Position | None:
        return where.get(pos.file, pos) if pos is not None else None

    notes = tuple(Note(n.text, move(n.pos)) for n in d.notes)
    return replace(d, pos=move(d.pos), notes=notes)


# what differs between the points of a sweep without changing what runs: who the point is and how each
# value was decided (provenance), never what the runtime builds or how it is launched
IDENTITY = ("recipe", "decisions", "warnings", "moeforge_version")


def fingerprint(plan: dict, composed_data: dict) -> str:
    """What a point launches: the plan (the runtime's only input; the Megatron-LM args and Bridge
    overrides are functions of it) without its identity and provenance, and the launch settings."""
    launched = {k: v for k, v in plan.items() if k not in IDENTITY}
    launched["launch"] = composed_data.get("launch") or {}
    text = json.dumps(launched, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
