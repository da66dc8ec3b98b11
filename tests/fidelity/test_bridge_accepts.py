"""Megatron-Bridge's own recipe for each model, with bridge.overrides applied by Bridge's own
override applier and ConfigContainer.validate(), accepts every catalogue recipe and realises the
plan's TransformerConfig. tiny-moe has no Bridge recipe: the judge starts from Bridge's plain GPT
recipe, as it does for models outside the catalogue (an MLA one from DeepSeek-V3's, an MLA provider's recipe). Megatron-Bridge 0.6.2 runs on megatron-core 0.19 only, so a recipe on an older platform
(tiny-moe/cpu, 0.16.1) is judged as compiled for 0.19.2 (field names of that release). The training-I/O values
(dataset, tokenizer, checkpoint, scheduler, logger, validation) are compared too, and a real-training case
(fidelity_testlib.TRAINING_SETS) is judged as well."""

from __future__ import annotations

import pytest

from fidelity_testlib import (OUTSIDE_RECIPES, READY, SKIP_REASON, UNEVEN, assert_verdict, catalogue, compile_all,
                              outside_cases, platform_mcore, run_judge_dirs, training_case, uneven_cases)

pytestmark = pytest.mark.skipif(not READY, reason=SKIP_REASON)

RECIPES = catalogue()


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    older = {r: ["platform.software.megatron_core=0.19.2"] for r in RECIPES if not platform_mcore(r).startswith("0.19.")}
    dirs = compile_all(RECIPES, tmp_path_factory.mktemp("fidelity-bridge"), older)
    case = training_case(tmp_path_factory.mktemp("fidelity-bridge-training"))
    uneven = uneven_cases(tmp_path_factory.mktemp("fidelity-bridge-uneven"))
    outside = outside_cases(tmp_path_factory.mktemp("fidelity-bridge-outside"))
    by_dir = run_judge_dirs("bridge_judge.py", [*dirs.values(), case, *uneven.values(), *outside.values()])
    return ({rid: by_dir[str(d)] for rid, d in dirs.items()}, by_dir[str(case)],
            {name: by_dir[str(d)] for name, d in uneven.items()}, {rid: by_dir[str(d)] for rid, d in outside.items()})


@pytest.mark.parametrize("recipe", RECIPES)
def test_bridge_accepts(recipe, judged):
    verdict = judged[0][recipe]
    if verdict.get("skip"):
        pytest.skip(verdict["error"])
    assert_verdict(verdict)


def test_bridge_accepts_real_training(judged):
    """Indexed data, the byte tokenizer, checkpoints, a cosine schedule: Bridge's ConfigContainer holds the
    plan's values after validate() (dataset, tokenizer, checkpoint, scheduler, logger, validation, dist)."""
    assert_verdict(judged[1])


@pytest.mark.parametrize("split", sorted(UNEVEN))
def test_bridge_accepts_uneven_pipelines(split, judged):
    """model.num_layers_in_first/last_pipeline_stage and model.account_for_*_in_pipeline_split as emitted pass
    Bridge's validate() and reach the TransformerConfig the plan implies."""
    assert_verdict(judged[2][split])


@pytest.mark.parametrize("recipe", OUTSIDE_RECIPES)
def test_bridge_accepts_models_outside_the_catalogue(recipe, judged):
    """A user's own model documents: Mixtral-8x7B from Bridge's plain GPT recipe, DeepSeek-V2-Lite (MLA) from an
    MLA provider's recipe, as bridge.overrides' header tells (a GPT recipe refuses the MLA fields); and two minimal
    documents, whose unstated values are megatron-core's defaults, not the starting recipe's."""
    verdict = judged[3][recipe]
    assert_verdict(verdict)
    provider = "deepseek_v3" if "deepseek" in recipe or "mla" in recipe else "vanilla_gpt"
    assert any(n.startswith("Bridge recipe: ") and provider in n for n in verdict["notes"]), verdict["notes"]
