"""Resolve pins, platform facts and rules into values, or explain precisely why not.

Pins and facts are folded into the rules first (compiler.rules.fold): a rule that folds to
true is satisfied, one that folds to false is violated by the pins alone, and only what
still mentions an `auto` knob goes to z3, together with the seeds' guidance as weighted soft
constraints. Explanations relax one pin at a time to find the minimal set of conflicting
pins and the values each could take instead. Everything runs in catalogue order, so the
results are deterministic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import z3

from . import knobs as K
from .diagnostics import Diagnostic, Note, Position
from .rules import Preference, Rule, fold
from .rules import expr as E


@dataclass(frozen=True)
class Pin:
    value: Any
    pos: Position | None = None
    origin: str = "pinned"   # pinned | default | fact | override | model


@dataclass(frozen=True)
class Decision:
    field: str
    value: Any
    source: str               # pinned | default | platform | model | rule | preference | derived | megatron
    where: str | None = None
    reason: str | None = None
    rule: str | None = None


@dataclass
class Solution:
    values: dict
    decisions: dict
    diagnostics: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


_SPEC = {**K.BY_FIELD, **K.FACT_BY_FIELD}
_DERIVED = ("world_size", "data_parallel_size", "expert_data_parallel_size")
_LAYOUT = ("tensor_model_parallel_size", "context_parallel_size", "pipeline_model_parallel_size")
_INPUTS = {"world_size": ("num_nodes", "gpus_per_node"),
           "data_parallel_size": ("world_size",) + _LAYOUT,
           "expert_data_parallel_size": ("world_size", "tensor_model_parallel_size", "expert_tensor_parallel_size",
                                         "expert_model_parallel_size", "pipeline_model_parallel_size")}
MAX_INT = 1 << 20
SOLVE_MS = 10_000      # the main optimisation; a recipe takes milliseconds, this only bounds the pathological
QUERY_MS = 500         # one explanation or provenance query
EXPLAIN_S = 3.0        # all queries explaining one failed recipe together
_deadline = [float("inf")]


def _limit(solver, ms: int = QUERY_MS):
    """Bound a z3 query by its own limit and by what is left of the explanation budget."""
    left = (_deadline[0] - time.monotonic()) * 1000
    solver.set("timeout", int(max(1, min(ms, left))))
    return solver


def _out_of_time() -> bool:
    return time.monotonic() >= _deadline[0]
_SET = "(set)"  # a float or string knob that the solver only knows to be set


def derive(values: dict) -> dict:
    """World, DP and EDP from the layout, where every input is known (None: does not divide)."""
    out = {}
    nodes, gpn = values.get("num_nodes"), values.get("gpus_per_node")
    if nodes is None or gpn is None:
        return out
    world = out["world_size"] = nodes * gpn
    if all(values.get(f) is not None for f in _LAYOUT):
        denom = values["tensor_model_parallel_size"] * values["context_parallel_size"] * \
            values["pipeline_model_parallel_size"]
        out["data_parallel_size"] = world // denom if world % denom == 0 else None
    if "expert_tensor_parallel_size" in values and all(
            values.get(f) is not None for f in ("tensor_model_parallel_size", "expert_model_parallel_size",
                                                "pipeline_model_parallel_size")):
        etp = values["expert_tensor_parallel_size"] or values["tensor_model_parallel_size"]
        denom = etp * values["expert_model_parallel_size"] * values["pipeline_model_parallel_size"]
        out["expert_data_parallel_size"] = world // denom if world % denom == 0 else None
    return out


class _Encoding:
    """z3 variables for the fields that are still free, and translation of folded rules."""

    def __init__(self, free: set[str], fixed: dict):
        # A fresh z3 context per problem: answers then depend on this problem alone, not on
        # what the process solved before (z3 breaks ties by internal ids), so output is stable.
        self.ctx = ctx = z3.Context()
        self.fixed = fixed
        free = set(free)
        for name in _DERIVED:  # a free derived field needs its free inputs too
            if name in free:
                free |= {f for f in _INPUTS[name] if f not in fixed}
        self.vars: dict[str, Any] = {}
        self.domain: list = []
        for name in sorted(free):
            spec = _SPEC[name]
            if spec.kind == "bool":
                self.vars[name] = z3.Bool(name, ctx)
            elif spec.kind == "set":
                self.vars[name] = {m: z3.Bool(f"{name}.{m}", ctx) for m in spec.domain}
            elif spec.kind in ("float", "str"):  # only ever asked whether they are set
                self.vars[name] = z3.Bool(f"{name}.is_set", ctx)
            else:
                v = self.vars[name] = z3.Int(name, ctx)
                if spec.kind == "enum":
                    self.domain.append(z3.And(v >= 0, v < len(spec.domain)))
                elif spec.kind == "int":
                    self.domain.append(z3.And(v >= 1, v <= MAX_INT))
                else:
                    self.domain.append(z3.And(v >= 0, v <= MAX_INT))
                if spec.bound and (spec.bound in self.vars or fixed.get(spec.bound) is not None):
                    self.domain.append(v <= self._get(spec.bound))
        self.domain += self._derived()

    def _get(self, name: str):
        if name in self.vars:
            return self.vars[name]
        return self.const(name, self.fixed.get(name))

    def _derived(self) -> list:
        """Definitions of the derived fields that pins alone could not compute."""
        out, g = [], self._get
        if "world_size" in self.vars:
            out.append(self.vars["world_size"] == g("num_nodes") * g("gpus_per_node"))
        for name, parts in (("data_parallel_size", None), ("expert_data_parallel_size", "etp")):
            if name not in self.vars:
                continue
            tp = g("tensor_model_parallel_size")
            if parts:
                etp = g("expert_tensor_parallel_size")
                denom = z3.If(etp == 0, tp, etp) * g("expert_model_parallel_size")
            else:
                denom = tp * g("context_parallel_size")
            denom = denom * g("pipeline_model_parallel_size")
            world = g("world_size")
            out.append(self.vars[name] == z3.If(world % denom == 0, world / denom, 0))
        return out

    def value_term(self, name: str, value: Any):
        spec, var = _SPEC[name], self.vars[name]
        if spec.kind == "set":
            members = set(value or ())
            return z3.And(*[b if m in members else z3.Not(b) for m, b in var.items()])
        if spec.kind in ("float", "str"):
            return var == z3.BoolVal(value is not None, self.ctx)
        return var == self.const(name, value)

    def const(self, name: str, value: Any):
        spec = _SPEC[name]
        if spec.kind == "bool":
            return z3.BoolVal(bool(value), self.ctx)
        if spec.kind == "enum":
            return z3.IntVal(spec.domain.index(value) if value in spec.domain else -1, self.ctx)
        return z3.IntVal(0 if value is None else int(value), self.ctx)

    def read(self, model, name: str) -> Any:
        spec, var = _SPEC[name], self.vars[name]
        if spec.kind == "set":
            chosen = [m for m, b in var.items() if z3.is_true(model.eval(b, model_completion=True))]
            return chosen or None
        if spec.kind == "bool":
            return z3.is_true(model.eval(var, model_completion=True))
        if spec.kind in ("float", "str"):
            return _SET if z3.is_true(model.eval(var, model_completion=True)) else None
        raw = model.eval(var, model_completion=True).as_long()
        if spec.kind == "enum":
            return spec.domain[raw]
        return (raw or None) if spec.kind == "opt_int" else raw

    def term(self, expr: E.Expr):
        t = type(expr)
        if t is E.Field:
            return self.vars[expr.name]
        if t is E.Const:
            if isinstance(expr.value, bool):
                return z3.BoolVal(expr.value, self.ctx)
            return z3.IntVal(0 if expr.value is None else expr.value, self.ctx)
        if t is E.And:
            return z3.And(*[self.term(i) for i in expr.items])
        if t is E.Or:
            return z3.Or(*[self.term(i) for i in expr.items])
        if t is E.Not:
            return z3.Not(self.term(expr.item))
        if t is E.Has:
            return self.vars[expr.item.name][expr.member]
        if t is E.IsSet:
            name = expr.item.name
            spec, var = _SPEC[name], self.vars[name]
            if spec.kind == "set":
                return z3.Or(*var.values())
            if spec.kind in ("float", "str"):
                return var
            return var != self.const(name, None) if spec.kind == "enum" else var != 0
        if t is E.In:
            return z3.Or(*[self._cmp("==", expr.item, E.Const(v)) for v in expr.values])
        if t is E.Cmp:
            return self._cmp(expr.op, expr.a, expr.b)
        if t is E.Arith:
            a, b = self.term(expr.a), self.term(expr.b)
            return {"*": lambda: a * b, "//": lambda: a / b, "%": lambda: a % b}[expr.op]()
        raise TypeError(f"cannot translate {expr!r}")

    def _cmp(self, op, a, b):
        if type(a) is E.Field and type(b) is E.Const:
            lhs, rhs = self.term(a), self.const(a.name, b.value)
        elif type(b) is E.Field and type(a) is E.Const:
            lhs, rhs = self.const(b.name, a.value), self.term(b)
        else:
            lhs, rhs = self.term(a), self.term(b)
        return {"==": lambda: lhs == rhs, "!=": lambda: lhs != rhs, "<": lambda: lhs < rhs,
                "<=": lambda: lhs <= rhs, ">": lambda: lhs > rhs, ">=": lambda: lhs >= rhs}[op]()


_IMPLICATIONS: dict[str, E.Expr] = {}


def _implication(r: Rule) -> E.Expr:
    e = _IMPLICATIONS.get(r.id)
    if e is None:
        e = _IMPLICATIONS[r.id] = E.Implies(r.when, r.require)
    return e


def _specialise(expr: E.Expr, fields: set, fixed: dict) -> E.Expr:
    """expr with the fixed values folded in; plain evaluation when nothing is left free."""
    if fields <= fixed.keys():
        value = E.evaluate(expr, fixed)
        return E.Const(value if isinstance(value, bool) else False)
    return fold(expr, fixed)


def _fixed(pins: dict, relaxed: set[str] = frozenset()) -> dict:
    values = {f: p.value for f, p in pins.items() if f not in relaxed}
    values.update({f: v for f, v in derive(values).items() if f not in relaxed})
    return values


class _Problem:
    """Rules (and preferences) with the fixed values folded in, over the remaining free fields."""

    def __init__(self, rules: list[Rule], fixed: dict, prefs=()):
        self.violated, self.residual = [], {}
        for r in rules:
            e = _specialise(_implication(r), r.fields, fixed)
            if type(e) is E.Const:
                if e.value is False:
                    self.violated.append(r)
            else:
                self.residual[r.id] = e
        self.prefs = []
        for p in prefs:
            e = _specialise(E.Implies(p.when, p.prefer), p.prefer.fields() | p.when.fields(), fixed)
            if type(e) is not E.Const:
                self.prefs.append((p, e))
        free = set()
        for e in list(self.residual.values()) + [e for _, e in self.prefs]:
            free |= e.fields()
        self.free = free
        self.fixed = fixed

    def encoding(self, extra: set[str] = frozenset()) -> _Encoding:
        return _Encoding(self.free | set(extra), self.fixed)


def solve(pins: dict[str, Pin], auto: set[str], rules: list[Rule], prefs: list[Preference],
          silent_rules: list[Rule]) -> Solution:
    """Values for every auto knob under the hard rules, or a diagnostic per violation."""
    fixed = _fixed(pins)
    problem = _Problem(rules, fixed, list(prefs) + [_as_pref(r) for r in silent_rules])
    if problem.violated:
        return Solution({}, {}, _explain(pins, rules, problem))
    free = sorted(set(auto) & problem.free)  # auto knobs no rule or preference mentions keep their default
    values = {f: _SPEC[f].default for f in sorted(auto) if f not in problem.free}
    enc = problem.encoding()
    if problem.free:
        opt = z3.Optimize(ctx=enc.ctx)
        opt.set("timeout", SOLVE_MS)
        opt.add(*enc.domain)
        terms = {rid: enc.term(e) for rid, e in problem.residual.items()}
        opt.add(*terms.values())
        for p, e in problem.prefs:
            opt.add_soft(enc.term(e), p.weight)
        for name in free:  # among equals, keep Megatron's default
            opt.add_soft(enc.value_term(name, _SPEC[name].default), 1)
        verdict = opt.check()
        if verdict == z3.unknown:
            return Solution({}, {}, [Diagnostic(
                "error", "E_SOLVER_UNKNOWN", f"the solver did not finish within {SOLVE_MS // 1000} s "
                f"({opt.reason_unknown()})", help="pin more of the auto knobs (parallelism.vpp, moe.dispatcher, ...)")])
        if verdict != z3.sat:
            return Solution({}, {}, _explain(pins, rules, problem))
        model = opt.model()
        values.update({f: enc.read(model, f) for f in free})
    values.update(derive({**fixed, **values}))
    terms = {rid: enc.term(e) for rid, e in problem.residual.items()} if not problem.free else terms
    decisions = _provenance(enc, terms, problem, {r.id: r for r in rules}, prefs, auto, values, fixed)
    return Solution(values, decisions)


def _as_pref(r: Rule) -> Preference:
    """Never choose what Megatron would quietly rewrite."""
    return Preference(f"avoid:{r.id}", r.require, 50, r.message, r.when)


def _provenance(enc, terms, problem, by_id, prefs, auto, values, fixed) -> dict:
    """Why each auto knob has its value: forced by a rule, or chosen by a preference."""
    s = _limit(z3.SimpleSolver(ctx=enc.ctx))
    s.add(*enc.domain)
    trackers = {}
    for rid, term in terms.items():
        t = z3.Bool(f"track:{rid}", enc.ctx)
        s.add(z3.Implies(t, term))
        trackers[t] = rid
    env = {**fixed, **values}
    out = {}
    for name in sorted(auto):
        value = values[name]
        if name in problem.free and s.check(*trackers, z3.Not(enc.value_term(name, value))) == z3.unsat:
            core = {t.get_id() for t in s.unsat_core()}
            forced = [rid for t, rid in trackers.items() if t.get_id() in core]  # catalogue order
            out[name] = Decision(name, value, "rule", rule=forced[0],
                                 reason="; ".join(by_id[r].message for r in forced))
            continue
        chosen = [p for p in prefs if name in p.prefer.fields()
                  and E.evaluate(p.when, env) is True and E.evaluate(p.prefer, env) is True]
        if chosen:
            out[name] = Decision(name, value, "preference", rule=chosen[0].id, reason=chosen[0].reason)
        else:
            out[name] = Decision(name, value, "default", reason="megatron-core default")
    for name in _DERIVED:
        if name in values:
            out[name] = Decision(name, values[name], "derived", reason=K.BY_FIELD[name].doc)
    return out


# ------------------------------------------------------------------ explaining conflicts

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


def _explain(pins, rules, problem) -> list[Diagnostic]:
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
