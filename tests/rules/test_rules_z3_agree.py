"""The two interpreters of a rule agree: concrete evaluation (lint-config) and the z3 translation.

Every error rule's violating and satisfying case from test_rule_cases.py is turned into solver
pins (all values fixed, nothing auto) and solved with the recipe view of the catalogue: the
violating case must be unsatisfiable with the rule among the diagnostics, the satisfying one
satisfiable. Cases that involve lint-only fields (which recipes cannot set) are skipped, as are
quantities lint leaves unknown.
"""
from __future__ import annotations

import pytest

from moeforge.compiler.knobs.table import FACT_BY_FIELD, LINT_ONLY
from moeforge.compiler.lint.config_lint import read
from moeforge.compiler.rules import BY_ID, RULES
from moeforge.compiler.rules.expr import UNKNOWN
from moeforge.compiler.solver.problem import DERIVED, SPEC
from moeforge.compiler.solver.solve import solve
from moeforge.compiler.solver.values import Pin

from test_rule_cases import BASE, CASES  # noqa: E402  (same directory)

RECIPE_RULES = {r.id: r for r in RULES}


def pins_for(delta: dict):
    env = read({**BASE, **delta}).env
    if isinstance(env.get("world_size"), int) and isinstance(env.get("gpus_per_node"), int):
        if env["world_size"] % env["gpus_per_node"]:
            return None
        env["num_nodes"] = env["world_size"] // env["gpus_per_node"]
    pins = {}
    for name, value in env.items():
        if name in DERIVED or name not in SPEC or value is UNKNOWN:
            continue
        pins[name] = Pin(value, None, "fact" if name in FACT_BY_FIELD else "pinned")
    return pins


def hard_rules(pins):
    facts = {f: p.value for f, p in pins.items()}
    return [r for r in RULES if r.severity == "error" and not r.silent and r.applies(facts) is not False]


def codes(solution) -> set[str]:
    return {part for d in solution.diagnostics for part in d.code.split("+")}


ERROR_CASES = sorted(rid for rid in CASES
                     if rid in RECIPE_RULES and RECIPE_RULES[rid].severity == "error" and not RECIPE_RULES[rid].silent
                     and not BY_ID[rid].fields & LINT_ONLY)


def test_most_error_rules_are_compared():
    assert len(ERROR_CASES) >= 70


@pytest.mark.parametrize("rule_id", ERROR_CASES)
def test_z3_agrees_with_concrete_evaluation(rule_id):
    failing, passing = CASES[rule_id]
    if set(failing) & LINT_ONLY or set(passing) & LINT_ONLY:
        pytest.skip("case uses a lint-only field")
    bad = pins_for(failing)
    good = pins_for(passing)
    if bad is None or good is None:
        pytest.skip("world size is not a whole number of nodes")
    rule = RECIPE_RULES[rule_id]
    if any(f not in bad or f not in good for f in rule.fields if f not in DERIVED):
        pytest.skip("a field of the rule is unknown to lint in this case")
    sol = solve(bad, set(), hard_rules(bad), [], [])
    assert not sol.ok and rule_id in codes(sol), f"{rule_id}: z3 found {codes(sol) or 'no conflict'}"
    sol = solve(good, set(), hard_rules(good), [], [])
    assert sol.ok, f"{rule_id}: passing case conflicts in z3: {codes(sol)}"
