"""The compiler's stages wired together: load/compose -> migrate -> validate -> solve -> plan.

compile() is the one entry every command uses (check, compile, explain, diff, matrix, launch, plan-layout, import,
calibrate, diagnose, sweep): a recipe in, its plan (and the resolved values it came from) out, or a CompileError.
Each stage collects all of its diagnostics before the next runs; a stage that found errors stops the pipeline with
a CompileError carrying every one of them.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

from moeforge.compiler.diagnostics import CompileError, Diagnostic, Note, Position, from_rule
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.fields import megatron_core_diagnostics
from moeforge.compiler.recipe import integers, validate
from moeforge.compiler.recipe.compose import Composed, compose, resolve_recipe
from moeforge.compiler.recipe.document import Document
from moeforge.compiler.rules import BY_ID, PREFERENCES, RULES, Rule
from moeforge.compiler.rules import hazards as H
from moeforge.compiler.rules.expr import evaluate
from moeforge.compiler.solver.inputs import concrete, pins_and_auto
from moeforge.compiler.solver.solve import solve
from moeforge.compiler.solver.values import Decision, Resolved


class Compiled:
    """A compiled recipe: the values the solver resolved (with the composed recipe and its warnings and advice)
    and, unless compile() stopped before it, the plan (plan.json's content). (A plain class: a dataclass costs
    the cold check more to define than it saves.)"""

    __slots__ = ("resolved", "plan")

    def __init__(self, resolved: Resolved, plan: dict | None = None):
        self.resolved, self.plan = resolved, plan

    @property
    def composed(self) -> Composed:
        """The composed recipe behind the plan: the CLI names the build directory and messages after its id."""
        return self.resolved.composed

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """The warnings and advice a successful resolve kept (its errors were raised instead)."""
        return self.resolved.diagnostics


def compile(recipe: str | Path | dict, overrides=(), root: Path | None = None, *, strict: bool = False,
            explain_errors: bool = True, plan: bool = True, name: str = "in-memory") -> Compiled:
    """Load, compose, validate and solve a recipe (an id, a path, or builtin:ID of `root`; or a recipe document
    held in memory, a dict, which diagnostics place at `name` and which stands where recipes/`name`.yaml would),
    then build its plan; or raise CompileError with every diagnostic of the first stage that found errors.

    strict: Megatron's silent rewrites are errors. explain_errors=False: a conflict names its rules without the
    minimal pins and fixes (most of the time of a failure; matrix and the planner's search). plan=False: stop
    after solving (check, explain, diff and matrix read the values, not plan.json)."""
    resolved = resolve(load(recipe, overrides, root, name), strict, explain_errors)
    if not plan:
        return Compiled(resolved)
    from moeforge.compiler.targets.plan import build  # lazy: the cold check stops before the plan

    return Compiled(resolved, build(resolved))


def load(recipe: str | Path | dict, overrides=(), root: Path | None = None, name: str = "in-memory") -> Composed:
    """Compose and validate a recipe of `root` (default: the project's recipes/, moeforge.compiler.project); a
    dict is a recipe document in memory, named `name` (compile())."""
    if isinstance(recipe, dict):
        source = Document(name, copy.deepcopy(recipe), _positions(recipe, Position(name)))
    else:
        source = resolve_recipe(str(recipe), root)
    composed = compose(source, list(overrides), root)
    diags = []
    for doc in composed.documents:
        diags += validate.missing_schema(doc.data, doc.file)
        if _kind_of(doc, root) == "recipe":  # platform and model are checked below, overrides included
            diags += validate.check(doc.data, validate.document_schema(doc.data, "recipe"), doc.pos)
    wanted = []  # where the recipe spells an integer as a float (moeforge.compiler.recipe.integers)
    for kind in ("platform", "model"):
        part = composed.data.get(kind)
        found, paths = validate.accept(part, validate.document_schema(part, kind),
                                       lambda path, k=kind: composed.pos((k,) + tuple(path)))
        diags += found
        wanted += [(kind,) + p for p in paths]
    if not diags:
        diags += megatron_core_diagnostics((composed.data.get("platform") or {}).get("software"),
                                           composed.pos(("platform", "software", "megatron_core")))
    if not diags:  # the merged recipe (extends and overrides applied) must be valid too
        recipe_part = {k: v for k, v in composed.data.items() if k not in ("platform", "model")}
        recipe_part.update({k: composed.data[k]["name"] for k in ("platform", "model")
                            if isinstance(composed.data.get(k), dict) and "name" in composed.data[k]})
        recipe_part["schema"] = f"moeforge/recipe/v{validate.KINDS['recipe']}"
        found, paths = validate.accept(recipe_part, validate.document_schema(recipe_part, "recipe"), composed.pos)
        diags += found
        wanted += paths
    if diags:
        raise CompileError(diags)
    if not wanted:
        return composed
    data, diags = integers.applied(composed.data, wanted, composed.pos)
    if diags:
        raise CompileError(diags)
    return replace(composed, data=data)


def _positions(value, at: Position, path: tuple = ()) -> dict:
    """Every path of an in-memory document, at its name: what a file's positions are for the merge (a value
    with a position is the recipe's, not a default)."""
    out = {path: at}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        out.update(_positions(item, at, path + (key,)))
    return out


def _kind_of(doc, root: Path) -> str:
    parent = Path(doc.file).parent.name
    return next((k for k in ("platform", "model") if parent == f"{k}s"), "recipe")


def rules_in_force(env: dict) -> list[Rule]:
    """The rules the platform's versions may put in force: unknown counts as in force, only a certain no drops one."""
    return [r for r in RULES if r.applies(env) is not False]


def resolve(c: Composed, strict: bool = False, explain_errors: bool = True) -> Resolved:
    """Solve a composed recipe: every knob decided with its reason, or CompileError (--strict: warnings too)."""
    pins, auto = pins_and_auto(c)
    facts = {f: p.value for f, p in pins.items()}
    rules = rules_in_force(facts)
    hard = [r for r in rules if r.severity == "error" and not r.silent]
    silent = [r for r in rules if r.silent]
    software = H.platform_versions(c.data.get("platform"))
    live = [h for h in H.HAZARDS if h.versions(software)[0] != "cleared"]
    # an auto knob never resolves into a hazard that applies; one that only may apply (the platform does not state
    # the deciding version) stays open to it, and is reported below with the fact to state
    guards = [H.as_rule(h) for h in live if h.fields & auto and h.versions(software)[0] == "applies"]
    # with guards, a failure is not explained here (the explanation is the costly part): it is solved again without
    solution = solve(pins, auto, hard + guards, list(PREFERENCES), silent, None if guards else explain_errors)
    if guards and not solution.ok:  # only the pins can avoid it: solved without, the match is reported below
        solution = solve(pins, auto, hard, list(PREFERENCES), silent, explain_errors)
    if not solution.ok:
        raise CompileError(one_per_concern(solution.diagnostics))
    env = concrete(pins, solution.values)
    decisions = {f: Decision(f, p.value, p.origin if p.origin != "fact" else "platform",
                             str(p.pos) if p.pos and p.origin != "default" else None, _reason(f, p))
                 for f, p in pins.items()}
    decisions.update(solution.decisions)
    diags = _silent(silent, pins, auto, env, decisions, strict)
    diags += _advice([r for r in rules if r.severity in ("warning", "advice") and not r.silent], env, pins)
    diags += hazard_diagnostics(live, env, pins, software, strict or env.get("hazards") == "error")
    diags = one_per_concern(diags)
    errors = [d for d in diags if d.is_error]
    if errors:
        raise CompileError(errors)
    return Resolved(c, pins, auto, env, decisions, diags)


DEPENDENT = {"data_kind": "runtime.entrypoint", "ckpt_load": "checkpoint.save", "exclusive": "the platform's device"}


def _reason(f: str, p) -> str | None:
    """A derived value's doc; for a default that depends on other values (knobs.DEPENDENT_DEFAULTS), what
    it depends on, so no one reads it as megatron-core's fixed default."""
    if p.origin == "derived" and f in K.BY_FIELD:
        return K.BY_FIELD[f].doc
    if p.origin == "default" and f in K.DEPENDENT_DEFAULTS:
        return f"moeforge's default given {DEPENDENT.get(f, 'other values')} (not set in the recipe)"
    return None


_SEVERITY_RANK = {"error": 0, "warning": 1, "advice": 2}
_ORIGIN_RANK = {"megatron-core": 0, "megatron-lm": 1, "megatron-bridge": 2, "moeforge": 3}


def one_per_concern(diags: list[Diagnostic]) -> list[Diagnostic]:
    """One concern, one diagnostic: rules that fire at the same position and require the same thing
    (megatron-core's and Megatron-Bridge's copy of one check) are reported once, by the most severe and
    most authoritative of them (megatron-core first); the others become a note."""
    def concern(d):
        r = BY_ID.get(d.code)
        return None if r is None else (d.pos, repr(r.require))

    groups: dict = {}
    for d in diags:
        key = concern(d)
        groups.setdefault(key if key is not None else id(d), []).append(d)
    out = []
    for d in diags:
        key = concern(d)
        group = groups[key if key is not None else id(d)]
        if len(group) == 1:
            out.append(d)
            continue
        keep = min(group, key=lambda x: (_SEVERITY_RANK.get(x.severity, 3), _ORIGIN_RANK.get(x.origin, 4)))
        if d is keep:
            others = tuple(Note(f"also {o.code} ({o.origin}): {o.megatron_message or o.message}")
                           for o in group if o is not keep)
            out.append(replace(keep, notes=keep.notes + others))
    return out


def _silent(rules, pins, auto, env, decisions, strict) -> list[Diagnostic]:
    """What Megatron would rewrite unasked, given what the recipe itself says."""
    as_written = dict(env)
    for name in auto:
        as_written[name] = K.BY_FIELD[name].default
    out = []
    for r in rules:
        if evaluate(r.when, as_written) is True and evaluate(r.require, as_written) is False:
            from moeforge.compiler.knobs.display import display  # lazy: only a diagnostic needs it (a clean cold check)

            changes = ", ".join(f"{display(f)} = {json.dumps(v)}" for f, v in r.silent.items())
            d = _diag(r, pins, f"{r.message} (Megatron would silently use {changes}; the plan states it)"
                      if r.silent.keys() - auto else r.message)
            out.append(d.as_error() if strict else d)
            for f, v in r.silent.items():
                if f not in auto:
                    env[f] = v
                    decisions[f] = Decision(f, v, "megatron", rule=r.id, reason=r.message)
    return out


def _advice(rules, env, pins) -> list[Diagnostic]:
    out = []
    for r in rules:
        when = evaluate(r.when, env)
        if when is True and evaluate(r.require, env) is False:
            out.append(_diag(r, pins, render_message(r.message, env)))
    return out


def hazard_diagnostics(hazards, env, pins, software, as_error: bool) -> list[Diagnostic]:
    """A pinned combination that meets a field hazard: its symptom, evidence and fix (an error under --strict or
    `hazards: error`). One whose versions the platform does not state "may apply": a warning naming the fact."""
    from moeforge.compiler.knobs.display import display  # lazy: only a diagnostic needs it (a clean cold check)

    out = []
    for h in hazards:
        if h.matches(env) is not True:
            continue
        state, missing = h.versions(software)
        involved = [f for f in sorted(h.fields) if f in pins and pins[f].pos and pins[f].origin != "fact"]
        anchor = next((pins[f].pos for f in involved if pins[f].origin in ("pinned", "override")), None)
        notes = tuple(Note(f"{display(f)} = {json.dumps(pins[f].value)}", pins[f].pos) for f in involved)
        notes += tuple(Note(f"evidence ({e.kind}): {e.url}" + (f" ({e.note})" if e.note else "")) for e in h.evidence)
        message = f"field hazard ({h.symptom}): {h.summary}"
        if state == "may apply":
            message += (f"; may apply: the platform does not state {', '.join(missing)} (state platform.software."
                        f"{missing[0]} to decide)")
        if h.affected:
            notes += (Note("applies when " + ", ".join(f"{p} {s}" for p, s in h.affected)
                           + (f"; fixed in {', '.join(f'{p} {v}' for p, v in h.fixed_in)}" if h.fixed_in else "")),)
        fixes = tuple((K.BY_FIELD[f].path, v) for f, v in h.fix.items() if f in K.BY_FIELD and K.BY_FIELD[f].path)
        severity = "error" if as_error and state == "applies" else "warning"
        out.append(Diagnostic(severity, f"HAZARD_{h.id}", message, anchor, notes, ", ".join(e.url for e in h.evidence),
                              h.fix_text, None, tuple(sorted(h.fields)), "moeforge", fixes))
    return out


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def render_message(text: str, env: dict) -> str:
    """A rule's message with {field} placeholders filled from the values (e.g. the ${VAR} names)."""
    return _PLACEHOLDER.sub(lambda m: str(env[m.group(1)]) if env.get(m.group(1)) is not None else m.group(0), text)


def _diag(r: Rule, pins, message: str) -> Diagnostic:
    from moeforge.compiler.knobs.display import display  # lazy: only a diagnostic needs these (a clean cold check)
    from moeforge.compiler.rules.display import megatron_display  # lazy: as above

    involved = [f for f in sorted(r.fields) if f in pins and pins[f].pos]
    rank = {"pinned": 0, "override": 0, "default": 1, "model": 2}  # the recipe's own lines first, facts last
    anchor = min((pins[f] for f in involved), key=lambda p: rank.get(p.origin, 3), default=None)
    anchor = anchor.pos if anchor else None
    notes = tuple(Note(f"{display(f)} = {json.dumps(pins[f].value)}"
                       + ("  (not set: megatron-core's default)" if pins[f].origin == "default" else ""),
                       pins[f].pos) for f in involved if pins[f].origin != "fact")
    values = {f: p.value for f, p in pins.items()}
    return from_rule(r, values, message=message, pos=anchor, notes=notes, display=megatron_display(r, values))

