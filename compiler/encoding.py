"""The z3 side of solving: variables for the free knobs, rules with the pins folded in.

A _Problem is the rules (and preferences) specialised to what is fixed; an _Encoding turns
what is still free into z3 terms, in a z3 context of its own so that answers depend on the
problem alone. Query budgets live here too, since every query goes through one of these.
"""
from __future__ import annotations

import time
from typing import Any

import z3

from . import knobs as K
from .rules import Rule, fold
from .rules import expr as E


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
