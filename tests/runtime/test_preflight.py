"""The preflight (runtime/preflight/): this node's versions, GPU and environment against the plan's platform
and hazards, before any process group exists.

The comparisons run with the probes standing in for other nodes (monkeypatched, one kind of fact each);
two real launches show a node with another megatron-core stopping before training with one line and
exit 11, and the right stack passing (its report keeps the preflight, with no finding).
"""

from __future__ import annotations

import json

import pytest

from moeforge.runtime import preflight
from moeforge.runtime.errors import EXIT_PREFLIGHT, PlanError, PreflightFailed
from moeforge.runtime.plan import document as plan_mod
from moeforge.runtime.preflight import probes
from moeforge.runtime.preflight.versions import same_at_stated_precision, satisfies

from runtime_testlib import PYTHON, ROOT, subprocess_env

# What the cpu platform's plan finds on this machine's .venv (torch 2.13.0 CPU, megatron-core 0.16.1).
CPU_NODE = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformer_engine": None, "megatron_core": "0.16.1",
            "megatron_bridge": None, "deep_ep_version": None, "nvshmem": None, "cuda": None, "nccl": None,
            "deep_ep": False, "hybrid_ep": False, "grouped_gemm": False}
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_gb": 80}
HAZARD = {"id": "CUDA_GRAPH_LOCAL_ROUTER_BIAS", "symptom": "wrong-result",
          "summary": "cuda_graph_impl=local corrupts the router expert bias during capture",
          "fix": "set cuda_graph_impl: none", "applies_when": {"megatron_core": "<0.18.0"}}


def _plan(tmp_path, tiny_plan, **top) -> plan_mod.Plan:
    tiny_plan.update(top)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tiny_plan))
    return plan_mod.load(str(path))


def _node(monkeypatch, gpu=None, **software):
    monkeypatch.setattr(probes, "software", lambda: {**CPU_NODE, **software})
    monkeypatch.setattr(probes, "gpu", lambda: gpu)


def _messages(plan, environ=None):
    return [f["message"] for f in preflight.check(plan, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
                                                  if environ is None else environ)["findings"]]


def test_the_cpu_platform_passes_on_its_stack(tmp_path, tiny_plan, monkeypatch):
    _node(monkeypatch)
    assert _messages(_plan(tmp_path, tiny_plan)) == []


def test_versions_agree_at_the_precision_the_platform_states():
    assert same_at_stated_precision("2.13", "2.13.0+cpu") and same_at_stated_precision("0.16.1", "0.16.1")
    assert not same_at_stated_precision("0.16.1", "0.16.0") and not same_at_stated_precision("0.19.2", "0.16.1")
    assert not same_at_stated_precision("0.18.0", "0.18.0rc1")  # a release candidate is not the release
    assert satisfies("0.16.1", "<0.18.0") and not satisfies("0.18.0", "<0.18.0") and satisfies("0.18.0rc2", "<0.18.0")
    assert satisfies("3.5.19", ">=3.5.19,<3.6") and not satisfies("3.6.0", ">=3.5.19,<3.6")


def test_another_megatron_core_is_one_line_with_both_versions_and_the_fix(tmp_path, tiny_plan, monkeypatch):
    _node(monkeypatch, megatron_core="0.19.2")
    assert _messages(_plan(tmp_path, tiny_plan)) == [
        "platform.software.megatron_core: the plan was compiled for megatron_core 0.16.1, this node has 0.19.2: "
        "pip install megatron-core==0.16.1, or recompile the recipe for this node's platform"]


def test_a_stated_package_that_is_absent_and_an_optional_fact(tmp_path, tiny_plan, monkeypatch):
    """transformer_engine stated but not installed; nccl/cuda (keys another engineer adds) compared when present."""
    tiny_plan["platform"]["software"].update(transformer_engine="2.12", nccl="2.27.3", cuda=None)
    _node(monkeypatch, nccl="2.21.5")
    found = _messages(_plan(tmp_path, tiny_plan))
    assert len(found) == 2
    assert "transformer_engine 2.12, which is not installed here" in found[0]
    assert found[1].startswith("platform.software.nccl: the plan was compiled for nccl 2.27.3, this node has 2.21.5")


def test_a_backend_the_platform_has_and_the_node_lacks(tmp_path, tiny_plan, monkeypatch):
    tiny_plan["platform"]["software"].update(deep_ep=True, hybrid_ep=False)
    _node(monkeypatch, hybrid_ep=True)  # more than the platform states is no finding
    assert _messages(_plan(tmp_path, tiny_plan)) == [
        "platform.software.deep_ep: the plan was compiled for a platform with DeepEP (deep_ep), which this node "
        "lacks: install it, or recompile the recipe for this node's platform"]


def test_python_newer_minor_passes_older_does_not(tmp_path, tiny_plan, monkeypatch):
    """The cpu platform's python 3.11 runs on .venv312 (plans for megatron-core 0.19); 3.10 does not."""
    plan = _plan(tmp_path, tiny_plan)
    _node(monkeypatch, python="3.12.1")
    assert _messages(plan) == []
    _node(monkeypatch, python="3.10.14")
    assert [m.split(":")[0] for m in _messages(plan)] == ["platform.software.python"]


def test_the_gpu_model_and_its_memory(tmp_path, tiny_plan, monkeypatch):
    tiny_plan["platform"]["gpu"] = H100
    plan = _plan(tmp_path, tiny_plan)
    _node(monkeypatch, gpu={"name": "NVIDIA H100 80GB HBM3", "memory_gb": 79.1, "count": 8})
    assert _messages(plan) == []  # 80 GB marketed is 79.1 GiB reported
    _node(monkeypatch, gpu={"name": "NVIDIA A100-SXM4-40GB", "memory_gb": 39.4, "count": 8})
    found = _messages(plan)
    assert found[0] == ("platform.gpu.name: the plan was compiled for NVIDIA H100 80GB HBM3, this node has "
                        "NVIDIA A100-SXM4-40GB: run on NVIDIA H100 80GB HBM3 nodes, or recompile the recipe for "
                        "this node's platform")
    assert found[1].startswith("platform.gpu.memory_gb: the plan was compiled for 80 GB per GPU, this node's "
                               "GPU has 39.4 GiB")
    _node(monkeypatch, gpu=None)
    assert _messages(plan)[0].startswith("platform.gpu: the plan was compiled for NVIDIA H100 80GB HBM3, but no "
                                         "GPU is visible here")


def test_an_environment_variable_the_plan_needs(tmp_path, tiny_plan, monkeypatch):
    _node(monkeypatch)
    plan = _plan(tmp_path, tiny_plan, env={"CUDA_DEVICE_MAX_CONNECTIONS": {
        "value": "1", "reason": "TP/EP communication\nkernels keep their order"}})
    assert _messages(plan, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}) == []
    assert _messages(plan, {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}) == [
        "env.CUDA_DEVICE_MAX_CONNECTIONS: the plan needs CUDA_DEVICE_MAX_CONNECTIONS=1 (TP/EP communication "
        "kernels keep their order), but it is '8' here: export CUDA_DEVICE_MAX_CONNECTIONS=1 (env.sh does) or unset it"]
    assert "but it is unset here" in _messages(plan, {})[0]


def test_a_hazard_applies_on_the_versions_it_names_not_on_the_fixed_ones(tmp_path, tiny_plan, monkeypatch):
    plan = _plan(tmp_path, tiny_plan, hazards=[HAZARD])
    _node(monkeypatch)  # megatron-core 0.16.1: affected
    assert _messages(plan) == [
        "hazard CUDA_GRAPH_LOCAL_ROUTER_BIAS (wrong-result): cuda_graph_impl=local corrupts the router expert bias "
        "during capture; it applies with megatron_core 0.16.1 (<0.18.0) on this node: set cuda_graph_impl: none, "
        "or install versions outside that range"]
    two = {**HAZARD, "applies_when": {"megatron_core": "<0.18.0", "nvshmem": ">=3.5.19,<3.6"}}
    plan = _plan(tmp_path, tiny_plan, hazards=[two])
    assert _messages(plan) == []  # NVSHMEM not installed: the hazard needs every package it names
    _node(monkeypatch, nvshmem="3.5.21")
    assert len(_messages(plan)) == 1
    _node(monkeypatch, nvshmem="3.5.21", megatron_core="0.18.0")  # the fixed neighbour
    # megatron_core 0.18.0 also differs from the platform's 0.16.1: only that finding, no hazard
    assert [m.split(":")[0] for m in _messages(plan)] == ["platform.software.megatron_core"]


def test_a_hazard_whose_spec_is_not_a_comparison_names_its_path(tmp_path, tiny_plan, monkeypatch):
    _node(monkeypatch)
    # the plan's schema refuses it as the plan is read, at the path preflight's own parse would name
    with pytest.raises(PlanError, match=r"hazards\[0\]\.applies_when\.megatron_core: '0.16' does not match"):
        _plan(tmp_path, tiny_plan, hazards=[{**HAZARD, "applies_when": {"megatron_core": "0.16"}}])


def test_modes_error_warn_off_and_the_environment_variable(tmp_path, tiny_plan, monkeypatch, capsys):
    _node(monkeypatch, megatron_core="0.19.2", torch="2.9.0")
    plan = _plan(tmp_path, tiny_plan)
    monkeypatch.delenv("MOEFORGE_PREFLIGHT", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    with pytest.raises(PreflightFailed) as err:
        preflight.run(plan, None, "prog")
    assert err.value.exit_code == EXIT_PREFLIGHT == 11
    lines = err.value.message.splitlines()
    assert len(lines) == 2 and all(line.endswith("(MOEFORGE_PREFLIGHT=warn (or --preflight warn) runs anyway)")
                                   for line in lines)
    monkeypatch.setenv("MOEFORGE_PREFLIGHT", "warn")
    result = preflight.run(plan, None, "prog")
    assert result["mode"] == "warn" and len(result["findings"]) == 2
    assert capsys.readouterr().err.count("prog: preflight warning: platform.software.") == 2
    assert preflight.run(plan, "off", "prog") == {"mode": "off"}  # the flag wins over the variable
    monkeypatch.setenv("MOEFORGE_PREFLIGHT", "loud")
    with pytest.raises(Exception, match=r"MOEFORGE_PREFLIGHT='loud' is not one of error, warn, off"):
        preflight.run(plan, None, "prog")


def test_the_probes_read_this_node(monkeypatch):
    facts = probes.software()
    import torch
    from importlib.metadata import version

    assert facts["torch"] == torch.__version__ and facts["megatron_core"] == version("megatron-core")
    assert facts["deep_ep"] is False and facts["transformer_engine"] is None  # not in the test environment
    if not torch.cuda.is_available():
        assert probes.gpu() is None and facts["nccl"] is None


def _run_train(plan_path, *flags, **env):
    import subprocess

    return subprocess.run([PYTHON, "-m", "moeforge.runtime.train", str(plan_path), *flags], cwd=ROOT,
                          env={**subprocess_env(), **env}, capture_output=True, text=True, timeout=240)


def test_a_node_with_another_megatron_core_stops_before_training(tmp_path, tiny_plan):
    """A real launch: the plan states megatron-core 0.19.2, this Python has 0.16.1. One line, exit 11, before
    torch.distributed (no rendezvous line) or megatron-core is loaded, and no report."""
    tiny_plan["platform"]["software"]["megatron_core"] = "0.19.2"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tiny_plan))
    run = _run_train(path, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    assert run.returncode == 11, run.stdout + run.stderr
    assert run.stderr.strip().splitlines() == [
        "moeforge.runtime.train[rank 0]: preflight: platform.software.megatron_core: the plan was compiled for "
        "megatron_core 0.19.2, this node has 0.16.1: pip install megatron-core==0.19.2, or recompile the "
        "recipe for this node's platform (MOEFORGE_PREFLIGHT=warn (or --preflight warn) runs anyway)"]
    assert "rendezvous" not in run.stdout and not (tmp_path / "report.json").exists()
    # warn: the same finding as a warning, and the run goes on (here to the launch's own check: rank 1 never came)
    warned = _run_train(path, "--preflight", "warn", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    assert warned.returncode == 2 and "preflight warning: platform.software.megatron_core" in warned.stderr
    assert "layout.world_size is 2 but WORLD_SIZE is 1" in warned.stderr
    off = _run_train(path, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MOEFORGE_PREFLIGHT="off")
    assert off.returncode == 2 and "preflight" not in off.stderr


def test_megatron_lm_s_loop_stops_the_same_way_on_another_megatron_core(tmp_path, tiny_plan):
    """moeforge.runtime.megatron in .venv312 (megatron-core 0.19.2) on a plan compiled for 0.16.1: the preflight
    stops it before megatron-lm.args is even read (there is none here) or a process group exists."""
    import subprocess

    from megatron_testlib import PY312, have_megatron_training

    if not have_megatron_training():
        pytest.skip(".venv312 is not built (`make setup312`)")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tiny_plan))
    run = subprocess.run([str(PY312), "-m", "moeforge.runtime.megatron", str(path)], cwd=ROOT, capture_output=True,
                         env={**subprocess_env(), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, text=True,
                         timeout=240)
    assert run.returncode == 11, run.stdout + run.stderr
    assert run.stderr.strip().splitlines() == [
        "moeforge.runtime.megatron[rank 0]: preflight: platform.software.megatron_core: the plan was compiled for "
        "megatron_core 0.16.1, this node has 0.19.2: pip install megatron-core==0.16.1, or recompile the recipe for "
        "this node's platform (MOEFORGE_PREFLIGHT=warn (or --preflight warn) runs anyway)"]
