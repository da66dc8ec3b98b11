"""Rules with the pins folded in: what is decided by the pins alone, and what is still free.

A Problem is the rules (and preferences) specialised to what is fixed. When nothing stays free,
this is the whole answer and z3 is never imported (a fully pinned recipe checks without it);
otherwise moeforge.compiler.solver.finite settles what is free, or moeforge.compiler.solver.encoding turns it into z3 terms.
What every one of them reads of a field (SPEC, the derived layout sizes, the integers' range) and the bounds
on z3's work are here too, below them all: finite.py, encoding.py and conflicts.py import them from here.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from moeforge.compiler.knobs import layout as L
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.layout import derive_sizes
from moeforge.compiler.rules import Rule
from moeforge.compiler.rules import expr as E
from moeforge.compiler.rules.expr import fold

SPEC = {**K.BY_FIELD, **K.FACT_BY_FIELD}
DERIVED = ("world_size", "data_parallel_size", "expert_data_parallel_size")
INPUTS = {"world_size": ("num_nodes", "gpus_per_node"),
          "data_parallel_size": ("world_size",) + L.ATTENTION_FACTORS,
          # expert TP falls back to TP (compiler/knobs/layout.py effective_etp)
          "expert_data_parallel_size": ("world_size", "tensor_model_parallel_size") + L.EXPERT_FACTORS}
MAX_INT = 1 << 20
SET_VALUE = "(set)"  # a float or string knob that the solver only knows to be set

SOLVE_MS = 10_000      # the main optimisation; a recipe takes milliseconds, this only bounds the pathological
# Explanation and provenance queries are bounded in z3's resource units, not in seconds: a bound in seconds made
# what an error says (its conflict, pins and fixes) depend on how busy the machine was. Of 9,587 queries explaining
# 790 random refusals of catalogue variants, every one z3 decided took under 2M units (0.43 s at most here); the
# nonlinear layout questions it cannot settle stop at the bound (it does 1.3-15M units a second, by query).
QUERY_RLIMIT = 2_000_000      # one explanation or provenance query
EXPLAIN_RLIMIT = 12_000_000   # all queries explaining one failed recipe together


class Budget:
    """z3 units left to the explanation in progress (inf: none in progress); encoding.check charges it."""

    left = math.inf

    def spent(self) -> bool:
        """True once the explanation in progress has used EXPLAIN_RLIMIT: conflicts.py then stops asking z3."""
        return self.left <= 0

    @contextmanager
    def explaining(self):
        """EXPLAIN_RLIMIT units for the queries inside the block, together."""
        self.left = EXPLAIN_RLIMIT
        try:
            yield
        finally:
            self.left = math.inf


BUDGET = Budget()


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


def fixed_values(pins: dict, relaxed: set[str] = frozenset()) -> dict:
    """Pinned values plus the sizes they imply (derive_sizes), without the knobs a conflict query relaxes."""
    values = {f: p.value for f, p in pins.items() if f not in relaxed}
    values.update({f: v for f, v in derive_sizes(values).items() if f not in relaxed})
    return values


def _candidates(name: str) -> tuple | None:
    """Every value a free knob can take, when there are few (None: too many, or not enumerable)."""
    spec = SPEC.get(name)
    if spec is None or name in DERIVED:
        return None
    if spec.kind == "bool":
        return (False, True)
    if spec.kind == "enum":
        return tuple(spec.domain)
    if spec.kind == "set" and len(spec.domain) <= 8:
        members = tuple(spec.domain)
        return tuple([m for i, m in enumerate(members) if mask >> i & 1] or None for mask in range(1 << len(members)))
    return None


def _only_value(expr: E.Expr, name: str):
    """The one value of `name` that satisfies expr (which reads nothing else), or _NONE."""
    if type(expr) is E.Not and type(expr.item) is E.IsSet and SPEC[name].kind == "opt_int":
        return None  # `not (vpp is set)`: an optional integer that must stay unset
    values = _candidates(name)
    if values is None:
        return _NONE
    ok = [v for v in values if E.evaluate(expr, {name: v}) is True]
    return ok[0] if len(ok) == 1 else _NONE


_NONE = object()


class Problem:
    """Rules (and preferences) with the fixed values folded in, over the remaining free fields.

    propagate=True (the solver's main problem) also settles every knob that one residual rule alone
    leaves a single value (unit propagation: a CPU platform's `delay_wgrad_compute must be false`),
    folds that value in too, and repeats until nothing changes. Those knobs are `forced`, each with
    the rules that force it (catalogue order), so neither z3 nor a provenance query is needed for
    them; what is left for z3 is only what is really open. A propagation that makes a rule fold to
    false is dropped (the unpropagated problem then goes to z3 and moeforge.compiler.solver.conflicts as before)."""

    def __init__(self, rules: list[Rule], fixed: dict, prefs=(), propagate: bool = False):
        self.violated, self.residual = [], {}
        for r in rules:
            e = _specialise(_implication(r), r.fields, fixed)
            if type(e) is E.Const:
                if e.value is False:
                    self.violated.append(r)
            else:
                self.residual[r.id] = e
        self.forced: dict[str, tuple] = {}   # knob -> (value, rule ids that force it)
        self.because: dict[str, tuple] = {}  # residual rule id -> rules behind the forced values folded into it
        self.fixed = fixed
        if propagate and not self.violated and self.residual:
            self._propagate()
        self.prefs = []
        for p in prefs:
            e = _specialise(E.Implies(p.when, p.prefer), p.prefer.fields() | p.when.fields(), self.fixed)
            if type(e) is not E.Const:
                self.prefs.append((p, e))
        free = set()
        for e in list(self.residual.values()) + [e for _, e in self.prefs]:
            free |= e.fields()
        self.free = free

    def _propagate(self) -> None:
        residual, fixed = dict(self.residual), dict(self.fixed)
        forced: dict[str, tuple] = {}
        because: dict[str, set] = {}
        while True:
            found = {}
            for rid, e in residual.items():
                names = e.fields()
                if len(names) != 1:
                    continue
                (name,) = names
                value = _only_value(e, name)
                if value is _NONE:
                    continue
                if name in found:  # the first rule (catalogue order) that forces it is the reason
                    if found[name][0] != value:
                        return  # two rules want two values: infeasible, left to z3 and the explanation
                    continue
                found[name] = (value, {rid} | because.get(rid, set()))
            if not found:
                break
            for name, (value, rules) in found.items():
                fixed[name] = value
                forced[name] = (value, rules)
            nxt: dict = {}
            for rid, e in residual.items():
                read = e.fields() & found.keys()
                if not read:
                    nxt[rid] = e
                    continue
                folded = fold(e, {n: found[n][0] for n in read})
                if type(folded) is E.Const:
                    if folded.value is False:
                        return
                    continue
                nxt[rid] = folded
                because[rid] = because.get(rid, set()).union(*(found[n][1] for n in read))
            residual = nxt
        order = {rid: i for i, rid in enumerate(self.residual)}
        self.residual, self.fixed = residual, fixed
        self.forced = {n: (v, tuple(sorted(rs, key=order.__getitem__))) for n, (v, rs) in forced.items()}
        self.because = {rid: tuple(sorted(rs, key=order.__getitem__)) for rid, rs in because.items() if rid in residual}
