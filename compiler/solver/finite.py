"""An exact pure-Python solver for what unit propagation leaves open (no z3 import).

After moeforge.compiler.solver.problem folds the pins in and propagates, a recipe's residual problem is a handful of
auto knobs with small domains: a few booleans and enums, now and then an optional integer that
rules only compare with constants (`hybridep_ranks_per_nvlink_domain == 8`) or test for dividing a
constant (`2 % (etp * 2) == 0`). Importing z3 and building an Optimize for that costs more than
the whole rest of a check, so this module settles such problems by enumeration, with the SAME
semantics as moeforge.compiler.solver.encoding + z3's Optimize in moeforge.compiler.solver.solve._optimise:

- values are encoded as moeforge.compiler.solver.encoding encodes them (an enum is its index, an unset optional
  integer is 0, a set is one boolean per member), and rules are read as z3 reads those terms;
- the cost of an assignment is what the z3 objective minimises: the weight of every preference it
  breaks, plus 1 for every auto knob off megatron-core's default;
- an integer's infinite domain is cut into classes on which every rule that reads it is constant
  (each constant it is compared with, each divisor of a constant it must divide, its default and
  its bounds are points of their own; the gaps between them are one class each);
- independent knobs (no rule or preference reads both) are settled separately.

It answers only when the answer is forced to be z3's: the optimum is unique on the auto knobs, and
each of them is a single value (not a gap of several, where z3 picks one of many). Anything else
(no solution, ties, an expression outside this fragment, too many combinations) returns None, and
moeforge.compiler.solver.solve asks z3 as before. tests/compiler/test_finite_solve.py compares both on the catalogue.
"""
from __future__ import annotations

from itertools import product

from moeforge.compiler.solver.problem import DERIVED, MAX_INT, SPEC
from moeforge.compiler.rules import expr as E

MAX_COMBINATIONS = 4096   # per independent group of knobs: above this, z3 (2^12, a dozen booleans)
MAX_DIVIDEND = 1 << 40    # divisors of larger constants are not enumerated (trial division to 2^20)
_U = E.UNKNOWN            # z3's x % 0 is unspecified: a truth value that depends on it is not settled here


class _Unsupported(Exception):
    """The problem leaves this module's fragment: z3 decides."""


class Settled:
    """The auto knobs' values, and what is needed to tell which of them the rules force."""

    def __init__(self, values: dict, groups: list):
        self.values = values
        self._groups = groups

    def forced(self, names: list[str]) -> list[str] | None:
        """Of `names` (each a settled knob), those that no assignment satisfying the rules moves off
        its value (what moeforge.compiler.solver.solve._forcing_rules asks z3 per name); None: cannot tell here."""
        out = []
        for name in names:
            group = next((g for g in self._groups if name in g.names), None)
            if group is None:
                return None
            try:
                if not group.has_other(name):
                    out.append(name)
            except _Unsupported:
                return None
        return out


def settle(problem, auto_free: list[str]) -> Settled | None:
    """Values for `auto_free` (the auto knobs among problem.free) exactly as z3 would choose them, or
    None where this module cannot be sure (see the module docstring)."""
    try:
        return _settle(problem, auto_free)
    except _Unsupported:
        return None


def _settle(problem, auto_free: list[str]) -> Settled | None:
    hard = list(problem.residual.values())
    soft = [(e, p.weight) for p, e in problem.prefs]
    names = sorted(problem.free)
    for name in names:
        spec = SPEC.get(name)
        if spec is None or name in DERIVED or spec.kind in ("float", "str"):
            raise _Unsupported(name)
    atoms = {n: set() for n in names}  # integer knob -> its points (constants, divisors)
    for e, _ in [(e, 0) for e in hard] + soft:
        _scan(e, atoms)
    parent = {n: n for n in names}

    def root(n):
        while parent[n] != n:
            n = parent[n]
        return n

    for e, _ in [(e, 0) for e in hard] + soft:
        fields = sorted(e.fields())
        for other in fields[1:]:
            parent[root(other)] = root(fields[0])
    members: dict[str, list[str]] = {}
    for n in names:
        members.setdefault(root(n), []).append(n)
    out = set(auto_free)
    values, groups = {}, []
    for group_names in members.values():
        group = _Group(group_names, [e for e in hard if e.fields() & set(group_names)],
                       [(e, w) for e, w in soft if e.fields() & set(group_names)], atoms, problem.fixed, out)
        chosen = group.optimum()
        if chosen is None:
            return None
        values.update(chosen)
        groups.append(group)
    return Settled({n: values[n] for n in auto_free}, groups)


# ----------------------------------------------------------------------------- value classes

def _const(name: str, value):
    """A constant as moeforge.compiler.solver.encoding.Encoding.const encodes it for this knob."""
    spec = SPEC[name]
    if spec.kind == "bool":
        return bool(value)
    if spec.kind == "enum":
        return spec.domain.index(value) if value in spec.domain else -1
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise _Unsupported(repr(value))
    return 0 if value is None else value


def _is_int(name: str) -> bool:
    return SPEC[name].kind in ("int", "opt_int")


class _Scan(E.Walk):
    """Collect each integer knob's points (env: name -> its set of points), refusing (_Unsupported) any use of a
    knob outside this module's fragment."""

    def on_and(self, e, atoms):
        """Connectives add no points of their own: scan every operand (on_or shares this step)."""
        for i in e.items:
            self.walk(i, atoms)

    on_or = on_and

    def on_not(self, e, atoms):
        """A negation adds no points: scan its operand."""
        self.walk(e.item, atoms)

    def on_field(self, e, atoms):  # a boolean knob used as a condition
        """Only a boolean knob may stand alone as a condition; any other is outside the fragment."""
        if SPEC[e.name].kind != "bool":
            raise _Unsupported(repr(e))

    def on_const(self, e, atoms):
        """Only a boolean constant may stand alone; a bare number is outside the fragment."""
        if not isinstance(e.value, bool):
            raise _Unsupported(repr(e))

    def on_has(self, e, atoms):
        """Membership is in the fragment only when it tests a set knob named directly."""
        if type(e.item) is not E.Field or SPEC[e.item.name].kind != "set":
            raise _Unsupported(repr(e))

    def on_is_set(self, e, atoms):
        """An integer knob's unset value (0) is one of its points; a boolean has no unset state, so it is refused."""
        kind = SPEC[e.item.name].kind if type(e.item) is E.Field else None
        if kind is None or kind == "bool":
            raise _Unsupported(repr(e))
        if _is_int(e.item.name):
            atoms[e.item.name].add(0)

    def on_in(self, e, atoms):
        """The listed constants are points of an integer knob; `in` over a set knob is refused."""
        if type(e.item) is not E.Field or SPEC[e.item.name].kind == "set":
            raise _Unsupported(repr(e))
        if _is_int(e.item.name):
            atoms[e.item.name].update(_const(e.item.name, v) for v in e.values)

    def on_cmp(self, e, atoms):
        """Knob vs constant adds the constant's points and same-kind bool/enum pairs none; anything else must be
        a divisibility test, whose divisors become its factors' points."""
        a, b = e.a, e.b
        if type(a) is E.Field and type(b) is E.Const:
            _point(a.name, b.value, e.op, atoms)
        elif type(b) is E.Field and type(a) is E.Const:
            _point(b.name, a.value, e.op, atoms)
        elif type(a) is E.Field and type(b) is E.Field:
            kind = SPEC[a.name].kind
            if kind not in ("bool", "enum") or SPEC[b.name].kind != kind or (kind == "bool" and e.op not in ("==", "!=")):
                raise _Unsupported(repr(e))
        else:
            n, factors = _divides(e)
            for f in factors:
                atoms[f].update(_divisors(n))

    def on_arith(self, e, atoms):  # outside a divisibility test (cmp): z3's
        """Arithmetic outside a divisibility test (on_cmp) is left to z3: refused here."""
        raise _Unsupported(repr(e))


_scan = _Scan().walk


def _point(name: str, value, op: str, atoms: dict) -> None:
    kind = SPEC[name].kind
    if kind == "set" or (kind == "bool" and op not in ("==", "!=")):
        raise _Unsupported(name)
    c = _const(name, value)
    if _is_int(name):
        atoms[name].add(c)


def _divides(e: E.Cmp) -> tuple[int, list[str]]:
    """`n % (x * y * c) == 0` (or !=): n a constant >= 0, the divisor a product of integer knobs and
    constants >= 0. Returns n and the knobs. Any other arithmetic is z3's."""
    a, b = e.a, e.b
    if not (e.op in ("==", "!=") and type(a) is E.Arith and a.op == "%" and type(b) is E.Const
            and b.value == 0 and not isinstance(b.value, bool)):
        raise _Unsupported(repr(e))
    n = a.a.value if type(a.a) is E.Const else None
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_DIVIDEND:
        raise _Unsupported(repr(e))
    factors, stack = [], [a.b]
    while stack:
        x = stack.pop()
        if type(x) is E.Arith and x.op == "*":
            stack += [x.a, x.b]
        elif type(x) is E.Field and _is_int(x.name):
            factors.append(x.name)
        elif not (type(x) is E.Const and isinstance(x.value, int) and not isinstance(x.value, bool) and x.value >= 0):
            raise _Unsupported(repr(e))
    return n, factors


def _divisors(n: int) -> set[int]:
    out, i = set(), 1
    while i * i <= n:
        if n % i == 0:
            out |= {i, n // i}
        i += 1
    return out


def _classes(name: str, points: set, fixed: dict) -> list[tuple[object, int]]:
    """(encoded representative, how many values it stands for) per class of this knob's domain."""
    spec = SPEC[name]
    if spec.kind == "bool":
        return [(False, 1), (True, 1)]
    if spec.kind == "enum":
        return [(i, 1) for i in range(len(spec.domain))]
    if spec.kind == "set":
        if len(spec.domain) > 12:
            raise _Unsupported(name)
        return [(tuple(bool(mask >> i & 1) for i in range(len(spec.domain))), 1)
                for mask in range(1 << len(spec.domain))]
    lo, hi = (1 if spec.kind == "int" else 0), MAX_INT
    if spec.bound:  # moeforge.compiler.solver.encoding bounds the knob by another field's fixed value
        if spec.bound not in fixed:
            raise _Unsupported(name)
        if fixed[spec.bound] is not None:
            hi = min(hi, _const(spec.bound, fixed[spec.bound]))
    inside = sorted({p for p in points | {lo, _const(name, spec.default)} if lo <= p <= hi})
    out = []
    for i, p in enumerate(inside):
        out.append((p, 1))
        end = inside[i + 1] - 1 if i + 1 < len(inside) else hi
        if end > p:
            out.append((p + 1, end - p))
    return out


def _decode(name: str, raw):
    """A value as moeforge.compiler.solver.encoding.Encoding.read decodes it."""
    spec = SPEC[name]
    if spec.kind == "set":
        return [m for m, on in zip(spec.domain, raw) if on] or None
    if spec.kind == "enum":
        return spec.domain[raw]
    if spec.kind == "opt_int":
        return raw or None
    return raw


# ----------------------------------------------------------------------------- evaluation

class _Z3Reading(E.Evaluate):
    """An expression's value as z3 evaluates the term moeforge.compiler.solver.encoding builds for it, over encoded values
    (every free field has one). The connectives are Evaluate's: UNKNOWN here stands for a value that depends on
    z3's unspecified x % 0. The leaves differ: a constant is compared in its encoding (an enum as its index, an
    unset optional integer as 0, a set as one boolean per member), and arithmetic appears only as divisibility."""

    def on_field(self, e, env):
        """A free field's value in its encoding, as env holds it."""
        return env[e.name]

    def on_has(self, e, env):
        """A set knob's member boolean, found by the member's index in the knob's domain."""
        name = e.item.name
        return env[name][SPEC[name].domain.index(e.member)]

    def on_is_set(self, e, env):
        """Unset as encoding.py reads it: no member of a set, an enum's None index, an integer's 0."""
        name = e.item.name
        kind = SPEC[name].kind
        if kind == "set":
            return any(env[name])
        return env[name] != (_const(name, None) if kind == "enum" else 0)

    def on_in(self, e, env):
        """Membership compared in the encoding, so an enum matches by index as the z3 term does."""
        name = e.item.name
        return env[name] in {_const(name, v) for v in e.values}

    def on_cmp(self, e, env):
        """A comparison in the encoding; a divisibility test by 0 is UNKNOWN (z3 leaves x % 0 unspecified)."""
        a, b = e.a, e.b
        if type(a) is E.Field and type(b) is E.Const:
            lhs, rhs = env[a.name], _const(a.name, b.value)
        elif type(b) is E.Field and type(a) is E.Const:
            lhs, rhs = _const(b.name, a.value), env[b.name]
        elif type(a) is E.Field and type(b) is E.Field:
            lhs, rhs = env[a.name], env[b.name]
        else:  # n % (product) compared with 0 (checked by _divides)
            d = _product(a.b, env)
            if d == 0:
                return _U
            lhs, rhs = a.a.value % d, 0
        return E.COMPARISONS[e.op](lhs, rhs)

    def on_arith(self, e, env):  # only inside a divisibility test (cmp), which _Scan admits alone
        """Never reached alone: _Scan admits arithmetic only inside a divisibility test, which on_cmp reads."""
        raise _Unsupported(repr(e))


_value = _Z3Reading().walk


def _product(e: E.Expr, env: dict) -> int:
    if type(e) is E.Arith:
        return _product(e.a, env) * _product(e.b, env)
    return env[e.name] if type(e) is E.Field else e.value


def _holds(e: E.Expr, env: dict) -> bool:
    v = _value(e, env)
    if v is _U:
        raise _Unsupported(repr(e))
    return bool(v)


class _Group:
    """Knobs that rules or preferences tie together, settled by enumerating their classes."""

    def __init__(self, names, hard, soft, atoms, fixed, out):
        self.names = names
        self.hard, self.soft = hard, soft
        self.classes = [_classes(n, atoms.get(n, set()), fixed) for n in names]
        size = 1
        for c in self.classes:
            size *= len(c)
        if size > MAX_COMBINATIONS:
            raise _Unsupported(f"{size} combinations")
        self.out = [i for i, n in enumerate(names) if n in out]
        self.defaults = {i: self._default(names[i]) for i in self.out}

    @staticmethod
    def _default(name: str):
        spec = SPEC[name]
        if spec.kind == "set":
            members = set(spec.default or ())
            return tuple(m in members for m in spec.domain)
        return _const(name, spec.default)

    def _feasible(self):
        for combo in product(*self.classes):
            env = {n: c[0] for n, c in zip(self.names, combo)}
            if all(_holds(e, env) for e in self.hard):
                yield combo, env

    def optimum(self) -> dict | None:
        """The auto knobs' decoded values at the unique optimum (None: none, or not unique)."""
        best, chosen = None, set()
        for combo, env in self._feasible():
            cost = sum(w for e, w in self.soft if not _holds(e, env))
            cost += sum(1 for i in self.out if combo[i][0] != self.defaults[i])
            key = tuple(combo[i] for i in self.out)
            if best is None or cost < best:
                best, chosen = cost, {key}
            elif cost == best:
                chosen.add(key)
        if len(chosen) != 1:
            return None  # nothing satisfies the rules (z3 explains), or a tie z3 would break its own way
        (key,) = chosen
        if any(size != 1 for _, size in key):
            return None  # a class of several values: which one z3 returns is z3's choice
        self.chosen = {self.names[i]: rep for i, (rep, _) in zip(self.out, key)}
        return {n: _decode(n, rep) for n, rep in self.chosen.items()}

    def has_other(self, name: str) -> bool:
        """Does some assignment satisfying the rules give `name` another value than the settled one?"""
        i = self.names.index(name)
        return any(combo[i][0] != self.chosen[name] or combo[i][1] > 1 for combo, _ in self._feasible())
