"""`moeforge diff A B`: what differs between two recipes or two compiled plans, knob by knob.

A reviewer of a recipe change wants the resolved difference (after extends, platform,
model and the solver), with where each side's value came from.
"""
from __future__ import annotations

import json
from pathlib import Path

from moeforge.compiler.bounded import LIMITS, Unreadable, read_json
from moeforge.compiler.diagnostics import CompileError, Position, error, printable
from moeforge.compiler import driver
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.display import display
from moeforge.compiler.targets.plan import environment


def _side(ref: str, overrides=()) -> tuple[str, dict, dict]:
    """(display name, field -> decision, the plan's env section: NAME -> {value, reason})."""
    path = Path(ref)
    if path.suffix == ".json" or path.is_dir():
        plan_path = path / "plan.json" if path.is_dir() else path
        try:
            plan = read_json(plan_path, LIMITS["plan"])
            return str(plan_path), {d["field"]: d for d in plan["decisions"]}, dict(plan.get("env") or {})
        except Unreadable as exc:
            why = str(exc)
        except (KeyError, TypeError, AttributeError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        raise CompileError([error("E_NOT_A_PLAN", f"not a compiled plan.json ({why})", Position(str(plan_path)),
                                  help="give a recipe id, a build/<recipe> directory or its plan.json")])
    r = driver.compile(ref, overrides, plan=False).resolved
    return r.composed.file, {f: {"field": f, "value": d.value, "source": d.source, "where": d.where,
                                 "rule": d.rule, "reason": d.reason} for f, d in r.decisions.items()}, \
        environment(r.env)


def diff(a: str, b: str) -> list[dict]:
    """The knobs, facts and launch environment that differ between the two sides, each with where it came from."""
    (_, left, left_env), (_, right, right_env) = _side(a), _side(b)
    out = []
    for field in [k.field for k in K.KNOBS] + [k.field for k in K.FACTS]:
        x, y = left.get(field), right.get(field)
        vx, vy = (x or {}).get("value"), (y or {}).get("value")
        if not same(vx, vy):
            out.append({"knob": display(field), "field": field, "a": vx, "b": vy,
                        "a_from": _origin(x), "b_from": _origin(y)})
    for name in sorted(left_env.keys() | right_env.keys()):  # launch-time environment (plan.json's env)
        x, y = left_env.get(name), right_env.get(name)
        vx, vy = (x or {}).get("value"), (y or {}).get("value")
        if not same(vx, vy):
            out.append({"knob": f"env {name}", "field": f"env.{name}", "a": vx, "b": vy,
                        "a_from": (x or {}).get("reason") or "not set", "b_from": (y or {}).get("reason") or "not set"})
    return out


def same(a, b) -> bool:
    """Equal as plan.json states them: 1, 1.0 and true are three values (Python's == calls them one; the
    runtime does not: a layout size of 1.0 is no size), so are 0 and false."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _origin(d: dict | None) -> str:
    if not d:
        return "absent"
    if d.get("source") in ("rule", "preference", "megatron") and d.get("rule"):
        return f"{d['source']} {d['rule']}"
    return d.get("where") or d.get("source", "?")


def render(rows: list[dict], a: str, b: str, fmt: str = "text") -> str:
    """The differences as a unified-diff-like text (--- a, +++ b) or as JSON rows."""
    if fmt == "json":
        return json.dumps(rows, indent=2, default=str)
    if not rows:
        return f"{a} and {b} resolve to the same configuration"
    lines = [f"--- {a}", f"+++ {b}"]
    for r in rows:
        env = r["field"].startswith("env.")
        shown = [("(unset)" if env and v is None else json.dumps(v)) for v in (r["a"], r["b"])]
        lines.append(f"{r['knob']}: {shown[0]} -> {shown[1]}")
        lines.append(f"    a: {r['a_from']}")
        lines.append(f"    b: {r['b_from']}")
    return "\n".join(lines)


def arguments(c) -> None:
    """diff's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("a", help="recipe id or path, build/<recipe> directory, or plan.json")
    c.add_argument("b", help="the other side, the same kinds as A")
    c.add_argument("--format", choices=("text", "json"), default="text", help="output: text (default) or json")


def run(args) -> int:
    """Print the differences; exit 1 when the sides differ, 0 when they resolve alike (as diff(1) does)."""
    rows = diff(args.a, args.b)
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
    else:  # the two arguments and the documents' values, for a terminal
        print("\n".join(map(printable, render(rows, args.a, args.b).split("\n"))))
    return 1 if rows else 0
