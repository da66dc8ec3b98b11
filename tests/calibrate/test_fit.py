"""`moeforge calibrate`'s fit: it recovers constants from runs the step-time model itself made (with noise),
refuses what the runs cannot determine (naming the constant and a run that would settle it), writes a
schema-checked document that plan-layout, explain and dryrun then use and name.

The runs are catalogue plans (Qwen3-30B-A3B on H100, varied one knob at a time) priced with known
constants and 2 % noise from a fixed seed: nothing is trained here.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from moeforge.compiler.targets import plan as plan_mod
from moeforge.compiler.calibrate import fit, memory_fit
from moeforge.compiler.calibrate.runs import Run, collect
from moeforge.compiler.estimate import calibration as calib
from moeforge.compiler.estimate import memory, steptime
from moeforge.compiler.driver import load, resolve

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "qwen3-30b-a3b/h100-bf16-ep16-alltoall-overlap"
VARIANTS = [(), ("training.global_batch_size=256",), ("moe.overlap.ep_comm=false",),
            ("moe.overlap.ep_comm=false", "training.global_batch_size=128"), ("model.architecture.num_layers=24",),
            ("training.global_batch_size=64", "model.architecture.num_layers=24"), ("training.seq_length=2048",),
            ("parallelism.ep=8",), ("training.global_batch_size=32",), ("model.moe.ffn_hidden_size=3072",)]
# elementwise_passes: element-wise work about a third of the step (a platform whose element-wise kernels run
# well below copy bandwidth); the wider experts of the last variant tell it from the GEMMs' fraction
TRUE = {"achievable_fraction": 0.30, "ep_overlap_slowdown": 0.25, "a2a_efficiency": 0.6, "host_step_s": 2.0,
        "elementwise_passes": 1000.0}
NOISE = 0.02


@pytest.fixture(scope="module")
def plans():
    return [plan_mod.build(resolve(load(RECIPE, list(v)))) for v in VARIANTS]


def synthesized(plans, true=TRUE, seed=1) -> list[Run]:
    cal = calib.Calibration("h100", time=true)
    rng = random.Random(seed)
    out = []
    for i, (v, p) in enumerate(zip(VARIANTS, plans)):
        t = steptime.estimate(p, calibration=cal).total_s
        out.append(Run(f"v{i} {' '.join(v)}".strip(), "synthesized", f"{i:064x}", p, "report",
                       t * (1 + rng.gauss(0, NOISE)), 8))
    return out


def test_fit_recovers_the_constants_that_made_the_runs(plans):
    runs = synthesized(plans)
    fixed = calib.time_constants(plans[0], None)
    result = fit.fit_time(runs, list(TRUE), "h100", {}, fixed)
    for name, value in TRUE.items():
        got, err = result.values[name], result.stderr[name]
        print(f"{name}: true {value}, fitted {got:.4g} +- {err:.2g}")
        assert got == pytest.approx(value, rel=0.15), name
        assert abs(got - value) <= 4 * err + 1e-9, f"{name}: {got} is {abs(got - value) / err:.1f} stderr off"
    after = [a / m - 1 for a, m in zip(result.after, result.measured)]
    before = [b / m - 1 for b, m in zip(result.before, result.measured)]
    assert max(map(abs, after)) < 4 * NOISE < max(map(abs, before))
    loo = [x / m - 1 for x, m in zip(result.loo, result.measured) if x is not None]
    assert len(loo) >= len(runs) - 2 and sorted(map(abs, loo))[len(loo) // 2] < 0.1
    assert result.kept["output_layer_fraction"] == calib.TIME_CONSTANTS["output_layer_fraction"].fixed


def test_noise_free_runs_give_the_constants_back_exactly(plans):
    runs = synthesized(plans)
    cal = calib.Calibration("h100", time=TRUE)
    for r in runs:
        r.step_s = steptime.estimate(r.plan, calibration=cal).total_s
    result = fit.fit_time(runs, list(TRUE), "h100", {}, calib.time_constants(plans[0], None), loo=False)
    assert result.values == pytest.approx(TRUE, rel=1e-3)


def test_constants_no_run_exercises_are_refused_with_the_run_that_settles_them(plans):
    runs = [r for r in synthesized(plans) if r.plan["transformer_config"]["overlap_moe_expert_parallel_comm"] is False]
    assert len(runs) == 2
    with pytest.raises(fit.UnderDetermined) as err:
        fit.fit_time(runs, ["achievable_fraction", "ep_overlap_slowdown", "delay_wgrad_launch_s"], "h100", {},
                     calib.time_constants(plans[0], None))
    lines = err.value.lines
    overlap = next(line for line in lines if line.startswith("ep_overlap_slowdown"))
    assert "no run exercises it" in overlap and "--set moe.overlap.ep_comm=true" in overlap
    assert "--fix ep_overlap_slowdown" in overlap
    wgrad = next(line for line in lines if line.startswith("delay_wgrad_launch_s"))
    assert "no run exercises it" in wgrad
    assert not any(line.startswith("achievable_fraction") for line in lines)


def test_constants_the_runs_move_together_are_refused(plans):
    """Two runs with the same micro-batches and layers cannot split a per-step from a per-layer host cost."""
    runs = [r for r in synthesized(plans) if r.name in ("v0", "v6 training.seq_length=2048")]
    with pytest.raises(fit.UnderDetermined) as err:
        fit.fit_time(runs, ["achievable_fraction", "host_step_s", "host_layer_microbatch_s"], "h100", {},
                     calib.time_constants(plans[0], None))
    line = next(x for x in err.value.lines if x.startswith("host_"))
    assert "cannot be told apart" in line and "would settle it" in line
    assert "training.global_batch_size=" in line or "model.architecture.num_layers=" in line


def test_runs_of_one_width_and_sequence_cannot_price_the_elementwise_work(plans):
    """Runs that vary only the micro-batches and the layers, at one sequence length and width, move the GEMMs,
    the element-wise passes and the per-layer host cost in step: refused, with a run of another width or
    sequence length (or wider experts) that separates them."""
    same = [r for r in synthesized(plans) if r.name.split()[0] in ("v0", "v1", "v4", "v5", "v8")]
    with pytest.raises(fit.UnderDetermined) as err:
        fit.fit_time(same, ["achievable_fraction", "elementwise_passes", "host_step_s", "host_layer_microbatch_s"],
                     "h100", {}, calib.time_constants(plans[0], None))
    line = next(x for x in err.value.lines if x.startswith("elementwise_passes"))
    assert "cannot be told apart" in line and "--fix elementwise_passes" in line
    assert "would settle it" in line
    assert any(f"--set {key}=" in line for key in ("model.architecture.hidden_size", "training.seq_length",
                                                     "model.moe.ffn_hidden_size"))


def test_the_settling_run_is_the_one_that_separates_the_constants_best(plans):
    """Two runs without EP overlap, one sequence and width: the GEMMs' fraction and the element-wise passes move
    together.  EP overlap on would settle them only through a side effect (its windows hold the GEMMs alone);
    wider experts move the GEMMs and leave the activations as they were, and that is the run named."""
    runs = [r for r in synthesized(plans) if not r.plan["transformer_config"]["overlap_moe_expert_parallel_comm"]]
    with pytest.raises(fit.UnderDetermined) as err:
        fit.fit_time(runs, ["achievable_fraction", "elementwise_passes"], "h100", {},
                     calib.time_constants(plans[0], None))
    line = next(x for x in err.value.lines if x.startswith("elementwise_passes"))
    assert "--set model.moe.ffn_hidden_size=1536 would settle it" in line and "ep_comm=true" not in line


def test_the_schema_names_every_time_constant():
    """calibration.TIME_CONSTANTS is the one list of step-time constants; the schema's copy is held to it."""
    schema = json.loads((ROOT / "schemas" / "calibration.v1.json").read_text())
    names = schema["properties"]["time"]["properties"]["constants"]["properties"]
    assert set(names) == set(calib.TIME_CONSTANTS)


def test_memory_fit_recovers_scale_and_allowance(plans):
    runs = synthesized(plans)
    rng = random.Random(3)
    for r in runs:
        est, _ = memory.peak(r.plan)
        r.peak_bytes = int((est.weights + est.gradients + est.optimizer + 1.3 * est.activations + 2 * memory.GIB)
                           * (1 + rng.gauss(0, 0.005)))
        r.peak_source = "reserved"
    result = memory_fit.fit_memory(runs)
    assert result.values["activation_scale"] == pytest.approx(1.3, rel=0.05)
    assert result.values["allowance_bytes"] / memory.GIB == pytest.approx(2.0, abs=0.5)
    assert max(abs(a / m - 1) for a, m in zip(result.after, result.measured)) < 0.02
    same = [runs[0], runs[0]]
    assert memory_fit.problems(same, False) and not memory_fit.problems(same, True)


# ------------------------------------------------------------------------ the command, end to end
def moeforge(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "moeforge.compiler", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def project(tmp_path_factory, plans):
    """A user's project with ten measured runs in build/ (each a plan.json and the report moeforge.runtime.train writes)."""
    root = tmp_path_factory.mktemp("project")
    (root / "recipes" / "platforms").mkdir(parents=True)
    (root / "moeforge.toml").write_text("")
    for run in synthesized(plans):
        d = root / "build" / run.name.split()[0]
        d.mkdir(parents=True)
        (d / "plan.json").write_text(json.dumps(run.plan))
        (d / "report.json").write_text(json.dumps({
            "status": "ok", "plan": str(d / "plan.json"), "steps": [],
            "steady_state": {"window": [2, 8], "steps": 7, "median_s": run.step_s, "mean_s": run.step_s},
            "peak_memory_bytes_max": None}))
    return root


def test_calibrate_refuses_by_default_and_says_what_to_do(project):
    proc = moeforge("--root", str(project), "calibrate", str(project / "build"), "--dry-run")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("moeforge calibrate: error: cannot determine ") for line in lines)
    assert any("delay_wgrad_launch_s: no run exercises it" in line and "--fix delay_wgrad_launch_s" in line
               for line in lines)
    assert "Traceback" not in proc.stderr


def test_calibrate_writes_the_platform_calibration_that_the_commands_use(project):
    fit_names = ",".join(TRUE)
    proc = moeforge("--root", str(project), "calibrate", str(project / "build"), "--fit", fit_names, "--no-loo")
    assert proc.returncode == 0, proc.stderr
    out = project / "recipes" / "platforms" / "h100.calibration.yaml"
    assert f"wrote {out}" in proc.stdout
    assert "leave-one-out" in proc.stdout and "|error| after" in proc.stdout and "|error| before" in proc.stdout
    doc = yaml.safe_load(out.read_text())
    assert doc["schema"] == "moeforge/calibration/v1" and len(doc["runs"]) == len(VARIANTS)
    assert all(len(r["sha256"]) == 64 and r["estimate_after_s"] for r in doc["runs"])
    cal = calib.load(out, "h100")
    assert cal.time["achievable_fraction"] == pytest.approx(0.30, rel=0.15)
    # the same runs give the same document (no dates, runs named by content)
    again = moeforge("--root", str(project), "calibrate", str(project / "build"), "--fit", fit_names, "--no-loo",
                     "--dry-run", "--format", "json")
    assert json.loads(again.stdout)["runs"] == doc["runs"]

    recipe = "builtin:qwen3-30b-a3b/h100-bf16"
    ev = moeforge("--root", str(project), "plan-layout", "--evaluate", recipe, "--format", "json")
    assert ev.returncode == 0, ev.stderr
    record = json.loads(ev.stdout)
    assert record["calibration"]["source"].endswith("h100.calibration.yaml")
    assert record["calibration"]["runs"] == len(VARIANTS)
    fixed = json.loads(moeforge("--root", str(project), "plan-layout", "--evaluate", recipe, "--format", "json",
                                "--calibration", "none").stdout)
    assert fixed["calibration"] is None and fixed["step_time_s"] != record["step_time_s"]
    plan = plan_mod.build(resolve(load("qwen3-30b-a3b/h100-bf16")))
    assert record["step_time_s"] == pytest.approx(steptime.estimate(plan, calibration=cal).total_s, rel=1e-3)
    explained = moeforge("--root", str(project), "explain", recipe)
    assert explained.returncode == 0 and f"h100.calibration.yaml ({len(VARIANTS)} runs" in explained.stdout
    table = moeforge("--root", str(project), "plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16",
                     "--gbs", "1024", "--top", "1")
    assert table.returncode == 0 and table.stdout.rstrip().splitlines()[-1].startswith("calibration recipes/platforms/h100")


def test_dryrun_estimate_names_its_calibration(project, tmp_path):
    from moeforge.compiler import project as proj
    from moeforge.compiler.commands import dryrun_report

    plan = plan_mod.build(resolve(load("qwen3-30b-a3b/h100-bf16")))
    out = project / "recipes" / "platforms" / "h100.calibration.yaml"
    doc = yaml.safe_load(out.read_text()) if out.exists() else None
    target = tmp_path / "recipes" / "platforms"
    target.mkdir(parents=True)
    made = {"schema": "moeforge/calibration/v1", "platform": "h100",
            "memory": {"constants": {"activation_scale": {"value": 0.5}, "allowance_gib": {"value": 1.0}}},
            "runs": (doc or {}).get("runs") or [{"name": "x", "sha256": "0" * 64, "kind": "report"}]}
    (target / "h100.calibration.yaml").write_text(yaml.safe_dump(made))
    previous = proj._root
    proj.set_root(tmp_path)
    try:
        result = {"coordinates": {"pp": 0}, "parameters": {"total": 0}, "substitutions": []}
        calibrated = dryrun_report.estimate_for(result, plan)
        fixed = dryrun_report.estimate_for(result, plan, "none")
    finally:
        proj._root = previous
    assert calibrated["calibration"]["source"].endswith("h100.calibration.yaml") and fixed["calibration"] is None
    assert calibrated["allowance_bytes"] == memory.GIB and fixed["allowance_bytes"] == memory.ALLOWANCE_BYTES
    assert calibrated["activation_bytes"] == pytest.approx(fixed["activation_bytes"] / 2, rel=1e-6)


def test_a_broken_calibration_is_one_line(project, tmp_path):
    bad = tmp_path / "h100.calibration.yaml"
    bad.write_text("schema: moeforge/calibration/v1\nplatform: h100\nruns: []\n")
    proc = moeforge("--root", str(project), "plan-layout", "--evaluate", "builtin:qwen3-30b-a3b/h100-bf16",
                    "--calibration", str(bad))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "runs" in proc.stderr and "schemas/calibration.v1.json" in proc.stderr


def test_reports_walk_a_directory_and_name_what_they_leave_out(project, tmp_path):
    shutil.copytree(project / "build", tmp_path / "build")
    (tmp_path / "build" / "broken").mkdir()
    (tmp_path / "build" / "broken" / "report.json").write_text("{")
    runs, skipped = collect([str(tmp_path / "build")])
    assert len(runs) == len(VARIANTS)
    assert len(skipped) == 1 and "broken/report.json:1:2: not a readable run report" in skipped[0]
