"""Issue 48, item 1: `moeforge calibrate` judges its own fit by what it predicts.  A fit whose leave-one-out
error is over the threshold is refused, or written with --accept-weak and marked weak (and the commands that
use it say so); a good fit whose constants are loose one by one stays accepted; every missing --assume field
is named in one message with how to measure it on a CPU, and no hint names a constant --fit refuses; a
constant stated with --assume is never "not exercised".
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_fit as F  # noqa: E402  (the synthesized h100 runs and the CLI helper)
from moeforge.compiler import driver  # noqa: E402
from moeforge.compiler.calibrate import fit, judge  # noqa: E402

plans = F.plans  # the fixture


def write_project(root: Path, runs) -> Path:
    (root / "recipes" / "platforms").mkdir(parents=True)
    (root / "moeforge.toml").write_text("")
    for run in runs:
        d = root / "build" / run.name.split()[0]
        d.mkdir(parents=True)
        (d / "plan.json").write_text(json.dumps(run.plan))
        (d / "report.json").write_text(json.dumps({
            "status": "ok", "plan": str(d / "plan.json"), "steps": [],
            "steady_state": {"window": [2, 8], "steps": 7, "median_s": run.step_s, "mean_s": run.step_s}}))
    return root


def noisy(plans, noise: float):
    old, F.NOISE = F.NOISE, noise
    try:
        return F.synthesized(plans, seed=3)
    finally:
        F.NOISE = old


def test_a_fit_that_predicts_badly_is_refused_or_written_weak(plans, tmp_path):
    root = write_project(tmp_path / "p", noisy(plans, 0.3))
    out = root / "recipes" / "platforms" / "h100.calibration.yaml"
    names = ",".join(F.TRUE)
    proc = F.moeforge("--root", str(root), "calibrate", str(root / "build"), "--fit", names)
    assert proc.returncode == 1 and not out.exists(), proc.stdout + proc.stderr
    assert "the fit is weak, so nothing was written: step time leave-one-out median error" in proc.stderr
    assert "--accept-weak" in proc.stderr and "calibration: weak (" in proc.stdout

    proc = F.moeforge("--root", str(root), "calibrate", str(root / "build"), "--fit", names, "--accept-weak")
    assert proc.returncode == 0, proc.stderr
    assert "\n# WEAK (written with --accept-weak" in out.read_text()
    doc = yaml.safe_load(out.read_text())
    assert doc["weak"] and doc["weak"][0].startswith("step time leave-one-out median error")
    for args in (["explain", f"builtin:{F.RECIPE}"], ["plan-layout", "--evaluate", f"builtin:{F.RECIPE}"]):
        used = F.moeforge("--root", str(root), *args)
        assert used.returncode == 0 and "calibration: weak (step time leave-one-out median error" in used.stdout, \
            used.stdout + used.stderr


def test_the_project_s_own_kind_of_fit_stays_accepted(plans, tmp_path):
    """The synthesized runs of test_fit (2 % noise): constants recovered, leave-one-out within a few %."""
    root = write_project(tmp_path / "p", F.synthesized(plans))
    proc = F.moeforge("--root", str(root), "calibrate", str(root / "build"), "--fit", ",".join(F.TRUE))
    assert proc.returncode == 0, proc.stderr
    assert "calibration: accepted" in proc.stdout
    assert "weak" not in (root / "recipes" / "platforms" / "h100.calibration.yaml").read_text()


def test_constants_pinned_only_together_are_named_and_judged_by_their_estimates(plans):
    """Few runs for three constants: each one's standard error far above its value, the step they predict
    pinned within tens of %: reported as pinned jointly; the estimate, not the constant, is judged."""
    runs = noisy(plans, 0.3)[:6]
    names = ["achievable_fraction", "ep_overlap_slowdown", "a2a_efficiency"]
    result = fit.fit_time(runs, names, "h100", {}, F.calib.time_constants(plans[0], None), loo=False)
    assert all(result.stderr[n] > result.values[n] for n in names)
    assert result.jointly == [names]
    assert max(result.uncertainty) < judge.UNCERTAINTY_LIMIT
    assert not [r for r in judge.reasons(result, None) if "uncertain" in r]


def test_an_estimate_as_uncertain_as_itself_is_weak():
    class Fit:
        names, values, stderr = ["achievable_fraction"], {"achievable_fraction": 0.0166}, {"achievable_fraction": 0.0173}
        loo, measured, uncertainty = [], [], [0.2, 1.04]

    (reason,) = judge.reasons(Fit, None)
    assert reason.startswith("the step-time estimate is as uncertain as itself (±104% for run 2)")
    assert "achievable_fraction not pinned by the runs" in reason


@pytest.fixture(scope="module")
def cpu_project(tmp_path_factory) -> Path:
    """Three tiny-moe runs on the cpu platform, which has no datasheet."""
    root = tmp_path_factory.mktemp("cpu")
    (root / "moeforge.toml").write_text("")
    for i, sets in enumerate(([], ["training.micro_batch_size=1"], ["model.architecture.num_layers=4"])):
        d = root / "build" / f"r{i}"
        d.mkdir(parents=True)
        (d / "plan.json").write_text(json.dumps(driver.compile("tiny-moe/cpu", sets).plan))
        (d / "report.json").write_text(json.dumps({
            "status": "ok", "plan": str(d / "plan.json"), "steps": [],
            "steady_state": {"window": [2, 8], "steps": 7, "median_s": 0.1 * (i + 1), "mean_s": 0.1}}))
    return root


def test_every_missing_assumption_in_one_message_with_how_to_measure_it(cpu_project):
    proc = F.moeforge("--root", str(cpu_project), "calibrate", str(cpu_project / "build"), "--dry-run")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    for field in ("bf16_dense_tflops", "hbm_gbps", "nvlink_gbps", "internode_gbps"):
        assert f"--assume {field}=VALUE" in err and f"error:   {field}: " in err, err
    assert "a @ b" in err and "copy_" in err  # how to measure the peak and the bandwidth on a CPU
    assert "--fit bf16_dense_tflops" not in err and "--fit hbm_gbps" not in err and "(or fit it: --fit)" not in err


def test_a_stated_constant_is_not_fitted(cpu_project):
    stated = ["--assume", "bf16_dense_tflops=0.17", "--assume", "hbm_gbps=10", "--assume", "nvlink_gbps=10",
              "--assume", "internode_gbps=10", "--assume", "achievable_fraction=0.5"]
    proc = F.moeforge("--root", str(cpu_project), "calibrate", str(cpu_project / "build"), "--dry-run", *stated)
    assert "achievable_fraction" not in proc.stderr, proc.stderr  # never "cannot determine achievable_fraction"
    assert "cannot determine" in proc.stderr  # the others: three runs cannot settle them
    # a2a_efficiency has no value on cpu: keeping "its fixed value" (--fix) would be refused, so it is to be stated
    assert "--fix a2a_efficiency" not in proc.stderr and "--assume a2a_efficiency=VALUE" in proc.stderr, proc.stderr
    bad = F.moeforge("--root", str(cpu_project), "calibrate", str(cpu_project / "build"), "--dry-run",
                     "--assume", "a2a_efficiency=0", "--assume", "hbm_gbps=nan")
    assert bad.returncode == 1 and "--assume a2a_efficiency=0: a2a_efficiency must be a finite number above 0" \
        in bad.stderr, bad.stderr


def test_a_fit_no_run_can_be_left_out_of_is_weak():
    """As many runs as constants: the fit passes through every run and nothing tests its predictions."""
    class Fit:
        names, values, stderr, uncertainty = ["achievable_fraction"], {"achievable_fraction": 0.4}, {}, []
        loo, measured = [None, None], [1.0, 2.0]

    assert judge.reasons(Fit, None) == ["step time: no run can be left out (the others do not determine the fit), "
                                        "so nothing tests its predictions"]
