"""Issue 48, item 1, and issue 46, item 7, for `moeforge results`: it estimates every point with the calibration
beside the platform, says "calibration: weak (...)" when that one is weak, and reports a broken one in one
line (exit 1) as explain, plan-layout and diagnose do, not as an internal error.  No training: the sweep's
builds are made with --target print and one run's report is written by hand.
"""
from __future__ import annotations

import json
import textwrap

import pytest

from moeforge.compiler import project
from moeforge.compiler.cli import main
from moeforge.compiler.sweep import status

SWEEP = """\
    schema: moeforge/sweep/v1
    name: fake
    recipe: builtin:qwen3-30b-a3b/h100-bf16
    axes:
      training.micro_batch_size: [1, 2]
    repeats: 1
    warmup_steps: 1
"""
HEAD = "schema: moeforge/calibration/v1\nplatform: h100\nruns: [{name: a, sha256: '" + "0" * 64 + "', kind: report}]\n"


@pytest.fixture
def swept(tmp_path, monkeypatch, capsys):
    root = tmp_path / "proj"
    (root / "recipes" / "sweeps").mkdir(parents=True)
    (root / "recipes" / "platforms").mkdir()
    (root / "moeforge.toml").write_text("[moeforge]\nversion = 1\n")
    (root / "recipes" / "sweeps" / "fake.yaml").write_text(textwrap.dedent(SWEEP))
    monkeypatch.chdir(root)
    previous = project._root
    project.set_root(root)
    assert main(["sweep", "launch", "fake", "--target", "print"]) == 0
    capsys.readouterr()
    top = root / "build" / "sweeps" / "fake"
    here = status.run_dir(top / "p00", 1)
    here.mkdir(parents=True, exist_ok=True)
    (here / "run.log").write_text("")
    (here / "report.json").write_text(json.dumps({
        "status": "ok", "steps": [{"step": i, "time_s": 30.0} for i in range(1, 5)],
        "peak_memory_bytes_max": 2 ** 34, "peak_memory_source": "torch.cuda.max_memory_allocated"}))
    fingerprint = json.loads((top / "sweep.json").read_text())["points"][0]["fingerprint"]
    status.write(here / "status.json", {"point": "p00", "repeat": 1, "fingerprint": fingerprint[:16], "state": "ended",
                                        "exit_code": 0, "started": 1000.0, "ended": 1060.0,
                                        "log": str(here / "run.log")})
    yield root, top
    project._root = previous


def test_results_names_a_weak_calibration(swept, capsys):
    root, top = swept
    (root / "recipes" / "platforms" / "h100.calibration.yaml").write_text(
        HEAD + "weak: ['leave-one-out median error 38% > 25%']\ntime: {constants: {a2a_efficiency: {value: 0.5}}}\n")
    assert main(["results", str(top), "--no-plot"]) == 0
    assert "estimates: calibration: weak (leave-one-out median error 38% > 25%)" in capsys.readouterr().out


def test_results_refuses_a_broken_calibration_in_one_line(swept, capsys):
    root, top = swept
    cal = root / "recipes" / "platforms" / "h100.calibration.yaml"
    cal.write_text(HEAD + "time: {constants: {a2a_efficiency: {value: 0}}}\n")
    assert main(["results", str(top), "--no-plot"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("moeforge results: error: ") and "a2a_efficiency.value: 0 is outside" in err
    assert len(err.splitlines()) == 1 and "internal error" not in err
