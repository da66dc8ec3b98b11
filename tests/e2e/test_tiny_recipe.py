"""The walking skeleton end to end: compile the embedded default, train it on 2 CPU ranks.

The seeds' success criterion for EP overlap is that it must not change the math: the same
recipe with overlap on and off, same seed, gives identical per-micro-batch losses.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _compile_and_run(out: Path, *overrides: str) -> dict:
    sets = [a for o in overrides for a in ("--set", o)]
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(out), *sets],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    build = out / "tiny-moe" / "cpu"
    ran = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "local", str(build)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "schedule taken:" in ran.stdout and "losses:" in ran.stdout  # the readable summary
    return json.loads((build / "report.json").read_text())


def test_ep_overlap_does_not_change_the_math(tmp_path):
    on = _compile_and_run(tmp_path / "on")
    off = _compile_and_run(tmp_path / "off", "moe.overlap.ep_comm=false")
    assert on["schedule_taken"] == "combined_1f1b" and on["overlap_schedule_ran"] is True
    assert off["schedule_taken"] != "combined_1f1b" and off["overlap_schedule_ran"] is False
    assert on["realised"]["overlap_moe_expert_parallel_comm"]["realised"] is True
    assert off["realised"]["overlap_moe_expert_parallel_comm"]["realised"] is False
    for report in (on, off):
        assert report["world_size"] == 2 and report["ep"] == 2
        assert report["realised"]["moe_token_dispatcher_type"]["realised"] == "alltoall"
        assert report["realised"]["delay_wgrad_compute"]["realised"] is False
    losses_on = [s["micro_batch_losses"] for s in on["steps"]]
    losses_off = [s["micro_batch_losses"] for s in off["steps"]]
    assert len(losses_on) == 4 and all(len(mb) == 2 for mb in losses_on)
    assert losses_on == losses_off


def test_same_recipe_launched_twice_at_once_both_finish(tmp_path):
    """No fixed rendezvous port: each local launch gets its own free one, so both runs finish."""
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    build = tmp_path / "tiny-moe" / "cpu"
    runs = [subprocess.Popen([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "local", str(build)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]
    outputs = [run.communicate(timeout=900)[0] for run in runs]
    for run, out in zip(runs, outputs):
        assert run.returncode == 0, out[-4000:]
        assert "ran 4 steps on 2 ranks" in out
    ports = [re.search(r"rendezvous (?:127\.0\.0\.1|localhost):(\d+)", out).group(1) for out in outputs]
    assert ports[0] != ports[1]
    assert json.loads((build / "report.json").read_text())["status"] == "ok"
