"""Megatron-Bridge's own recipe for each model, with bridge.overrides applied by Bridge's own
override applier and ConfigContainer.validate(), accepts every catalogue recipe and realises the
plan's TransformerConfig. (tiny-moe has no Bridge recipe: skipped with that reason.)"""

from __future__ import annotations

import pytest

from fidelity_testlib import READY, SKIP_REASON, assert_verdict, catalogue, compile_all, run_judge

pytestmark = pytest.mark.skipif(not READY, reason=SKIP_REASON)

RECIPES = catalogue()


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    dirs = compile_all(RECIPES, tmp_path_factory.mktemp("fidelity-bridge"))
    return run_judge("bridge_judge.py", list(dirs.values()))


@pytest.mark.parametrize("recipe", RECIPES)
def test_bridge_accepts(recipe, verdicts):
    verdict = verdicts[recipe]
    if verdict.get("skip"):
        pytest.skip(verdict["error"])
    assert_verdict(verdict)
