"""A tiny expression language for rules, with two interpreters.

A rule's `when` and `require` are written once, as data (`F("expert_model_parallel_size") > 1`),
and read two ways: `evaluate` on concrete values (lint-config, warnings on a finished plan;
three-valued so that an unknown quantity skips a check instead of failing it) and
`compiler.solver.solve` translating them to z3 for solving and explaining.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from compiler.knobs.versions import version_int


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:  # never silently truthy
        raise TypeError("UNKNOWN has no truth value")


UNKNOWN = _Unknown()


class Expr:
    """Base: operators build comparison and boolean nodes."""

    def _wrap(self, other):
        return other if isinstance(other, Expr) else Const(other)

    def __eq__(self, other):  # type: ignore[override]
        return Cmp("==", self, self._wrap(other))

    def __ne__(self, other):  # type: ignore[override]
        return Cmp("!=", self, self._wrap(other))

    def __lt__(self, other):
        return Cmp("<", self, self._wrap(other))

    def __le__(self, other):
        return Cmp("<=", self, self._wrap(other))

    def __gt__(self, other):
        return Cmp(">", self, self._wrap(other))

    def __ge__(self, other):
        return Cmp(">=", self, self._wrap(other))

    def __and__(self, other):
        return And(self, self._wrap(other))

    def __or__(self, other):
        return Or(self, self._wrap(other))

    def __invert__(self):
        return Not(self)

    def __add__(self, other):
        return Arith("+", self, self._wrap(other))

    def __sub__(self, other):
        return Arith("-", self, self._wrap(other))

    def __mul__(self, other):
        return Arith("*", self, self._wrap(other))

    def __mod__(self, other):
        return Arith("%", self, self._wrap(other))

    def __floordiv__(self, other):
        return Arith("//", self, self._wrap(other))

    def isin(self, *values) -> "In":
        return In(self, tuple(values))

    __hash__ = object.__hash__

    def fields(self) -> frozenset[str]:
        """The field names this expression reads (computed once: expressions never change)."""
        cached = self.__dict__.get("_fields")
        if cached is None:
            cached = self.__dict__["_fields"] = frozenset().union(*(c.fields() for c in self.children()))
        return cached

    def children(self) -> tuple["Expr", ...]:
        return ()


@dataclass(eq=False)
class Field(Expr):
    name: str

    def fields(self):
        return frozenset((self.name,))

    def __repr__(self):
        return self.name


def F(name: str) -> Field:
    return Field(name)


@dataclass(eq=False)
class Const(Expr):
    value: object

    def __repr__(self):
        return repr(self.value)


@dataclass(eq=False)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr

    def children(self):
        return (self.a, self.b)

    def __repr__(self):
        return f"{self.a!r} {self.op} {self.b!r}"


@dataclass(eq=False)
class Arith(Expr):
    op: str
    a: Expr
    b: Expr

    def children(self):
        return (self.a, self.b)

    def __repr__(self):
        return f"({self.a!r} {self.op} {self.b!r})"


class _Junction(Expr):
    """And / Or over any number of items (plain values are wrapped as constants)."""

    word = ""

    def __init__(self, *items):
        self.items = tuple(i if isinstance(i, Expr) else Const(i) for i in items)

    def children(self):
        return self.items

    def __repr__(self):
        return f" {self.word} ".join(f"({i!r})" for i in self.items)


class And(_Junction):
    word = "and"


class Or(_Junction):
    word = "or"


@dataclass(eq=False)
class Not(Expr):
    item: Expr

    def children(self):
        return (self.item,)

    def __repr__(self):
        return f"not ({self.item!r})"


@dataclass(eq=False)
class In(Expr):
    item: Expr
    values: tuple

    def children(self):
        return (self.item,)

    def __repr__(self):
        return f"{self.item!r} in {list(self.values)!r}"


@dataclass(eq=False)
class Has(Expr):
    """A set-valued knob (recompute_modules, cuda_graph_modules) contains a member."""

    item: Field
    member: str

    def children(self):
        return (self.item,)

    def __repr__(self):
        return f"{self.member!r} in {self.item!r}"


@dataclass(eq=False)
class IsSet(Expr):
    """The knob has a value (is not None)."""

    item: Field

    def children(self):
        return (self.item,)

    def __repr__(self):
        return f"{self.item!r} is set"


def Implies(a: Expr, b: Expr) -> Expr:
    return Or(Not(a), b)


def AtLeast(fact: str, version: str) -> Expr:
    """An installed package's version is at least `version` (absent counts as 0)."""
    return Cmp(">=", Field(fact), Const(version_int(version)))


TRUE = Const(True)
# Transformer Engine installed (a platform with it builds the Transformer Engine layer spec)
TE_INSTALLED = AtLeast("transformer_engine", "0.1.0")

# ---------------------------------------------------------------- concrete evaluation

COMPARISONS: dict[str, Callable[[object, object], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


_RING: dict[str, Callable[[int, int], int]] = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
                                               "*": lambda a, b: a * b}


def evaluate(expr: Expr, env: dict) -> object:
    """Value of expr over env (field -> value); UNKNOWN propagates like SQL NULL."""
    t = type(expr)
    if t is Field:
        return env.get(expr.name, UNKNOWN)
    if t is Const:
        return expr.value
    if t is And:
        unknown = False
        for item in expr.items:
            v = evaluate(item, env)
            if v is UNKNOWN:
                unknown = True
            elif not v:
                return False
        return UNKNOWN if unknown else True
    if t is Or:
        unknown = False
        for item in expr.items:
            v = evaluate(item, env)
            if v is UNKNOWN:
                unknown = True
            elif v:
                return True
        return UNKNOWN if unknown else False
    if t is Not:
        v = evaluate(expr.item, env)
        return v if v is UNKNOWN else not v
    if t is In:
        v = evaluate(expr.item, env)
        return v if v is UNKNOWN else v in expr.values
    if t is Has:
        v = evaluate(expr.item, env)
        return v if v is UNKNOWN else expr.member in (v or ())
    if t is IsSet:
        v = evaluate(expr.item, env)
        return v if v is UNKNOWN else v is not None
    a, b = evaluate(expr.a, env), evaluate(expr.b, env)
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    if t is Cmp:
        if expr.op in ("==", "!="):
            return COMPARISONS[expr.op](a, b)
        return COMPARISONS[expr.op](_num(a), _num(b))
    if t is Arith:
        a, b = _num(a), _num(b)
        if expr.op in _RING:
            return _RING[expr.op](a, b)
        if b == 0:
            return UNKNOWN
        return a // b if expr.op == "//" else a % b
    raise TypeError(f"cannot evaluate {expr!r}")


def _num(v):
    """None compares as 0, exactly as the solver encodes an unset optional integer; a truth value
    counts 1 or 0 (`PP - IsSet(first_stage)` is the middle stages), as compiler.solver.encoding counts it."""
    if v is None or v is False:
        return 0
    if v is True:
        return 1
    return v
