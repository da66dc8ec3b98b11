"""The rule catalogue: every compatibility rule Megatron enforces, held once, as data.

One module per concern; each exports RULES (and optionally PREFERENCES). A rule reads
"when `when` holds, `require` must hold". Errors are hard constraints for the solver,
warnings and advice are checked on the finished plan, and `silent` rules describe what
Megatron would rewrite at start-up without telling anyone (made explicit, errors under
--strict).

Two views of the same catalogue are exported:

- CATALOGUE: the rules exactly as written (lint-config evaluates these; `moeforge rules`
  prints these).
- RULES: what the recipe compiler uses. A recipe cannot set the lint-only knobs
  (deprecated spellings, list- or string-valued layout fields, see knobs.LINT_ONLY), so in
  RULES those fields are replaced by megatron-core's default and the expressions folded;
  rules marked `lint_only` (meaningless without such a field) are left out.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from functools import lru_cache
from importlib import import_module

from moeforge.compiler.rules.expr import TRUE, Expr, fold
from moeforge.compiler.knobs.table import BY_FIELD, LINT_ONLY
from moeforge.compiler.knobs.versions import version_int

CONCERNS = ("ep_overlap", "delayed_wgrad", "dispatcher", "cuda_graphs", "recompute", "comm_overlap", "layout",
            "architecture", "precision", "optimizer", "kernels", "nvlink", "training_io", "advice", "guidance")

ORIGINS = ("megatron-core", "megatron-bridge", "megatron-lm", "moeforge")


_OPS = {">=": int.__ge__, "<": int.__lt__, "<=": int.__le__, ">": int.__gt__, "==": int.__eq__}


@lru_cache(maxsize=None)
def _clauses(spec: str) -> tuple:
    """'>=0.17.0,<0.19.0' -> ((int.__ge__, 17000), (int.__lt__, 19000))."""
    out = []
    for clause in spec.split(","):
        clause = clause.strip()
        op = clause.rstrip("0123456789.")
        out.append((_OPS[op], version_int(clause[len(op):])))
    return tuple(out)


def _version_ok(facts: dict, versions: tuple) -> bool | None:
    for fact, spec in versions:
        have = facts.get(fact)
        if have is None or isinstance(have, bool) or not isinstance(have, int):
            return None
        for op, want in _clauses(spec):
            if not op(have, want):
                return False
    return True


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One compatibility rule, written as data: `Rule(id=..., severity=..., when=..., require=..., ...)`."""

    id: str
    severity: str                       # error | warning | advice
    when: Expr
    require: Expr
    message: str                        # moeforge's words
    source: str                         # the Megatron file(s) and versions it mirrors
    fix: str                            # the smallest change, in words
    megatron_message: str | None = None  # exact text Megatron raises/warns (None: moeforge-only)
    origin: str = "megatron-core"       # megatron-core | megatron-bridge | megatron-lm | moeforge
    versions: tuple = ()                # ((fact, ">=0.17.0"), ...) where the rule holds
    silent: dict = field(default_factory=dict)  # field -> value Megatron silently sets instead
    evidence: str | None = None         # measured figures behind advice
    # Version-specific wording of megatron_message: ((versions, text), ...), first match wins.
    variants: tuple = ()
    # What the other front-ends say for the same check: ((who, text), ...).
    also: tuple = ()
    # Only lint-config can evaluate it (it is about a field a recipe cannot set).
    lint_only: bool = False
    # Only a training run checks it (MoELayer.forward when training, the optimizer, the DDP, training I/O): an
    # inference launch never meets it (lint-config of a launch; a module's TRAINING_ONLY marks all its rules).
    training_only: bool = False

    def applies(self, facts: dict) -> bool | None:
        """Whether the rule is in force for these software versions (None: unknown)."""
        return _version_ok(facts, self.versions)

    def megatron_message_for(self, facts: dict) -> str | None:
        """megatron_message in the wording of the platform's versions (unknown: the default)."""
        for versions, text in self.variants:
            if _version_ok(facts, versions) is True:
                return text
        return self.megatron_message

    @cached_property
    def fields(self) -> frozenset[str]:
        """The knobs the rule reads, in either half: the fields a diagnostic names and the solver indexes."""
        return self.when.fields() | self.require.fields()


@dataclass(frozen=True, kw_only=True)
class Preference:
    """Soft guidance from the seeds: the solver honours it unless a pin or rule says no."""

    id: str
    prefer: Expr
    weight: int
    reason: str
    when: Expr = TRUE


# ------------------------------------------------------------- specialising for recipes

def _specialise(rule: Rule, defaults: dict) -> Rule:
    if not rule.fields & defaults.keys():
        return rule
    return replace(rule, when=fold(rule.when, defaults), require=fold(rule.require, defaults))


def _load():
    rules, prefs = [], []
    for name in CONCERNS:
        mod = import_module(f"{__name__}.{name}")
        marked = getattr(mod, "TRAINING_ONLY", False)
        rules.extend(replace(r, training_only=True) if marked else r for r in getattr(mod, "RULES", ()))
        prefs.extend(getattr(mod, "PREFERENCES", ()))
    ids = [r.id for r in rules] + [p.id for p in prefs]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise RuntimeError(f"duplicate rule ids: {sorted(dupes)}")
    for r in rules:
        if r.origin not in ORIGINS or r.severity not in ("error", "warning", "advice"):
            raise RuntimeError(f"rule {r.id}: bad origin/severity {r.origin}/{r.severity}")
    defaults = {f: BY_FIELD[f].default for f in LINT_ONLY}
    for p in prefs:
        if (p.prefer.fields() | p.when.fields()) & LINT_ONLY:
            raise RuntimeError(f"preference {p.id} mentions a lint-only field")
    recipe_rules = tuple(_specialise(r, defaults) for r in rules if not r.lint_only)
    return tuple(rules), recipe_rules, tuple(prefs)


CATALOGUE, RULES, PREFERENCES = _load()
BY_ID = {r.id: r for r in CATALOGUE}
