"""Megatron-LM's parse_args + validate_args + core_transformer_config_from_args accept every
megatron-lm.args of a megatron-core 0.19 recipe, and build the plan's TransformerConfig, vocab and training I/O
(data, tokenizer, checkpoints, schedule, logging, evaluation); so does a real-training case (indexed data,
byte tokenizer, checkpointing, cosine schedule: fidelity_testlib.TRAINING_SETS)."""

from __future__ import annotations

import pytest

from fidelity_testlib import (OUTSIDE_RECIPES, READY, SKIP_REASON, UNEVEN, assert_verdict, catalogue, compile_all,
                              outside_cases, platform_mcore, run_judge_dirs, training_case, uneven_cases)

pytestmark = pytest.mark.skipif(not READY, reason=SKIP_REASON)

RECIPES = [r for r in catalogue() if platform_mcore(r).startswith("0.19.")]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    dirs = compile_all(RECIPES, tmp_path_factory.mktemp("fidelity-mlm"))
    case = training_case(tmp_path_factory.mktemp("fidelity-mlm-training"))
    uneven = uneven_cases(tmp_path_factory.mktemp("fidelity-mlm-uneven"))
    outside = outside_cases(tmp_path_factory.mktemp("fidelity-mlm-outside"))
    by_dir = run_judge_dirs("megatron_lm_judge.py", [*dirs.values(), case, *uneven.values(), *outside.values()])
    return ({rid: by_dir[str(d)] for rid, d in dirs.items()}, by_dir[str(case)],
            {name: by_dir[str(d)] for name, d in uneven.items()}, {rid: by_dir[str(d)] for rid, d in outside.items()})


@pytest.mark.parametrize("recipe", RECIPES)
def test_megatron_lm_accepts(recipe, judged):
    assert_verdict(judged[0][recipe])


def test_megatron_lm_accepts_real_training_and_builds_the_plans_vocab(judged):
    verdict = judged[1]
    assert_verdict(verdict)  # training-I/O values, the 384-row vocab and the byte tokenizer's eod id included
    assert not [n for n in verdict["notes"] if "pads the vocabulary" in n]


@pytest.mark.parametrize("split", sorted(UNEVEN))
def test_megatron_lm_accepts_uneven_pipelines(split, judged):
    """--decoder-first/last-pipeline-num-layers and --account-for-*-in-pipeline-split as emitted pass
    validate_args and reach the TransformerConfig the plan implies."""
    assert_verdict(judged[2][split])


@pytest.mark.parametrize("recipe", OUTSIDE_RECIPES)
def test_megatron_lm_accepts_models_outside_the_catalogue(recipe, judged):
    """A user's own model documents (Mixtral-8x7B; DeepSeek-V2-Lite, MLA without a query LoRA) in a project of
    their own: Megatron-LM's arguments build the plan's model."""
    assert_verdict(judged[3][recipe])
