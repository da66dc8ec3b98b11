"""Explaining a recipe that cannot be solved: every violation, minimal pins, concrete fixes.

Each violated rule (or minimal set of rules that conflict together) is reported with the
smallest set of pins that takes part, found by setting pins free one at a time, and for each
pin the values it could take instead. All of it runs within a time budget.
"""
from __future__ import annotations

import time

import z3

from . import knobs as K
from .diagnostics import Diagnostic, Note, Position
from .encoding import _limit
from .problem import _DERIVED, _LAYOUT, _SPEC, EXPLAIN_S, _deadline, _fixed, _out_of_time, _Problem
from .rules import Rule


def _unsat(rules: list[Rule], pins: dict, relaxed: set[str]) -> bool:
    """Do these rules conflict with the pins when the `relaxed` pins are set free? (False: not shown)"""
    problem = _Problem(rules, _fixed(pins, relaxed))
    if problem.violated:
        return True
    if _out_of_time():
        return False
    enc = problem.encoding()
    s = _limit(z3.Solver(ctx=enc.ctx))
    s.add(*enc.domain, *[enc.term(e) for e in problem.residual.values()])
    return s.check() == z3.unsat


def explain(pins, rules, problem) -> list[Diagnostic]:
    """Every violation, each with its minimal conflicting pins and fixes, within EXPLAIN_S."""
    _deadline[0] = time.monotonic() + EXPLAIN_S
    try:
        return _explain_within_budget(pins, rules, problem)
    finally:
        _deadline[0] = float("inf")


def _explain_within_budget(pins, rules, problem) -> list[Diagnostic]:
    groups = [[r] for r in problem.violated]
    sound = [r for r in rules if r not in problem.violated]
    if not groups or _unsat(sound, pins, set()):
        groups.append(_rule_core(sound, pins))
    return [_violation(pins, group, _pin_core(group, pins, sound), sound) for group in groups if group]


def explain_rules(pins, rules, problem) -> list[list[Rule]]:
    """Only which rules conflict, grouped as explain() groups them (each violated rule; a minimal set of the
    others that conflict together), within EXPLAIN_S: what `moeforge matrix` shows, without the pins and
    fixes of a full explanation, which take most of its time."""
    _deadline[0] = time.monotonic() + EXPLAIN_S
    try:
        groups = [[r] for r in problem.violated]
        sound = [r for r in rules if r not in problem.violated]
        if not groups or _unsat(sound, pins, set()):
            groups.append(_rule_core(sound, pins))
        return [g for g in groups if g]
    finally:
        _deadline[0] = float("inf")


def _rule_core(rules: list[Rule], pins: dict) -> list[Rule]:
    """A minimal set of rules that together conflict with the pins (deletion-based)."""
    keep = list(rules)
    for r in list(keep):
        trial = [x for x in keep if x is not r]
        if _unsat(trial, pins, set()):
            keep = trial
    return keep


def _closure(fields: set[str]) -> set[str]:
    fields = set(fields)
    if fields & set(_DERIVED):
        fields |= {"num_nodes", "gpus_per_node", *_LAYOUT, "expert_tensor_parallel_size",
                   "expert_model_parallel_size"}
    return fields


def _pin_core(group: list[Rule], pins: dict, sound: list[Rule]) -> list[str]:
    """The pins that take part: a minimal set that, with every other rule kept, still conflicts."""
    fields = set().union(*(r.fields for r in group))
    candidates = [f for f in _order(_closure(fields)) if f in pins]
    context = group + [r for r in sound if r not in group]
    relaxed: set[str] = set()
    for name in candidates:
        if _unsat(context, pins, relaxed | {name}):
            relaxed.add(name)
    return [f for f in candidates if f not in relaxed]


def _order(fields) -> list[str]:
    index = {k.field: i for i, k in enumerate(K.KNOBS + K.FACTS)}
    return sorted(fields, key=lambda f: (index.get(f, 1 << 30), f))


def _violation(pins, rules: list[Rule], core: list[str], sound: list[Rule]) -> Diagnostic:
    rule = rules[0]
    user = [f for f in core if pins[f].origin not in ("fact", "model")]
    located = [f for f in core if pins[f].origin in ("pinned", "override")] or \
        [f for f in core if pins[f].pos is not None]
    anchor = next((f for f in located if f in rule.when.fields()), located[0] if located else None)
    notes = tuple(Note(f"{K.display(f)} = {_show(pins[f].value)}"
                       + ("  (not set: megatron-core's default)" if pins[f].origin == "default" else ""),
                       pins[f].pos) for f in core)
    fixes = [fix for f in user if (fix := _fix(f, pins, rules + [r for r in sound if r not in rules]))]
    help_ = ", or ".join(fixes) if fixes else rule.fix  # the solver's fixes are concrete; else the rule's words
    code = rule.id if len(rules) == 1 else "+".join(r.id for r in rules)
    message = rule.message if len(rules) == 1 else "conflict between " + "; ".join(r.message for r in rules)
    return Diagnostic("error", code, message, pins[anchor].pos if anchor else _file_of(pins), notes,
                      "; ".join(dict.fromkeys(r.source for r in rules)), help_,
                      rule.megatron_message, tuple(sorted({f for r in rules for f in r.fields})))


def _file_of(pins: dict) -> Position | None:
    """When only defaults and facts conflict: the recipe file that chose them."""
    for p in pins.values():
        if p.origin in ("pinned", "override", "default") and p.pos is not None:
            return Position(p.pos.file, 1, 1) if not p.pos.file.startswith("--set") else p.pos
    return None


def _fix(name: str, pins: dict, rules: list[Rule]) -> str | None:
    """The values this pin could take instead, the others kept (nearest first)."""
    problem = _Problem(rules, _fixed(pins, {name}))
    if problem.violated or _out_of_time():
        return None
    enc = problem.encoding({name})
    spec, var = _SPEC[name], enc.vars[name]
    s = _limit(z3.Optimize(ctx=enc.ctx))
    s.add(*enc.domain, *[enc.term(e) for e in problem.residual.values()])
    if spec.kind in ("int", "opt_int") and isinstance(pins[name].value, int):
        distance = var - pins[name].value
        s.minimize(z3.If(distance >= 0, distance, -distance))
    found = []
    for _ in range(1 if spec.kind in ("bool", "set", "float", "str") else 5):
        if s.check() != z3.sat:
            break
        value = enc.read(s.model(), name)
        if value == pins[name].value or value in found:
            break
        found.append(value)
        s.add(z3.Not(enc.value_term(name, value)))
    if not found:
        return None
    if spec.kind in ("float", "str"):
        return f"unset {K.display(name)}" if found == [None] else f"set {K.display(name)}"
    if spec.kind in ("int", "opt_int"):
        found.sort(key=lambda v: v or 0)
    shown = ", ".join(_show(v) for v in found)
    return f"set {K.display(name)} to {'one of ' if len(found) > 1 else ''}{shown}"


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
