"""platform.software.apex: APEX's CUDA extensions. megatron-core's own linear layers (the output layer, whatever the
spec) need them for gradient accumulation fusion, and without Transformer Engine the local spec takes APEX's
FusedLayerNorm, LayerNorm only, for the decoder block's final norm. Unset, APEX goes with Transformer Engine."""
from __future__ import annotations

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.targets.plan import build


def refused(rid: str, sets: list[str]) -> dict:
    with pytest.raises(CompileError) as err:
        resolve(load(rid, sets))
    return {d.code: d for d in err.value.diagnostics}


def test_unset_apex_goes_with_transformer_engine():
    assert build(resolve(load("qwen3-30b-a3b/h100-bf16", [])))["transformer_config"]["gradient_accumulation_fusion"]
    # the CPU platform has no TE, so no APEX: a pinned fusion is refused, and the message points at the TE line
    d = refused("tiny-moe/cpu", ["training.gradient_accumulation_fusion=true"])["GRAD_ACC_FUSION_NEEDS_APEX"]
    assert "apex_installed = false  (recipes/platforms/cpu.yaml:" in d.render()
    assert d.megatron_message.startswith("ColumnParallelLinear was called with gradient_accumulation_fusion")


def test_transformer_engine_alone_refuses_the_fusion_where_the_recipe_pins_it():
    d = refused("qwen3-30b-a3b/h100-bf16", ["platform.software.apex=false"])["GRAD_ACC_FUSION_NEEDS_APEX"]
    assert d.pos is not None and d.pos.file.endswith("recipes/qwen3-30b-a3b/h100-bf16.yaml")
    # left to the solver, the fusion is simply off
    plan = build(resolve(load("qwen3-30b-a3b/h100-bf16",
                              ["platform.software.apex=false", "training.gradient_accumulation_fusion=auto"])))
    assert plan["transformer_config"]["gradient_accumulation_fusion"] is False


def test_apex_on_the_local_spec():
    sets = ["platform.software.apex=true"]
    plan = build(resolve(load("tiny-moe/cpu", [*sets, "training.gradient_accumulation_fusion=true",
                                               "parallelism.tp=2", "parallelism.sp=true"])))
    # FusedLayerNorm takes sequence parallelism, which the torch norm refuses; APEX's kernel fuses the wgrad
    assert plan["transformer_config"]["sequence_parallel"] and plan["transformer_config"]["gradient_accumulation_fusion"]
    assert "LOCAL_SPEC_APEX_NORM_NO_RMSNORM" in refused("tiny-moe/cpu", [*sets, "model.architecture.normalization=RMSNorm"])
    assert "TORCH_NORM_NO_SEQUENCE_PARALLEL" in refused("tiny-moe/cpu", ["parallelism.tp=2", "parallelism.sp=true"])
