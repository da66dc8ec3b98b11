"""Rules with the pins folded in: what is decided by the pins alone, and what is still free.

A _Problem is the rules (and preferences) specialised to what is fixed. When nothing stays free,
this is the whole answer and z3 is never imported (a fully pinned recipe checks without it);
otherwise compiler.encoding turns what is free into z3 terms. Query budgets live here too.
"""
from __future__ import annotations

import time

from . import knobs as K
from . import layout as L
from .rules import Rule, fold
from .rules import expr as E


_SPEC = {**K.BY_FIELD, **K.FACT_BY_FIELD}
_DERIVED = ("world_size", "data_parallel_size", "expert_data_parallel_size")
_INPUTS = {"world_size": ("num_nodes", "gpus_per_node"),
           "data_parallel_size": ("world_size",) + L.ATTENTION_FACTORS,
           # expert TP falls back to TP (compiler/layout.py effective_etp)
           "expert_data_parallel_size": ("world_size", "tensor_model_parallel_size") + L.EXPERT_FACTORS}
MAX_INT = 1 << 20
SOLVE_MS = 10_000      # the main optimisation; a recipe takes milliseconds, this only bounds the pathological
QUERY_MS = 500         # one explanation or provenance query
EXPLAIN_S = 3.0        # all queries explaining one failed recipe together
_deadline = [float("inf")]


def _out_of_time() -> bool:
    return time.monotonic() >= _deadline[0]
_SET = "(set)"  # a float or string knob that the solver only knows to be set


def derive(values: dict) -> dict:
    """World, DP and EDP from the layout, where every input is known (None: does not divide).

    The arithmetic is compiler/layout.py's; world comes from num_nodes x gpus_per_node only."""
    if values.get("num_nodes") is None or values.get("gpus_per_node") is None:
        return {}
    return L.derived({k: v for k, v in values.items() if k != "world_size"})


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

    def encoding(self, extra: set[str] = frozenset()):
        """z3 variables and terms for what is free (imports z3: only called when something is)."""
        from .encoding import _Encoding

        return _Encoding(self.free | set(extra), self.fixed)
