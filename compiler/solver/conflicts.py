"""Explaining a recipe that cannot be solved: every violation, minimal pins, concrete fixes.

Each violated rule (or minimal set of rules that conflict together) is reported with the
smallest set of pins that takes part, found by setting pins free one at a time, and for each
pin the values it could take instead. All of it runs within a budget of z3 work (problem.EXPLAIN_RLIMIT).

Fixes are checked together, not one rule at a time: a value offered for a pin satisfies every
hard rule that pin can influence (the other violations that involve it included), triggers no
silent Megatron rewrite the recipe did not already have (no fix is a silent fallback), and is
verified by solving the recipe again with that one change applied. Fixes are ordered by how
small a change they are (nearest value first; a pin whose best value is nearer comes first).
"""
from __future__ import annotations

import math
from dataclasses import replace

import z3

from moeforge.compiler.diagnostics import Diagnostic, Note, Position, from_rule
from moeforge.compiler.knobs import layout as L
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.display import display
from moeforge.compiler.recipe import validate
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules.display import megatron_display
from moeforge.compiler.solver.encoding import check, encode, tracked
from moeforge.compiler.solver.inputs import vpp_from_layout
from moeforge.compiler.solver.problem import BUDGET, DERIVED, SET_VALUE, SPEC, Problem, fixed_values


def _residual_verdict(problem):
    """z3's verdict on what the fixed values leave of the rules (within the query's resource limit)."""
    enc = encode(problem)
    s = z3.Solver(ctx=enc.ctx)
    s.add(*enc.domain, *[enc.term(e) for e in problem.residual.values()])
    return check(s)


def _unsat(rules: list[Rule], pins: dict, relaxed: set[str]) -> bool:
    """Do these rules conflict with the pins when the `relaxed` pins are set free? (False: not shown)"""
    problem = Problem(rules, fixed_values(pins, relaxed))
    if problem.violated:
        return True
    if BUDGET.spent():
        return False
    return _residual_verdict(problem) == z3.unsat


def explain(pins, rules, problem, silent: list[Rule] = ()) -> list[Diagnostic]:
    """Every violation, each with its minimal conflicting pins and fixes, within problem.EXPLAIN_RLIMIT.
    silent: the rules for what Megatron rewrites without an error (no fix may trigger one)."""
    with BUDGET.explaining():
        return _explain_within_budget(pins, rules, problem, list(silent))


def _explain_within_budget(pins, rules, problem, silent) -> list[Diagnostic]:
    groups = [[r] for r in problem.violated]
    sound = [r for r in rules if r not in problem.violated]
    if not groups or _unsat(sound, pins, set()):
        groups.append(_rule_core(sound, pins))
    groups = [g for g in groups if g]
    # silent rewrites the pins already trigger are the recipe's own (reported as warnings); a fix
    # must not add one
    quiet = [r for r in silent if r not in Problem(silent, fixed_values(pins)).violated]
    out = []
    for group in groups:
        others = [r for g in groups if g is not group for r in g]
        out.append(_violation(pins, group, _pin_core(group, pins, sound), rules, others, quiet))
    return out


def explain_rules(pins, rules, problem) -> list[list[Rule]]:
    """Only which rules conflict, grouped as explain() groups them (each violated rule; a minimal set of the
    others that conflict together), within problem.EXPLAIN_RLIMIT: what `moeforge matrix` shows, without the pins
    and fixes of a full explanation, which take most of its time."""
    with BUDGET.explaining():
        groups = [[r] for r in problem.violated]
        sound = [r for r in rules if r not in problem.violated]
        if not groups or _unsat(sound, pins, set()):
            groups.append(_rule_core(sound, pins))
        return [g for g in groups if g]


def _rule_core(rules: list[Rule], pins: dict) -> list[Rule]:
    """A minimal set of rules that together conflict with the pins (deletion-based, in catalogue order).

    Without propagation a rule's residual does not depend on the other rules, so one z3 solver holds them all,
    each behind a literal of its own, and each deletion is a check under the remaining literals: the same core
    as building a problem per trial, in one encoding instead of one per rule."""
    problem = Problem(rules, fixed_values(pins))
    if problem.violated:  # callers pass rules the pins keep; else the last broken one, as deletion would leave
        return problem.violated[-1:]
    if BUDGET.spent():
        return list(rules)
    enc = encode(problem)
    s, literal = tracked(enc, {rid: enc.term(e) for rid, e in problem.residual.items()})
    keep = list(rules)
    for r in list(keep):
        trial = [x for x in keep if x is not r]
        if BUDGET.spent():
            break
        if check(s, *[literal[x.id] for x in trial if x.id in literal]) == z3.unsat:
            keep = trial
    return keep


def _closure(fields: set[str]) -> set[str]:
    fields = set(fields)
    if fields & set(DERIVED):
        fields |= {"num_nodes", "gpus_per_node", *L.ATTENTION_FACTORS, *L.EXPERT_FACTORS}
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


def _violation(pins, rules: list[Rule], core: list[str], hard: list[Rule], others: list[Rule],
               quiet: list[Rule]) -> Diagnostic:
    rule = rules[0]
    user = [f for f in core if pins[f].origin not in ("fact", "model")]
    located = [f for f in core if pins[f].origin in ("pinned", "override")] or \
        [f for f in core if pins[f].pos is not None]
    anchor = next((f for f in located if f in rule.when.fields()), located[0] if located else None)
    notes = tuple(Note(f"{display(f)} = {_show(pins[f].value)}"
                       + ("  (not set: megatron-core's default)" if pins[f].origin == "default" else ""),
                       pins[f].pos) for f in core)
    direct = set().union(*(r.fields for r in rules))  # the rules' own fields first: within the
    user.sort(key=lambda f: f not in direct)          # budget the nearest fixes are found first
    fixes = fixes_for(user, pins, hard, others, quiet)
    help_ = _render_fixes(fixes) or rule.fix  # the solver's verified fixes; else the rule's words
    code = rule.id if len(rules) == 1 else "+".join(r.id for r in rules)
    message = rule.message if len(rules) == 1 else "conflict between " + "; ".join(r.message for r in rules)
    values = {f: p.value for f, p in pins.items()}
    return from_rule(rule, values, message=message, severity="error", pos=pins[anchor].pos if anchor else _file_of(pins),
                     notes=notes, help=help_, code=code,
                     source="; ".join(dict.fromkeys(part for r in rules for part in r.source.split("; "))),
                     fields=sorted({f for r in rules for f in r.fields}), display=megatron_display(rule, values),
                     fixes=tuple((display(f), v) for f, v, _ in fixes))


def _file_of(pins: dict) -> Position | None:
    """When only defaults and facts conflict: the recipe file that chose them."""
    for p in pins.values():
        if p.origin in ("pinned", "override", "default") and p.pos is not None:
            return Position(p.pos.file, 1, 1) if not p.pos.file.startswith("--set") else p.pos
    return None


def fixes_for(names: list[str], pins: dict, hard: list[Rule], others: list[Rule],
              quiet: list[Rule]) -> list[tuple[str, object, float]]:
    """(field, value, size of the change) for each verified single-pin fix, smallest change first."""
    found = []
    for order, name in enumerate(names):
        # the other violations this pin cannot influence stay as they are; every other rule must hold
        keep = [r for r in hard if r not in others or name in _closure(r.fields)] + \
            [r for r in quiet if name in _closure(r.fields)]
        values = [v for v in _candidates(name, pins, keep)
                  if _writable(name, v) and _verified(name, v, pins, keep)]
        found += [(order, name, v, _cost(_reference(name, pins), v)) for v in values]
    best = {}
    for order, name, _, cost in found:
        best[name] = min(best.get(name, (math.inf, order)), (cost, order))
    found.sort(key=lambda t: (best[t[1]], t[3], _tiebreak(t[2])))
    return [(name, v, cost) for _, name, v, cost in found]


def _candidates(name: str, pins: dict, rules: list[Rule]) -> list:
    """Up to five other values for this pin under the rules, the others kept (nearest first)."""
    problem = Problem(rules, fixed_values(pins, {name}))
    if problem.violated or BUDGET.spent():
        return []
    enc = encode(problem, {name})
    spec, var = SPEC[name], enc.vars[name]
    s = z3.Optimize(ctx=enc.ctx)
    s.add(*enc.domain, *[enc.term(e) for e in problem.residual.values()])
    reference = _reference(name, pins)
    if spec.kind in ("int", "opt_int") and isinstance(reference, int):
        distance = var - reference
        s.minimize(z3.If(distance >= 0, distance, -distance))
    found = []
    for _ in range(1 if spec.kind in ("bool", "set", "float", "str") else 5):
        if BUDGET.spent() or check(s) != z3.sat:
            break
        value = enc.read(s.model(), name)
        if value == pins[name].value or value in found:
            break
        found.append(value)
        s.add(z3.Not(enc.value_term(name, value)))
    # a float or string knob is only known to the solver as set or not: "set it to something" is no fix
    return [v for v in found if v is not SET_VALUE]


def _reference(name: str, pins: dict):
    """What a fix's size is measured from: the pin's value, or for an unset knob the value megatron-core
    derives in its place (kv_channels: hidden_size // num_attention_heads), so fixes stay near it."""
    value = pins[name].value
    if value is not None:
        return value
    return SPEC[name].derived(lambda f: pins[f].value if f in pins else None)


def _writable(name: str, value) -> bool:
    """Whether a recipe can say it: the value at the knob's recipe path passes the recipe schema
    (an unset training.global_batch_size is Megatron's, but a recipe states a number)."""
    path = display(name).split(".")
    v = validate.validator(f"recipe.v{validate.KINDS['recipe']}.json")
    if path[0] not in v.schema.get("properties", {}):
        return True
    doc: dict = {}
    node = doc
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = list(value) if isinstance(value, tuple) else value
    return not any(list(map(str, e.absolute_path)) == path for e in v.iter_errors(doc))


def _verified(name: str, value, pins: dict, rules: list[Rule]) -> bool:
    """Solve again with the pin changed: nothing of `rules` violated, and the auto knobs still have values."""
    trial = dict(pins)
    trial[name] = replace(pins[name], value=value)
    _rederive(trial)
    problem = Problem(rules, fixed_values(trial))
    if problem.violated:
        return False
    if not problem.residual:
        return True
    if BUDGET.spent():
        return False
    return _residual_verdict(problem) == z3.sat


def _rederive(trial: dict) -> None:
    """What the compile derives from the changed pins: VPP from an explicit pipeline layout, when the fix leaves
    VPP unset (so "set parallelism.vpp to null" is no fix while the layout implies VPP 4)."""
    vpp = trial.get("virtual_pipeline_model_parallel_size")
    if vpp is None or "pipeline_layout_stages" not in trial:
        return
    if vpp.origin == "derived":
        trial["virtual_pipeline_model_parallel_size"] = replace(vpp, value=None)
    vpp_from_layout(trial, set())


def _cost(old, new) -> float:
    """How big a change is: the factor between two positive integers (log2), else 1."""
    if isinstance(old, int) and isinstance(new, int) and not isinstance(old, bool) and old > 0 and new > 0:
        return abs(math.log2(new / old))
    return 1.0


def _tiebreak(value):
    return (0, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, str(value))


def _render_fixes(fixes: list[tuple[str, object, float]]) -> str:
    by_field: dict[str, list] = {}
    for name, value, _ in fixes:
        by_field.setdefault(name, []).append(value)
    parts = []
    for name, values in by_field.items():
        if SPEC[name].kind in ("float", "str"):
            parts.append(f"unset {display(name)}")  # only None is ever concrete for these
            continue
        shown = ", ".join(_show(v) for v in values)
        parts.append(f"set {display(name)} to {'one of ' if len(values) > 1 else ''}{shown}")
    return ", or ".join(parts)


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
