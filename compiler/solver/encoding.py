"""The z3 side of solving: variables for the free knobs and translation of folded rules.

Imported only when a problem has free knobs (or a violation to explain): encode() turns what a
Problem leaves free into z3 terms (an Encoding), in a z3 context of its own so that answers depend
on the problem alone.
"""
from __future__ import annotations

from typing import Any

import z3

from moeforge.compiler.knobs import layout as L
from moeforge.compiler.solver.problem import BUDGET, DERIVED, INPUTS, MAX_INT, QUERY_RLIMIT, SET_VALUE, SPEC
from moeforge.compiler.rules import expr as E


def check(solver, *assumptions):
    """solver.check within a query's resource limit and what is left of the explanation budget, its work charged to
    that budget (z3's rlimit counts work, not time: the same question gets the same answer on a busy machine)."""
    solver.set("rlimit", int(max(1, min(QUERY_RLIMIT, BUDGET.left))))
    before = _units(solver)
    verdict = solver.check(*assumptions)
    BUDGET.left -= _units(solver) - before
    return verdict


def _units(solver) -> int:
    stats = solver.statistics()
    return stats.get_key_value("rlimit count") if "rlimit count" in stats.keys() else 0


def tracked(enc, terms: dict) -> tuple:
    """A solver over the encoding's domain with each term behind a literal of its own ({id: literal}): checked under
    some literals, it answers for those terms alone; its unsat core names terms."""
    s = z3.SimpleSolver(ctx=enc.ctx)
    s.add(*enc.domain)
    literals = {}
    for key, term in terms.items():
        literals[key] = z3.Bool(f"track:{key}", enc.ctx)
        s.add(z3.Implies(literals[key], term))
    return s, literals


def encode(problem, extra: set[str] = frozenset()) -> "Encoding":
    """z3 variables and terms for what the problem leaves free (and the `extra` fields set free)."""
    return Encoding(problem.free | set(extra), problem.fixed)


class Encoding(E.Walk):
    """z3 variables for the fields that are still free, and translation of folded rules."""

    def __init__(self, free: set[str], fixed: dict):
        # A fresh z3 context per problem: answers then depend on this problem alone, not on
        # what the process solved before (z3 breaks ties by internal ids), so output is stable.
        self.ctx = ctx = z3.Context()
        self.fixed = fixed
        free = set(free)
        for name in DERIVED:  # a free derived field needs its free inputs too
            if name in free:
                free |= {f for f in INPUTS[name] if f not in fixed}
        self.vars: dict[str, Any] = {}
        self.domain: list = []
        for name in sorted(free):
            spec = SPEC[name]
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
        if not {"data_parallel_size", "expert_data_parallel_size"} & self.vars.keys():
            return out
        # The foldings are compiler/knobs/layout.py's (world = TP*CP*DP*PP = ETP*EP*EDP*PP); an unset
        # expert TP (0 here) is TP, as layout.effective_etp says.
        tp, cp, pp = (g(f) for f in L.ATTENTION_FACTORS)
        etp = g("expert_tensor_parallel_size")
        denominators = {"data_parallel_size": L.model_size(tp, cp, pp),
                        "expert_data_parallel_size": L.expert_model_size(
                            z3.If(etp == 0, tp, etp), g("expert_model_parallel_size"), pp)}
        for name, denom in denominators.items():
            if name not in self.vars:
                continue
            world = g("world_size")
            out.append(self.vars[name] == z3.If(world % denom == 0, world / denom, 0))
        return out

    def value_term(self, name: str, value: Any):
        """The z3 constraint that knob `name` holds `value`, in the encoding read() decodes."""
        spec, var = SPEC[name], self.vars[name]
        if spec.kind == "set":
            members = set(value or ())
            return z3.And(*[b if m in members else z3.Not(b) for m, b in var.items()])
        if spec.kind in ("float", "str"):
            return var == z3.BoolVal(value is not None, self.ctx)
        return var == self.const(name, value)

    def const(self, name: str, value: Any):
        """A knob value as z3 encodes it: an enum as its domain index (-1 outside it), an unset optional int as 0."""
        spec = SPEC[name]
        if spec.kind == "bool":
            return z3.BoolVal(bool(value), self.ctx)
        if spec.kind == "enum":
            return z3.IntVal(spec.domain.index(value) if value in spec.domain else -1, self.ctx)
        return z3.IntVal(0 if value is None else int(value), self.ctx)

    def read(self, model, name: str) -> Any:
        """A knob's value decoded from a z3 model; a float or string knob reads back only as SET_VALUE or None."""
        spec, var = SPEC[name], self.vars[name]
        if spec.kind == "set":
            chosen = [m for m, b in var.items() if z3.is_true(model.eval(b, model_completion=True))]
            return chosen or None
        if spec.kind == "bool":
            return z3.is_true(model.eval(var, model_completion=True))
        if spec.kind in ("float", "str"):
            return SET_VALUE if z3.is_true(model.eval(var, model_completion=True)) else None
        raw = model.eval(var, model_completion=True).as_long()
        if spec.kind == "enum":
            return spec.domain[raw]
        return (raw or None) if spec.kind == "opt_int" else raw

    def term(self, expr: E.Expr):
        """The z3 term of a folded rule expression (the walk's steps below)."""
        return self.walk(expr, None)

    # The steps of rules.expr.Walk: z3 terms, where Evaluate computes values. Nothing short-circuits (z3
    # decides), a constant or a comparison with one is encoded as the knob's variable is (an enum as its index,
    # an unset optional integer as 0), and a float or string knob is only known to be set or not.
    def on_field(self, e, _):
        """A knob is its z3 variable (a set knob: its dict of member booleans)."""
        return self.vars[e.name]

    def on_const(self, e, _):
        """A boolean as BoolVal, anything else in the integer encoding (None as 0, like an unset optional int)."""
        if isinstance(e.value, bool):
            return z3.BoolVal(e.value, self.ctx)
        return z3.IntVal(0 if e.value is None else e.value, self.ctx)

    def on_and(self, e, _):
        """Every conjunct encoded, none skipped: z3, not the walk, decides."""
        return z3.And(*[self.term(i) for i in e.items])

    def on_or(self, e, _):
        """Every disjunct encoded, none skipped: z3, not the walk, decides."""
        return z3.Or(*[self.term(i) for i in e.items])

    def on_not(self, e, _):
        """The negated operand's term."""
        return z3.Not(self.term(e.item))

    def on_has(self, e, _):
        """A set knob's member is its own boolean variable."""
        return self.vars[e.item.name][e.member]

    def on_is_set(self, e, _):
        """Set as read() decodes it: some member of a set, an enum off its None index, an integer other than 0."""
        name = e.item.name
        spec, var = SPEC[name], self.vars[name]
        if spec.kind == "set":
            return z3.Or(*var.values())
        if spec.kind in ("float", "str"):
            return var
        return var != self.const(name, None) if spec.kind == "enum" else var != 0

    def on_in(self, e, _):
        """Membership in a constant list: one encoded equality per listed value."""
        return z3.Or(*[self._cmp("==", e.item, E.Const(v)) for v in e.values])

    def on_cmp(self, e, _):
        """A comparison with constants encoded as const() encodes them, so an enum compares by index."""
        return self._cmp(e.op, e.a, e.b)

    def on_arith(self, e, _):
        """Integer arithmetic with a truth value counting 1 or 0; // is z3's integer division."""
        a, b = self._number(self.term(e.a)), self._number(self.term(e.b))
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a / b,
                "%": lambda: a % b}[e.op]()

    def _number(self, term):
        """A truth value in arithmetic counts 1 or 0, as rules.expr.evaluate counts it."""
        if z3.is_bool(term):
            return z3.If(term, z3.IntVal(1, self.ctx), z3.IntVal(0, self.ctx))
        return term

    def _cmp(self, op, a, b):
        if type(a) is E.Field and type(b) is E.Const:
            lhs, rhs = self.term(a), self.const(a.name, b.value)
        elif type(b) is E.Field and type(a) is E.Const:
            lhs, rhs = self.const(b.name, a.value), self.term(b)
        else:
            lhs, rhs = self.term(a), self.term(b)
        return {"==": lambda: lhs == rhs, "!=": lambda: lhs != rhs, "<": lambda: lhs < rhs,
                "<=": lambda: lhs <= rhs, ">": lambda: lhs > rhs, ">=": lambda: lhs >= rhs}[op]()


