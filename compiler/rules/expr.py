"""A tiny expression language for rules, and the one walk its interpreters share.

A rule's `when` and `require` are written once, as data (`F("expert_model_parallel_size") > 1`), and read
several ways (Walk says where they differ and why): `evaluate` on concrete values (lint-config, warnings on a
finished plan; three-valued so that an unknown quantity skips a check instead of failing it), `fold` with the
pins (what the solver must still decide), and the solver's own two readings of what is left (finite.py, z3 in
encoding.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from moeforge.compiler.knobs.versions import version_int


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

    def is_(self, value: bool) -> "Cmp":
        """`F(x).is_(True)`: the same node as `F(x) == True`, spelled so that no linter reads it as a Python
        comparison with a boolean (flake8 E712)."""
        return Cmp("==", self, self._wrap(value))

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
        """Membership as a node: Python's `in` cannot build an expression, so rules write F(x).isin(a, b)."""
        return In(self, tuple(values))

    __hash__ = object.__hash__

    def fields(self) -> frozenset[str]:
        """The field names this expression reads (computed once: expressions never change)."""
        cached = self.__dict__.get("_fields")
        if cached is None:
            cached = self.__dict__["_fields"] = frozenset().union(*(c.fields() for c in self.children()))
        return cached

    def children(self) -> tuple["Expr", ...]:
        """The sub-expressions a walk descends into; a leaf has none."""
        return ()


@dataclass(eq=False)
class Field(Expr):
    name: str

    def fields(self):
        """A field reads only itself: the leaf the cached union in Expr.fields starts from."""
        return frozenset((self.name,))

    def __repr__(self):
        return self.name


def F(name: str) -> Field:
    """The rule catalogue's shorthand for a knob reference, so a rule reads like its Megatron assertion."""
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
        """Both operands, for the walks and Expr.fields."""
        return (self.a, self.b)

    def __repr__(self):
        return f"{self.a!r} {self.op} {self.b!r}"


@dataclass(eq=False)
class Arith(Expr):
    op: str
    a: Expr
    b: Expr

    def children(self):
        """Both operands, for the walks and Expr.fields."""
        return (self.a, self.b)

    def __repr__(self):
        return f"({self.a!r} {self.op} {self.b!r})"


class _Junction(Expr):
    """And / Or over any number of items (plain values are wrapped as constants)."""

    word = ""

    def __init__(self, *items):
        self.items = tuple(i if isinstance(i, Expr) else Const(i) for i in items)

    def children(self):
        """Every operand of the And/Or, for the walks and Expr.fields."""
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
        """The negated operand, for the walks and Expr.fields."""
        return (self.item,)

    def __repr__(self):
        return f"not ({self.item!r})"


@dataclass(eq=False)
class In(Expr):
    item: Expr
    values: tuple

    def children(self):
        """The tested operand (the values are constants, not expressions)."""
        return (self.item,)

    def __repr__(self):
        return f"{self.item!r} in {list(self.values)!r}"


@dataclass(eq=False)
class Has(Expr):
    """A set-valued knob (recompute_modules, cuda_graph_modules) contains a member."""

    item: Field
    member: str

    def children(self):
        """The list-valued operand (the member is a constant, not an expression)."""
        return (self.item,)

    def __repr__(self):
        return f"{self.member!r} in {self.item!r}"


@dataclass(eq=False)
class IsSet(Expr):
    """The knob has a value (is not None)."""

    item: Field

    def children(self):
        """The optional operand whose being set is tested."""
        return (self.item,)

    def __repr__(self):
        return f"{self.item!r} is set"


def Implies(a: Expr, b: Expr) -> Expr:
    """a -> b as not-a-or-b, so no interpreter needs an implication step of its own."""
    return Or(Not(a), b)


def AtLeast(fact: str, version: str) -> Expr:
    """An installed package's version is at least `version` (absent counts as 0)."""
    return Cmp(">=", Field(fact), Const(version_int(version)))


TRUE = Const(True)
# Transformer Engine installed (a platform with it builds the Transformer Engine layer spec)
TE_INSTALLED = AtLeast("transformer_engine", "0.1.0")

# ---------------------------------------------------------------- one walk, several interpreters

class Walk:
    """One walk over a rule expression, shared by every interpreter of it: walk(expr, env) dispatches on the
    node's type to the step named for it (on_field, on_const, on_and, ... on_arith); a step
    walks the node's children as it needs them.

    The interpreters differ only where their semantics do, each saying why in its own steps:
    - Evaluate (here): concrete values, three-valued, so that an unknown quantity (a field the values lack, a
      division by zero) skips a check instead of failing it: lint-config, a finished plan's warnings, the solver's
      trials of candidate values.
    - Fold (here): partial evaluation: the known fields become constants, constant subtrees are evaluated, the rest
      stays an expression (what the solver must still decide).
    - compiler/solver/finite.py: z3's semantics over the solver's encoding of values (an enum is its index, an
      unset optional integer 0); its connectives are Evaluate's, UNKNOWN standing for z3's unspecified x % 0.
    - compiler/solver/encoding.py: z3 terms instead of values (nothing short-circuits: z3 decides).
    """

    STEPS = {}  # node type -> the step's name; filled in below, once the node classes exist

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls._table = {node: getattr(cls, name) for node, name in Walk.STEPS.items() if hasattr(cls, name)}

    def walk(self, expr: Expr, env):
        """Dispatch to the interpreter's step for the node's type; a node it has no step for is a TypeError."""
        step = self._table.get(type(expr))
        if step is None:
            raise TypeError(f"{type(self).__name__} cannot read {expr!r}")
        return step(self, expr, env)


Walk.STEPS = {Field: "on_field", Const: "on_const", And: "on_and", Or: "on_or", Not: "on_not", In: "on_in",
              Has: "on_has", IsSet: "on_is_set", Cmp: "on_cmp", Arith: "on_arith"}

COMPARISONS: dict[str, Callable[[object, object], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
_RING: dict[str, Callable[[int, int], int]] = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
                                               "*": lambda a, b: a * b}


class Evaluate(Walk):
    """The value of an expression over field values (field -> value); UNKNOWN propagates like SQL NULL."""

    def on_field(self, e, env):
        """A field's value, UNKNOWN when env lacks it, so a check on an unknown quantity is skipped, not failed."""
        return env.get(e.name, UNKNOWN)

    def on_const(self, e, env):
        """A constant is its own value."""
        return e.value

    def on_and(self, e, env):
        """False if any operand is False (even beside an UNKNOWN), else UNKNOWN if any is, else True."""
        unknown = False
        for item in e.items:
            v = self.walk(item, env)
            if v is UNKNOWN:
                unknown = True
            elif not v:
                return False
        return UNKNOWN if unknown else True

    def on_or(self, e, env):
        """True if any operand is True (even beside an UNKNOWN), else UNKNOWN if any is, else False."""
        unknown = False
        for item in e.items:
            v = self.walk(item, env)
            if v is UNKNOWN:
                unknown = True
            elif v:
                return True
        return UNKNOWN if unknown else False

    def on_not(self, e, env):
        """Negation, UNKNOWN staying UNKNOWN."""
        v = self.walk(e.item, env)
        return v if v is UNKNOWN else not v

    def on_in(self, e, env):
        """Membership in the constant values, UNKNOWN staying UNKNOWN."""
        v = self.walk(e.item, env)
        return v if v is UNKNOWN else v in e.values

    def on_has(self, e, env):
        """Whether a list-valued knob holds the member; an unset list (None) holds nothing."""
        v = self.walk(e.item, env)
        return v if v is UNKNOWN else e.member in (v or ())

    def on_is_set(self, e, env):
        """Whether an optional knob is set (not None), UNKNOWN staying UNKNOWN."""
        v = self.walk(e.item, env)
        return v if v is UNKNOWN else v is not None

    def on_cmp(self, e, env):
        """Compare as the solver does: == and != on raw values, orderings with None and booleans as numbers."""
        a, b = self.walk(e.a, env), self.walk(e.b, env)
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        if e.op in ("==", "!="):
            return COMPARISONS[e.op](a, b)
        return COMPARISONS[e.op](_num(a), _num(b))

    def on_arith(self, e, env):
        """Integer arithmetic as the solver encodes it; a division by zero is UNKNOWN (z3 leaves x % 0 unspecified)."""
        a, b = self.walk(e.a, env), self.walk(e.b, env)
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        a, b = _num(a), _num(b)
        if e.op in _RING:
            return _RING[e.op](a, b)
        if b == 0:
            return UNKNOWN
        return a // b if e.op == "//" else a % b


def _num(v):
    """None compares as 0, exactly as the solver encodes an unset optional integer; a truth value
    counts 1 or 0 (`PP - IsSet(first_stage)` is the middle stages), as moeforge.compiler.solver.encoding counts it."""
    if v is None or v is False:
        return 0
    if v is True:
        return 1
    return v


evaluate = Evaluate().walk  # evaluate(expr, env): expr's value over env (field -> value); UNKNOWN propagates


class Fold(Walk):
    """expr with the given fields replaced by constants and constant subtrees evaluated (by Evaluate)."""

    def on_field(self, e, values):
        """A pinned field becomes its constant; an unpinned one stays for the solver."""
        return Const(values[e.name]) if e.name in values else e

    def on_const(self, e, values):
        """A constant is already folded."""
        return e

    def _junction(self, e, values, absorbing: bool):
        """And (absorbing False) / Or (absorbing True): an absorbing constant decides, neutral ones drop out."""
        items = tuple(self.walk(i, values) for i in e.items)
        if any(type(i) is Const and i.value is absorbing for i in items):
            return Const(absorbing)
        rest = tuple(i for i in items if not (type(i) is Const and i.value is (not absorbing)))
        if not rest:
            return Const(not absorbing)
        return rest[0] if len(rest) == 1 else type(e)(*rest)

    def on_and(self, e, values):
        """Fold an And: a False operand decides it, True operands drop out."""
        return self._junction(e, values, False)

    def on_or(self, e, values):
        """Fold an Or: a True operand decides it, False operands drop out."""
        return self._junction(e, values, True)

    def on_not(self, e, values):
        """Fold the operand; a constant result is negated now."""
        return _settled(Not(self.walk(e.item, values)))

    def on_in(self, e, values):
        """Fold the operand; a constant result is tested against the values now."""
        return _settled(In(self.walk(e.item, values), e.values))

    def on_has(self, e, values):
        """Fold the operand; a constant list is tested for the member now (None holds nothing)."""
        item = self.walk(e.item, values)
        return Has(item, e.member) if type(item) is Field else Const(e.member in (item.value or ()))

    def on_is_set(self, e, values):
        """Fold the operand; a constant is tested for being set (not None) now."""
        item = self.walk(e.item, values)
        return IsSet(item) if type(item) is Field else Const(item.value is not None)

    def on_cmp(self, e, values):
        """Fold both operands; two constants are compared now, as Evaluate compares them."""
        return _settled(Cmp(e.op, self.walk(e.a, values), self.walk(e.b, values)))

    def on_arith(self, e, values):
        """Fold both operands; two constants are computed now, as Evaluate computes them."""
        return _settled(Arith(e.op, self.walk(e.a, values), self.walk(e.b, values)))


def _settled(new: Expr) -> Expr:
    """A node whose children are all constants, evaluated; else the node."""
    if all(type(c) is Const for c in new.children()):
        return Const(evaluate(new, {}))
    return new


fold = Fold().walk  # fold(expr, values): expr with these fields' values folded in
