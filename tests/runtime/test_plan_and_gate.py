"""plan.json checks and the backend gate: clear messages and exit codes, never a traceback,
and no model (not even megatron-core's model code) touched before the gate has passed."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess

import pytest

from runtime_testlib import PYTHON, ROOT, run_module, subprocess_env

from moeforge.runtime.plan import gate
from moeforge.runtime.plan import document as plan_mod
from moeforge.runtime.errors import BackendMissing, OutOfMemory, PeerLost, PlanError, RuntimeFailure, Stopped, stage


def _check(raw):
    return plan_mod.check(raw, "plan.json")


def test_example_plan_is_accepted(tiny_plan):
    plan = _check(tiny_plan)
    assert plan.layout["ep"] == 2 and plan.runtime["schedule"] == "combined_1f1b"


def test_unknown_keys_are_refused_by_the_shared_schema(tiny_plan):
    """The runtime reads the plan through the compiler's schema: one contract, no silent extras."""
    tiny_plan["training"]["future_knob"] = True
    with pytest.raises(PlanError) as err:
        _check(tiny_plan)
    assert err.value.message.startswith("training:") and "'future_knob' was unexpected" in err.value.message


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p.pop("transformer_config"), "plan: 'transformer_config' is a required property"),
    (lambda p: p.update(schema="other/v9"), "schema must be 'moeforge/plan/v1'"),
    (lambda p: p["training"].update(micro_batch_size=0), "training.micro_batch_size: 0 is less than the minimum"),
    (lambda p: p["training"].update(seed="x"), "training.seed: 'x' is not of type 'integer'"),
    (lambda p: p["data"].update(kind="imagenet"), "data.kind: 'imagenet' is not one of"),
    (lambda p: p["data"].update(kind="indexed"), "data.kind is 'indexed': give exactly one of data.paths"),
    (lambda p: p["training"].update(report_window=[3, 9]), "training.report_window must be"),
    (lambda p: p["training"].update(num_microbatches=3),
     "global_batch_size / (micro_batch_size * dp) = 8 / (2 * 2)"),
    (lambda p: p["layout"].update(ep=4), "layout.ep = 4 but transformer_config.expert_model"),
    (lambda p: (p["layout"].update(world_size=3), p["layout"].update(ep=2)),
     "world_size 3 is not divisible by etp*ep*pp = 1*2*1"),
    (lambda p: p["runtime"].update(schedule="gpipe"), "runtime.schedule: 'gpipe' is not one of"),
    (lambda p: p["runtime"].update(transformer_impl="apex"), "runtime.transformer_impl: 'apex' is not one of"),
    (lambda p: p["runtime"].update(requires=[{"package": "x"}]), "runtime.requires[0]: 'module' is a required"),
    (lambda p: p["transformer_config"].update(params_dtype="fp8"), "transformer_config.params_dtype: 'fp8' is not"),
])
def test_bad_plans_name_the_field(tiny_plan, mutate, message):
    mutate(tiny_plan)
    with pytest.raises(PlanError) as err:
        _check(tiny_plan)
    assert message in err.value.message


def test_bad_plan_cli_exits_2_without_traceback(tmp_path, tiny_plan):
    bad = tmp_path / "plan.json"
    bad.write_text('{"schema": "moeforge/plan/v1",\n "layout": [1,')
    run = run_module("moeforge.runtime.train", str(bad))
    assert run.returncode == 2
    assert f"{bad}:2:" in run.stderr and "invalid JSON" in run.stderr
    assert "Traceback" not in run.stderr
    tiny_plan["layout"]["tp"] = 0
    bad.write_text(json.dumps(tiny_plan))
    run = run_module("moeforge.runtime.dryrun", str(bad))
    assert run.returncode == 2 and "layout.tp: 0 is less than the minimum of 1" in run.stderr
    assert "Traceback" not in run.stderr


def test_derived_requirements(tiny_plan):
    tc = tiny_plan["transformer_config"]
    tc.update(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
              moe_grouped_gemm=True)
    reqs = {(r.module, r.attribute) for r in gate.derived_requirements(_check(tiny_plan))}
    # megatron-core's fused_a2a imports HybridEP as `from deep_ep import HybridEPBuffer`.
    assert reqs == {("deep_ep", "HybridEPBuffer"), ("grouped_gemm", None)}
    tiny_plan["runtime"]["transformer_impl"] = "transformer_engine"
    reqs = {(r.module, r.attribute) for r in gate.derived_requirements(_check(tiny_plan))}
    assert reqs == {("deep_ep", "HybridEPBuffer"), ("transformer_engine", None)}  # TEGroupedMLP
    tiny_plan["optimizer"]["use_precision_aware_optimizer"] = True
    reqs = {(r.module, r.attribute) for r in gate.derived_requirements(_check(tiny_plan))}
    assert ("transformer_engine.pytorch.optimizers", "FusedAdam") in reqs   # the precision-aware FusedAdam
    assert ("fused_weight_gradient_mlp_cuda", None) not in reqs
    tiny_plan["transformer_config"]["gradient_accumulation_fusion"] = True   # APEX's kernel, TE or not
    reqs = {(r.module, r.attribute) for r in gate.derived_requirements(_check(tiny_plan))}
    assert ("fused_weight_gradient_mlp_cuda", None) in reqs


def test_gate_lists_every_missing_backend(tiny_plan):
    tiny_plan["transformer_config"].update(moe_token_dispatcher_type="flex",
                                           moe_flex_dispatcher_backend="deepep")
    tiny_plan["runtime"]["requires"] = [{"module": "moeforge_no_such_pkg", "package": "nope",
                                        "needed_for": "a test", "alternative": "drop it"}]
    with pytest.raises(BackendMissing) as err:
        gate.check(_check(tiny_plan))
    msg = err.value.message
    assert "module 'moeforge_no_such_pkg' (package nope)" in msg and "alternative: drop it" in msg
    assert "module 'deep_ep'" in msg
    assert "moe_flex_dispatcher_backend = 'deepep'" in msg
    assert "alternative: set moe_token_dispatcher_type: alltoall" in msg


def test_gate_passes_importable_requirements(tiny_plan):
    tiny_plan["runtime"]["requires"] = [{"module": "json", "package": "stdlib",
                                        "needed_for": "x", "alternative": "y"}]
    assert [r.module for r in gate.check(_check(tiny_plan))] == ["json"]


def test_flex_deepep_exits_before_any_model_code_is_imported(tmp_path, tiny_plan):
    tiny_plan["transformer_config"].update(moe_token_dispatcher_type="flex",
                                           moe_flex_dispatcher_backend="deepep")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tiny_plan))
    probe = (
        "import sys\n"
        "from moeforge.runtime import train\n"
        "try:\n"
        f"    train.main([{str(path)!r}])\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "built = [m for m in sys.modules if m.startswith('megatron.core.models')]\n"
        "print('EXIT', code, 'MODEL_MODULES', len(built))\n"
    )
    proc = subprocess.run([PYTHON, "-c", probe], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert "EXIT 3 MODEL_MODULES 0" in proc.stdout, proc.stdout + proc.stderr
    err = proc.stderr
    assert "backend unavailable: module 'deep_ep'" in err
    assert "moe_token_dispatcher_type = 'flex' with moe_flex_dispatcher_backend = 'deepep'" in err
    assert "alternative: set moe_token_dispatcher_type: alltoall" in err
    assert "not performance data" in err and "Traceback" not in err


def test_multi_rank_without_master_port_is_refused_not_defaulted(tmp_path, tiny_plan):
    """The runtime never falls back to a fixed port (two runs would collide on it)."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tiny_plan))
    env = {k: v for k, v in subprocess_env().items() if k != "MASTER_PORT"}
    env.update(RANK="0", WORLD_SIZE=str(tiny_plan["layout"]["world_size"]), LOCAL_RANK="0")
    proc = subprocess.run([PYTHON, "-m", "moeforge.runtime.train", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "MASTER_PORT is not set" in proc.stderr and "Traceback" not in proc.stderr


def _raise(exc: BaseException):
    raise exc


def test_what_megatron_core_raises_in_a_stage_is_one_line_with_where(monkeypatch, tmp_path):
    """errors.stage turns anything megatron-core raises into the runtime's own failure: the stage, the
    exception's last line and where it was raised (the source line itself for a bare assert); an
    out-of-memory error says what to lower; the runtime's own failures pass through unchanged."""
    monkeypatch.delenv("MOEFORGE_TRACEBACK", raising=False)
    (tmp_path / "router.py").write_text("def route(topk):\n    assert topk <= 8\n")
    spec = importlib.util.spec_from_file_location("router", tmp_path / "router.py")
    router = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(router)  # not under pytest's assert rewriting: a bare assert, as megatron-core's
    with pytest.raises(Stopped) as caught:
        with stage("training step 3"):
            router.route(9)
    assert caught.value.exit_code == 4
    assert caught.value.message == ("training step 3: AssertionError at router.py:2: assert topk <= 8; "
                                    "MOEFORGE_TRACEBACK=1 prints the traceback")
    with pytest.raises(Stopped) as caught:
        with stage("GPTModel construction"):
            _raise(ValueError("num_moe_experts must be\n  divisible"))
    assert re.fullmatch(r"GPTModel construction: ValueError: num_moe_experts must be divisible "
                        r"\(test_plan_and_gate.py:\d+\); MOEFORGE_TRACEBACK=1 prints the traceback",
                        caught.value.message)
    out_of_memory = type("OutOfMemoryError", (RuntimeError,), {})
    with pytest.raises(OutOfMemory) as caught:
        with stage("training step 1"):
            _raise(out_of_memory("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert "lower training.micro_batch_size" in caught.value.message and caught.value.exit_code == 9
    with pytest.raises(RuntimeFailure) as caught:
        with stage("training step 7"):
            _raise(OSError(28, "No space left on device"))
    assert type(caught.value) is RuntimeFailure and "No space left on device" in caught.value.message
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.0.0.3]:31981: "
                        "Connection reset by peer. This is typically caused by a remote worker hanging")
    with pytest.raises(PeerLost) as caught:  # another rank's node went away: not a refused plan
        with stage("Megatron-LM's pretrain"):
            _raise(gloo)
    assert caught.value.exit_code == 10 and "its node was lost" in caught.value.message
    with pytest.raises(PlanError, match="^as it was$"):
        with stage("training step 1"):
            _raise(PlanError("as it was"))
