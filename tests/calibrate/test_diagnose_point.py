"""Issue 48, item 6: `moeforge diagnose build/sweeps/NAME/p00` finds the point's reports (a sweep keeps each
repeat's report in runs/N/ and the plan in the point's directory): every repeat, or the one --repeat names.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from moeforge.compiler import driver

RECIPE = "qwen3-30b-a3b/h100-bf16-ep16-alltoall-overlap"


@pytest.fixture(scope="module")
def point(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "moeforge.toml").write_text("")
    p = root / "build" / "sweeps" / "s" / "p00"
    p.mkdir(parents=True)
    (p / "plan.json").write_text(json.dumps(driver.compile(RECIPE, []).plan))
    for repeat, step in ((1, 40.0), (2, 44.0)):
        (p / "runs" / str(repeat)).mkdir(parents=True)
        (p / "runs" / str(repeat) / "report.json").write_text(json.dumps({
            "status": "ok", "steps": [{"step": 1, "time_s": step}],
            "steady_state": {"window": [1, 1], "steps": 1, "median_s": step, "mean_s": step}}))
    return p


def diagnose(point: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moeforge.compiler", "diagnose", str(point), *args],
                          cwd=point.parents[3], capture_output=True, text=True, timeout=300)


def test_a_sweep_point_is_diagnosed_for_every_repeat(point):
    proc = diagnose(point, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)["repeats"]
    assert [d["run"] for d in got] == [str(point / "runs" / n / "report.json") for n in ("1", "2")]
    assert [d["step_s"] for d in got] == [40.0, 44.0]
    text = diagnose(point)
    assert text.returncode == 0 and text.stdout.count("dominant wall:") == 2, text.stderr


def test_the_named_repeat_only(point):
    proc = diagnose(point, "--repeat", "2", "--format", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["step_s"] == 44.0, proc.stderr
    missing = diagnose(point, "--repeat", "3")
    assert missing.returncode == 1 and "no runs/3/report.json (repeats with a report: 1, 2)" in missing.stderr


def test_a_directory_without_reports_says_what_to_give(point, tmp_path):
    proc = diagnose(tmp_path)
    assert proc.returncode == 1 and "no report.json in it or under its runs/" in proc.stderr, proc.stderr
