"""Resolve pins, platform facts and rules into values, or explain precisely why not.

Pins and facts are folded into the rules first (moeforge.compiler.rules.expr.fold): a rule that folds to
true is satisfied, one that folds to false is violated by the pins alone, and only what
still mentions an `auto` knob is solved, together with the seeds' guidance as weighted soft
constraints: by moeforge.compiler.solver.finite where it can prove its answer is z3's (small domains,
a unique optimum; no z3 import), else by z3 (moeforge.compiler.solver.encoding). What cannot be solved is
explained by moeforge.compiler.solver.conflicts (z3). Everything runs in catalogue order, so the results are
deterministic.
"""
from __future__ import annotations

from moeforge.compiler.diagnostics import Diagnostic
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.layout import derive_sizes
from moeforge.compiler.rules import Preference, Rule
from moeforge.compiler.rules import expr as E
from moeforge.compiler.solver.finite import settle
from moeforge.compiler.solver.problem import DERIVED, SOLVE_MS, SPEC, Problem, fixed_values
from moeforge.compiler.solver.values import Decision, Pin, Solution


def solve(pins: dict[str, Pin], auto: set[str], rules: list[Rule], prefs: list[Preference],
          silent_rules: list[Rule], explain_errors: bool | None = True) -> Solution:
    """Values for every auto knob under the hard rules, or a diagnostic per violation (explain_errors=False:
    only which rules, without the minimal pins and fixes, which take most of the time of a failure; None: one
    UNSOLVABLE error, for a caller that solves again to explain)."""
    fixed = fixed_values(pins)
    problem = Problem(rules, fixed, list(prefs) + [_as_pref(r) for r in silent_rules], propagate=True)
    if problem.violated:
        return _refused(pins, rules, problem, silent_rules, explain_errors)
    values = {f: SPEC[f].default for f in sorted(auto) if f not in problem.free and f not in problem.forced}
    values.update({f: v for f, (v, _) in problem.forced.items() if f in auto})
    enc = terms = settled = None
    if problem.free:  # something is left to choose: enumerated when small (moeforge.compiler.solver.finite), else z3
        settled = settle(problem, sorted(set(auto) & problem.free))
        if settled is not None:
            values.update(settled.values)
        else:
            enc, terms = _encode(problem)
            chosen = _optimise(pins, rules, problem, enc, terms, sorted(set(auto) & problem.free), explain_errors,
                               silent_rules)
            if isinstance(chosen, Solution):
                return chosen
            values.update(chosen)
    values.update(derive_sizes({**fixed, **values}))
    ruled = set().union(*(e.fields() for e in problem.residual.values()))  # only these can be forced
    suspects = _maybe_forced(problem, sorted(set(auto) & ruled), {**fixed, **values})
    if suspects and settled is not None:  # z3 only for the unsat cores of knobs really forced
        really = settled.forced(suspects)
        suspects = suspects if really is None else really
        if suspects:
            enc, terms = _encode(problem)
    forced = _forcing_rules(enc, terms, suspects, values, problem.because) if enc and suspects else {}
    forced.update({f: list(why) for f, (_, why) in problem.forced.items() if f in auto})
    return Solution(values, _provenance(forced, {r.id: r for r in rules}, prefs, auto, values, fixed, problem))


def _encode(problem):
    """The z3 encoding of the residual problem and its rules' terms (imports z3)."""
    from moeforge.compiler.solver.encoding import encode  # lazy: z3 only when finite.settle cannot answer

    enc = encode(problem)
    return enc, {rid: enc.term(e) for rid, e in problem.residual.items()}


def _refused(pins, rules, problem, silent_rules, explain_errors: bool | None) -> Solution:
    """The answer for a recipe that cannot be solved: each conflict with its pins and fixes (explain_errors=False:
    only which rules conflict; None: only that it cannot be solved)."""
    if explain_errors is None:  # the caller only asks whether the recipe can be solved; it explains elsewhere
        return Solution({}, {}, [Diagnostic("error", "UNSOLVABLE", "no values satisfy every rule")])
    from moeforge.compiler.solver import conflicts  # lazy: z3, only for a recipe that is refused

    if not explain_errors:
        return Solution({}, {}, _unexplained(conflicts.explain_rules(pins, rules, problem)))
    return Solution({}, {}, conflicts.explain(pins, rules, problem, silent_rules))


def _unexplained(groups: list[list[Rule]]) -> list[Diagnostic]:
    """A diagnostic per conflicting group, coded as conflicts.explain codes it, without pins or fixes."""
    return [Diagnostic("error", "+".join(r.id for r in g), g[0].message if len(g) == 1 else
                       "conflict between " + "; ".join(r.message for r in g),
                       source="; ".join(dict.fromkeys(r.source for r in g)), help=g[0].fix,
                       fields=tuple(sorted({f for r in g for f in r.fields}))) for g in groups]


def _optimise(pins, rules, problem, enc, terms: dict, free: list[str], explain_errors: bool = True,
              silent_rules=()):
    """The auto knobs' values under the residual rules and the weighted preferences (or a Solution
    carrying the error)."""
    import z3  # lazy: only a problem finite.settle cannot answer gets here

    opt = z3.Optimize(ctx=enc.ctx)
    opt.set("timeout", SOLVE_MS)
    opt.add(*enc.domain)
    opt.add(*terms.values())
    for p, e in problem.prefs:
        opt.add_soft(enc.term(e), p.weight)
    for name in free:  # among equals, keep Megatron's default
        opt.add_soft(enc.value_term(name, SPEC[name].default), 1)
    verdict = opt.check()
    if verdict == z3.unknown:
        return Solution({}, {}, [Diagnostic(
            "error", "E_SOLVER_UNKNOWN", f"the solver did not finish within {SOLVE_MS // 1000} s "
            f"({opt.reason_unknown()})", help="pin more of the auto knobs (parallelism.vpp, moe.dispatcher, ...)")])
    if verdict != z3.sat:
        return _refused(pins, rules, problem, silent_rules, explain_errors)
    model = opt.model()
    return {f: enc.read(model, f) for f in free}


def _as_pref(r: Rule) -> Preference:
    """Never choose what Megatron would quietly rewrite."""
    return Preference(id=f"avoid:{r.id}", prefer=r.require, weight=50, reason=r.message, when=r.when)


def _provenance(forced_by: dict, by_id, prefs, auto, values, fixed, problem=None) -> dict:
    """Why each auto knob has its value: forced by a rule, chosen by a preference, or megatron-core's
    default. A value that is none of these (the rules exclude the default but allow several others, e.g.
    a VPP size) names the rules (or preferences) that exclude the default: never "default" for a value
    that is not megatron-core's default."""
    env = {**fixed, **values}
    out = {}
    for name in sorted(auto):
        value = values[name]
        forced = forced_by.get(name)
        if forced:
            out[name] = Decision(name, value, "rule", rule=forced[0],
                                 reason="; ".join(by_id[r].message for r in forced))
            continue
        chosen = [p for p in prefs if name in p.prefer.fields()
                  and E.evaluate(p.when, env) is True and E.evaluate(p.prefer, env) is True]
        if chosen:
            out[name] = Decision(name, value, "preference", rule=chosen[0].id, reason=chosen[0].reason)
        elif value == SPEC[name].default or problem is None:
            out[name] = Decision(name, value, "default", reason="megatron-core default")
        else:
            out[name] = _excluding_default(name, value, env, by_id, prefs, problem)
    for name in DERIVED:
        if name in values:
            out[name] = Decision(name, values[name], "derived", reason=K.BY_FIELD[name].doc)
    return out


def _excluding_default(name: str, value, env: dict, by_id, prefs, problem) -> Decision:
    """The decision for an auto knob moved off megatron-core's default without one value being forced:
    the residual rules (else the preferences) that the default would break, all else as solved."""
    default = SPEC[name].default
    trial = {**env, name: default}
    trial.update(derive_sizes(trial))
    shown = "null" if default is None else default
    rules = [rid for rid, e in problem.residual.items() if E.evaluate(e, trial) is False]
    if rules:
        return Decision(name, value, "rule", rule=rules[0],
                        reason="; ".join(by_id[r].message for r in rules if r in by_id)
                        + f" (megatron-core's default {shown} is excluded; {value} is one of the values "
                          "the rules allow)")
    broken = [p for p in prefs if name in (p.prefer.fields() | p.when.fields())
              and E.evaluate(p.when, trial) is True and E.evaluate(p.prefer, trial) is False]
    if broken:
        return Decision(name, value, "preference", rule=broken[0].id,
                        reason=f"{broken[0].reason} (megatron-core's default {shown} would go against it)")
    return Decision(name, value, "solver", reason=f"chosen by the solver together with the other auto knobs "
                    f"(megatron-core's default is {shown})")


def _maybe_forced(problem, names: list[str], env: dict) -> list[str]:
    """The names that might be forced: a knob with another value that satisfies every residual
    rule, all else as solved, is free by example, and needs no z3 query (most auto knobs are)."""
    out = []
    for name in names:
        spec = SPEC[name]
        if spec.kind == "bool":
            others = [not env[name]]
        elif spec.kind == "enum":
            others = [v for v in spec.domain if v != env[name]]
        else:
            out.append(name)
            continue
        for other in others:
            trial = {**env, name: other}
            trial.update(derive_sizes(trial))
            if all(E.evaluate(e, trial) is True for e in problem.residual.values()):
                break
        else:
            out.append(name)
    return out


def _forcing_rules(enc, terms: dict, names: list[str], values: dict, because=None) -> dict[str, list[str]]:
    """name -> the residual rules (catalogue order) that leave it no other value, for each forced name,
    with the rules behind the propagated values folded into them (`because`)."""
    import z3  # lazy: only a knob the pure-Python checks cannot clear gets here

    from moeforge.compiler.solver.encoding import check, tracked  # lazy: z3, as above

    s, literals = tracked(enc, terms)
    out = {}
    for name in names:
        if check(s, *literals.values(), z3.Not(enc.value_term(name, values[name]))) == z3.unsat:
            core = {t.get_id() for t in s.unsat_core()}
            found = [rid for rid, t in literals.items() if t.get_id() in core]
            extra = {r for rid in found for r in (because or {}).get(rid, ())}
            out[name] = found + [r for r in extra if r not in found]
    return out
