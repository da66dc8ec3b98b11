"""Every fix a refusal offers must itself compile (issue 47).

A diagnostic's `fixes` (the values its help line offers, "set model.moe.router_topk to one of 2, 3, 4") are
what a user types next. Break a catalogue recipe with one knob the rules read, take each offered fix, compile
again: with one error in the refusal the fixed recipe compiles; with several, the fix clears its own error and
adds none. (tests/fuzz/test_runtime_truth.py trains the fixed tiny-moe plans too.)
"""
from __future__ import annotations

import pytest
from hypothesis import example, given, note
from hypothesis import strategies as st

import fuzzlib
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import compile as compile_recipe

# knobs the routing, layout and batch rules read, with values that break a catalogue recipe
BREAKS = {
    "model.moe.router_topk": [1, 3, 5, 9, 17, 129, 600],
    "model.moe.num_experts": [1, 2, 3, 6, 7],
    "model.moe.router_num_groups": [2, 3, 5, 64],
    "model.moe.router_group_topk": [1, 2, 3, 9],
    "model.moe.router_score_function": ["softmax", "sigmoid"],
    "model.moe.router_pre_softmax": [True, False],
    "parallelism.tp": [2, 3, 5],
    "parallelism.ep": [3, 5, 6, 512],
    "parallelism.pp": [3, 5],
    "parallelism.cp": [3],
    "training.micro_batch_size": [3, 5],
    "training.global_batch_size": [7, 1023],
    "training.seq_length": [33, 4097],
}


def show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def errors(recipe: str, sets: list[str], explain: bool = True) -> list:
    """The error diagnostics of compiling `recipe` with `sets`; explain=False leaves out their fixes (cheaper)."""
    try:
        compile_recipe(recipe, sets, plan=False, explain_errors=explain)
    except CompileError as err:
        return [d for d in err.diagnostics if d.is_error]
    return []


def check_every_fix_compiles(recipe: str, sets: list[str]) -> int:
    """The number of fixes tried; asserts each one works (see the module docstring)."""
    before = errors(recipe, sets)
    codes = {d.code for d in before}
    tried = 0
    for d in before:
        for path, value in d.fixes:
            after = errors(recipe, sets + [f"{path}={show(value)}"], explain=False)
            tried += 1
            said = f"{recipe} --set {' --set '.join(sets)}: {d.code} offers {path}={show(value)} ({d.help})"
            if len(before) == 1:
                assert not after, f"{said}, which is refused: {[(a.code, a.message) for a in after]}"
            else:
                new = {a.code for a in after}
                assert d.code not in new and new <= codes, f"{said}, which leaves {sorted(new)}"
    return tried


@pytest.mark.parametrize("sets", [["model.moe.router_topk=1"], ["model.moe.router_topk=8"],
                                  ["model.moe.router_num_groups=2", "model.moe.router_group_topk=1",
                                   "model.moe.router_topk=4"]], ids=["top1-softmax", "topk-8-of-4", "groups"])
def test_tiny_moe_routing_fixes_compile_and_stay_within_the_experts(sets):
    """The issue's example: top-1 softmax on 4 experts offered router_topk 5 and 6, which then fail at run time."""
    [diag] = errors("tiny-moe/cpu", sets)
    topk = [v for path, v in diag.fixes if path == "model.moe.router_topk"]
    assert topk and all(1 <= v <= 4 for v in topk), diag.help
    assert check_every_fix_compiles("tiny-moe/cpu", sets) == len(diag.fixes)


@fuzzlib.fuzz_settings(weight=0.25, deadline=None)
@given(recipe=st.sampled_from(fuzzlib.RECIPE_IDS), path=st.sampled_from(sorted(BREAKS)), data=st.data())
@example(recipe="tiny-moe/cpu", path="model.moe.router_topk", data=None)
@example(recipe="gpt-oss-120b/h100-bf16", path="model.moe.router_topk", data=None)
@example(recipe="deepseek-v3/h100-bf16", path="model.moe.router_group_topk", data=None)
def test_every_fix_a_refusal_offers_compiles(recipe, path, data):
    value = data.draw(st.sampled_from(BREAKS[path])) if data is not None else BREAKS[path][0]
    note(f"{recipe} --set {path}={show(value)}")
    check_every_fix_compiles(recipe, [f"{path}={show(value)}"])
