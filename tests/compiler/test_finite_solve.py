"""The pure-Python solver (compiler/solver/finite.py) answers exactly as z3 does, or not at all.

Differential: every catalogue recipe, and variants of it that open more knobs to the solver (--set
...=auto, every auto knob at once) or pin values that make rules bite, is resolved twice: as
moeforge.compiler.solver.solve does it (the finite solver first) and with the finite solver switched off (z3's
Optimize, as before it existed). Values, decisions (provenance), warnings and errors must be the
same. Both paths must really be taken: the catalogue itself never needs z3, some variants do.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from moeforge.compiler.solver import finite as finite_solve
from moeforge.compiler.solver import solve as S
from moeforge.compiler.commands.check import recipe_ids
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.solver.problem import Problem

ROOT = Path(__file__).resolve().parents[2]
RECIPES = recipe_ids(ROOT / "recipes")
AUTO = ["parallelism.vpp", "parallelism.etp", "parallelism.sp", "moe.dispatcher", "moe.flex_backend", "moe.flex_num_sms",
        "moe.hybridep_ranks_per_nvlink_domain", "moe.overlap.ep_comm", "moe.overlap.delay_wgrad",
        "moe.overlap.shared_expert", "cuda_graph.impl", "cuda_graph.modules", "cuda_graph.te_rng_tracker",
        "overlap.tp_comm", "overlap.p2p", "overlap.grad_reduce", "overlap.param_gather", "optimizer.distributed",
        "optimizer.grad_reduce_in_fp32", "training.gradient_accumulation_fusion", "kernels.apply_rope_fusion"]
VARIANTS = {
    "as written": (),
    "every knob auto": tuple(f"{p}=auto" for p in AUTO),
    "etp auto": ("parallelism.etp=auto",),
    "vpp auto": ("parallelism.vpp=auto",),
    "etp auto, ep 4": ("parallelism.etp=auto", "parallelism.ep=4"),
    "cuda graphs auto": ("cuda_graph.impl=auto", "cuda_graph.modules=auto"),
    "dispatcher auto": ("moe.dispatcher=auto", "moe.flex_backend=auto"),
    "p2p overlap on": ("overlap.p2p=true",),
    "delayed wgrad on": ("moe.overlap.delay_wgrad=true",),
    "distributed optimizer auto": ("optimizer.distributed=auto", "overlap.param_gather=auto"),
}


def _outcome(composed, finite: bool, monkeypatch, seen: list):
    def counted(problem, auto_free):
        settled = finite_solve.settle(problem, auto_free) if finite else None
        seen.append(settled is not None)
        return settled

    monkeypatch.setattr(S, "settle", counted)
    try:
        resolved = resolve(composed, explain_errors=False)
    except CompileError as exc:
        return "refused", [(d.code, d.message, d.fields) for d in exc.diagnostics]
    return resolved.env, resolved.decisions, [(d.code, d.message) for d in resolved.diagnostics]


@pytest.fixture(scope="module")
def outcomes():
    """(recipe, variant) -> (finite outcome, z3 outcome, whether the finite solver settled it)."""
    mp = pytest.MonkeyPatch()
    out = {}
    try:
        for rid in RECIPES:
            for name, sets in VARIANTS.items():
                try:
                    composed = load(rid, list(sets))
                except CompileError:
                    continue  # the variant is not a valid recipe for this platform/model
                seen: list = []
                finite = _outcome(composed, True, mp, seen)
                if finite[0] == "refused" and not any(seen):
                    z3 = finite  # never settled: z3 alone decided and explained it, on both paths the same code
                else:
                    z3 = _outcome(composed, False, mp, [])
                out[rid, name] = finite, z3, any(seen)
    finally:
        mp.undo()
    return out


def test_the_finite_solver_and_z3_agree_on_values_and_decisions(outcomes):
    differ = [key for key, (finite, z3, _) in outcomes.items() if finite != z3]
    assert not differ, differ
    assert len(outcomes) > 100


def test_the_catalogue_never_needs_z3_and_some_variants_do(outcomes):
    assert all(outcomes[rid, "as written"][2] for rid in RECIPES)
    fallbacks = [key for key, (finite, _, settled) in outcomes.items() if not settled and finite[0] != "refused"]
    assert fallbacks, "no solved variant went to z3: the fallback path is untested"
    assert any(finite[0] == "refused" for finite, _, _ in outcomes.values())  # errors: never settled, z3 explains


def _problem(rid: str, sets=()):
    from moeforge.compiler.solver.inputs import pins_and_auto
    from moeforge.compiler.driver import rules_in_force
    from moeforge.compiler.solver.problem import fixed_values
    from moeforge.compiler.rules import PREFERENCES

    pins, auto = pins_and_auto(load(rid, list(sets)))
    rules = [r for r in rules_in_force({f: p.value for f, p in pins.items()}) if r.severity == "error" and not r.silent]
    return Problem(rules, fixed_values(pins), PREFERENCES, propagate=True), sorted(auto)


def test_an_integer_left_to_a_range_of_values_goes_to_z3():
    """`vpp is set` with nothing else to choose among 1..num_layers: which one is z3's choice."""
    problem, auto = _problem("tiny-moe/cpu", ("parallelism.vpp=auto",))
    problem.residual["TEST_VPP_SET"] = S.E.IsSet(S.E.F("virtual_pipeline_model_parallel_size"))
    problem.free |= {"virtual_pipeline_model_parallel_size"}
    assert finite_solve.settle(problem, sorted(set(auto) & problem.free)) is None


def test_an_integer_that_must_divide_a_constant_is_enumerated():
    """tiny-moe/cpu: `etp is set and 2 % (etp * 2) == 0, or etp unset`; the preference for 1 wins."""
    problem, auto = _problem("tiny-moe/cpu")
    settled = finite_solve.settle(problem, sorted(set(auto) & problem.free))
    assert settled is not None and settled.values["expert_tensor_parallel_size"] == 1
    assert settled.forced(["expert_tensor_parallel_size"]) == []  # unset is allowed too

