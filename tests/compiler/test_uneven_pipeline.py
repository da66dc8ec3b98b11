"""Uneven pipelines in a recipe: what megatron-core refuses is a located compile error, and what the
solver's help proposes instead is something megatron-core accepts.

gpt-oss-120b/h100-bf16 runs 36 layers on PP 4. Each refused override below compiled "ok" before the
LAYOUT_*_STAGE_LAYERS_*, LAYOUT_UNEVEN_* and LAYOUT_ACCOUNT_FOR_* rules (megatron-core's
TransformerConfig.__post_init__ raises for all but the last, which it builds with 40 layers).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import load, resolve

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
RID = "gpt-oss-120b/h100-bf16"


def compile_errors(sets: list[str]) -> list:
    with pytest.raises(CompileError) as err:
        resolve(load(RID, sets, RECIPES))
    return err.value.diagnostics


@pytest.mark.parametrize("sets, code, located_at", [
    # 26 layers over 3 middle ranks
    (["parallelism.first_stage_layers=10"], "LAYOUT_UNEVEN_MIDDLE_LAYERS_DIVISIBLE", None),
    # 37 "layers" (the embedding counted as one) over 4 ranks
    (["parallelism.account_for_embedding=true"], "LAYOUT_ACCOUNT_FOR_LAYERS_DIVISIBLE_BY_PP",
     "--set parallelism.account_for_embedding=true"),
    # two ways to split at once
    (["parallelism.first_stage_layers=9", "parallelism.account_for_loss=true"],
     "LAYOUT_STAGE_SIZES_WITHOUT_ACCOUNT_FOR", "--set parallelism.account_for_loss=true"),
    (["parallelism.pipeline_layout=Et*9|t*9|t*9|t*9L", "parallelism.account_for_loss=true"],
     "LAYOUT_PIPELINE_LAYOUT_ALONE", None),
    # megatron-core accepts this one: the middle ranks get -2 layers each (none built), the first and last 40
    (["parallelism.first_stage_layers=10", "parallelism.last_stage_layers=30"], "LAYOUT_UNEVEN_STAGES_FIT", None),
])
def test_what_megatron_core_refuses_is_a_located_error(sets, code, located_at):
    diags = compile_errors(sets)
    [d] = [d for d in diags if d.code == code]
    assert d.pos is not None and d.pos.file, d.render()
    assert d.pos.file.startswith("--set ") or d.pos.file.startswith("recipes/"), d.pos
    if located_at:
        assert d.pos.file == located_at
    if d.origin == "megatron-core":
        assert d.megatron_message and "{" not in d.megatron_message, d.megatron_message


def test_schema_refuses_an_empty_stage():
    [d] = compile_errors(["parallelism.first_stage_layers=0"])
    assert d.code == "E_SCHEMA" and d.pos.file == "--set parallelism.first_stage_layers=0"


def test_megatrons_text_carries_the_middle_split():
    [d] = [d for d in compile_errors(["parallelism.first_stage_layers=10"])
           if d.code == "LAYOUT_UNEVEN_MIDDLE_LAYERS_DIVISIBLE"]
    assert d.megatron_message == ("number of layers at middle stage: 26 must be divisible bythe middle "
                                  "pipeline model parallel size 3")


@pytest.mark.parametrize("sets, knob", [
    (["parallelism.first_stage_layers=10"], "parallelism.first_stage_layers"),
    (["parallelism.first_stage_layers=10", "parallelism.last_stage_layers=30"], "parallelism.last_stage_layers"),
    (["parallelism.vpp=3", "parallelism.first_stage_layers=6"], "parallelism.first_stage_layers"),
])
def test_every_suggested_stage_size_compiles(sets, knob):
    """The help's values are solutions, not guesses: each one, put in place of the refused value, compiles."""
    diags = [d for d in compile_errors(sets) if d.code.startswith("LAYOUT_")]
    suggested = {value for d in diags for path, value in d.fixes if path == knob}
    assert suggested, [d.help for d in diags]
    for value in sorted(suggested, key=str):
        fixed = [s for s in sets if not s.startswith(f"{knob}=")] + [f"{knob}={'null' if value is None else value}"]
        resolved = resolve(load(RID, fixed, RECIPES))
        assert resolved.env["pipeline_model_parallel_size"] == 4
