"""Megatron-LM arguments and Megatron-Bridge overrides, for every recipe in the catalogue."""
import shlex
from pathlib import Path

import pytest

from moeforge.compiler.commands.check import recipe_files
from moeforge.compiler.knobs.table import FLEX_BACKENDS
from moeforge.compiler.targets.emit import render
from moeforge.compiler.targets.megatron_args import flag_tables, release_for
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.targets.plan import build

ROOT = Path(__file__).resolve().parents[2]


def _compiled():
    out = []
    for path in recipe_files([ROOT / "recipes"]):
        try:
            r = resolve(load(path))
        except Exception:  # recipes that do not resolve are covered by the catalogue tests
            continue
        plan = build(r)
        out.append(pytest.param(plan, render(plan, r.composed.data, "build/x"), id=r.composed.recipe_id))
    return out


COMPILED = _compiled()


def _parse_args(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("plan,files", COMPILED)
def test_every_argument_is_a_flag_of_the_platforms_megatron_lm(plan, files):
    release = release_for(plan["platform"]["software"]["megatron_core"])
    table = flag_tables()[release]
    lines = _parse_args(files["megatron-lm.args"])
    assert lines, "no arguments"
    seen = set()
    for flag, *values in lines:
        assert flag in table, f"{flag} is not a Megatron-LM {release} flag"
        assert flag not in seen, f"{flag} given twice"
        seen.add(flag)
        kind = table[flag]
        if kind in ("store_true", "store_false"):
            assert values == [], f"{flag} takes no value"
        elif kind == "value":
            assert len(values) == 1, f"{flag} takes one value, got {values}"
        else:
            assert values, f"{flag} needs at least one value"
    tc = plan["transformer_config"]
    assert ["--expert-model-parallel-size", str(tc["expert_model_parallel_size"])] in lines
    assert (["--overlap-moe-expert-parallel-comm"] in lines) == tc["overlap_moe_expert_parallel_comm"]
    assert (["--delay-wgrad-compute"] in lines) == tc["delay_wgrad_compute"]
    assert ["--moe-token-dispatcher-type", tc["moe_token_dispatcher_type"]] in lines


def test_version_specific_flag_names():
    by_id = {p.id: p.values for p in COMPILED}
    plan16, files16 = by_id["tiny-moe/cpu"]
    assert "--cuda-graph-modules" not in files16["megatron-lm.args"]  # 0.16 knows only --cuda-graph-scope
    gpu = [(plan, files) for plan, files in by_id.values()
           if plan["transformer_config"].get("moe_flex_dispatcher_backend") == "hybridep"
           and plan["transformer_config"]["moe_token_dispatcher_type"] == "flex"]
    assert gpu, "the catalogue has a HybridEP recipe"
    for plan, files in gpu:
        assert "--moe-flex-dispatcher-num-sms" in files["megatron-lm.args"]  # 0.19 folded name
        assert "--moe-hybridep-num-sms" not in files["megatron-lm.args"]


def test_016_sm_count_uses_the_per_backend_field():
    from moeforge.compiler.targets.plan import megatron_view

    env = {"megatron_core": 16001, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
           "moe_flex_dispatcher_num_sms": 24, "tensor_model_parallel_size": 1, "bf16": True, "fp16": False,
           "seq_length": 8}
    tc = megatron_view(env, {"architecture": {}, "moe": {}}, 16001)["tc"]
    assert tc["moe_hybridep_num_sms"] == 24 and "moe_flex_dispatcher_num_sms" not in tc


@pytest.mark.parametrize("plan,files", COMPILED)
def test_bridge_overrides_keep_ep_overlap_and_delayed_wgrad_separate(plan, files):
    """Written where megatron-core reads them (the model config, and the DDP config for delayed
    wgrad), never through the perf harness's --moe_a2a_overlap, which turns on both."""
    text = files["bridge.overrides"]
    assert "--moe_a2a_overlap" in text  # the warning is there
    lines = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    tc = plan["transformer_config"]
    assert lines["model.overlap_moe_expert_parallel_comm"] == str(tc["overlap_moe_expert_parallel_comm"]).lower()
    assert lines["model.delay_wgrad_compute"] == lines["ddp.delay_wgrad_compute"] == \
        str(tc["delay_wgrad_compute"]).lower()


@pytest.mark.parametrize("backend", sorted(FLEX_BACKENDS))
def test_the_runtime_gate_asks_for_the_backend_package_the_plan_names(backend):
    """compiler/knobs/facts.py FLEX_BACKENDS is the one table of the flex backends' packages; runtime/plan/gate.py
    (the runtime never imports the compiler) mirrors it: the module it imports is the plan's runtime.requires."""
    from moeforge.runtime.plan import gate
    from moeforge.runtime.plan.document import check

    plan = build(resolve(load("qwen3-30b-a3b/h100-bf16", ["moe.dispatcher=flex", f"moe.flex_backend={backend}",
                                                          f"platform.software.{FLEX_BACKENDS[backend].software}=true"])))
    planned = {(r["module"], r.get("attribute")) for r in plan["runtime"]["requires"]}
    assert (FLEX_BACKENDS[backend].module, FLEX_BACKENDS[backend].attribute) in planned
    derived = {r.module for r in gate.derived_requirements(check(plan))}
    assert FLEX_BACKENDS[backend].module in derived
