"""Megatron-LM's parse_args + validate_args + core_transformer_config_from_args accept every
megatron-lm.args of a megatron-core 0.19 recipe, and build the plan's TransformerConfig."""

from __future__ import annotations

import pytest

from fidelity_testlib import READY, SKIP_REASON, assert_verdict, catalogue, compile_all, platform_mcore, run_judge

pytestmark = pytest.mark.skipif(not READY, reason=SKIP_REASON)

RECIPES = [r for r in catalogue() if platform_mcore(r).startswith("0.19.")]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    dirs = compile_all(RECIPES, tmp_path_factory.mktemp("fidelity-mlm"))
    return run_judge("megatron_lm_judge.py", list(dirs.values()))


@pytest.mark.parametrize("recipe", RECIPES)
def test_megatron_lm_accepts(recipe, verdicts):
    assert_verdict(verdicts[recipe])
