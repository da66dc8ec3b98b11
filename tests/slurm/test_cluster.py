"""The test cluster itself: jobs run, exit codes come back, start is idempotent, stop cleans up."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body, encoding="utf-8")
    return path


def test_two_task_job_succeeds(slurm_cluster, submit_and_wait, tmp_path):
    script = write_script(
        tmp_path / "two-tasks.sbatch",
        "#SBATCH --job-name=two-tasks\n"
        "#SBATCH --nodes=1\n"
        "#SBATCH --ntasks-per-node=2\n"
        "#SBATCH --time=00:01:00\n"
        "set -euo pipefail\n"
        "srun bash -c 'echo \"rank=$SLURM_PROCID of $SLURM_NTASKS on $(hostname -s)\"'\n",
    )
    rc, job_id = submit_and_wait(script, timeout=60, wait="sbatch")  # sbatch --wait under timeout
    assert rc == 0, slurm_cluster.output(job_id)
    ranks = sorted(re.findall(r"rank=(\d+) of (\d+) on (\S+)", slurm_cluster.output(job_id)))
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    assert ranks == [("0", "2", host), ("1", "2", host)]
    info = slurm_cluster.job_info(job_id)
    assert (info["JobName"], info["JobState"], info["ExitCode"]) == ("two-tasks", "COMPLETED", "0:0")


@pytest.mark.parametrize("wait", ["sbatch", "poll"])
def test_failing_task_fails_the_job(slurm_cluster, submit_and_wait, tmp_path, wait):
    script = write_script(
        tmp_path / "fails.sbatch",
        "#SBATCH --nodes=1\n"
        "#SBATCH --ntasks-per-node=2\n"
        "#SBATCH --time=00:01:00\n"
        "set -euo pipefail\n"
        "srun bash -c 'exit $(( SLURM_PROCID == 1 ? 3 : 0 ))'\n"
        "echo not reached\n",
    )
    rc, job_id = submit_and_wait(script, timeout=60, wait=wait)
    assert rc == 3
    info = slurm_cluster.job_info(job_id)
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "3:0")
    assert "not reached" not in slurm_cluster.output(job_id)


def test_cancelled_job_reports_1_like_sbatch_wait(slurm_cluster, submit_and_wait, tmp_path):
    script = write_script(tmp_path / "cancels-itself.sbatch", "#SBATCH --time=1\nscancel \"$SLURM_JOB_ID\"\nsleep 30\n")
    rc, job_id = submit_and_wait(script, timeout=30)
    assert rc == 1
    assert slurm_cluster.job_info(job_id)["JobState"] == "CANCELLED"


def test_job_past_the_timeout_is_cancelled(slurm_lib, slurm_cluster, submit_and_wait, tmp_path):
    script = write_script(tmp_path / "sleeps.sbatch", "#SBATCH --time=1\nsleep 60\n")
    with pytest.raises(slurm_lib.SlurmJobTimeout):
        submit_and_wait(script, timeout=2)
    jobs = slurm_cluster.run("squeue", "-h", "-n", "sleeps.sbatch", "-o", "%i %T").stdout.split()
    assert "RUNNING" not in jobs and "PENDING" not in jobs


def test_job_that_can_never_run_is_refused_not_queued(slurm_lib, submit_and_wait, tmp_path):
    """EnforcePartLimits=ALL: sbatch --wait would otherwise wait forever on a PENDING job."""
    script = write_script(tmp_path / "too-big.sbatch", "#SBATCH --nodes=1\n#SBATCH --ntasks=512\ntrue\n")
    started = time.monotonic()
    with pytest.raises(slurm_lib.SbatchRejected):
        submit_and_wait(script, timeout=30)
    assert time.monotonic() - started < 20


# --- lifecycle of a second, private cluster ------------------------------------------------------


def alive(pid: int, name: str) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == name
    except OSError:
        return False


def processes_using(directory: Path) -> list[str]:
    """Processes whose working directory or an open file lies under `directory`."""
    users = []
    prefix = str(directory.resolve()) + "/"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            targets = [os.readlink(proc / "cwd")]
            targets += [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue
        if any((t + "/").startswith(prefix) for t in targets):
            try:
                comm = (proc / "comm").read_text().strip()
            except OSError:
                comm = "?"
            users.append(f"{proc.name} {comm}")
    return users


def munge_answers() -> bool:
    if not shutil.which("munge"):
        return False
    proc = subprocess.run("munge -n </dev/null | unmunge", shell=True, capture_output=True)
    return proc.returncode == 0


@pytest.fixture
def private_cluster_env(slurm_lib):
    if os.geteuid() != 0:
        pytest.skip("a real Slurm needs root")
    # Inside the main cluster's private directory (<repo>/.slurm, gitignored, or its fallback):
    # pytest's tmp dirs are 0700, the slurm user could not enter them.
    main_conf = slurm_lib.parse_export(slurm_lib.cluster_cmd("env").stdout)["SLURM_CONF"]
    directory = Path(main_conf).parent / f"lifecycle-{os.getpid()}"
    env = {
        **os.environ,
        "MOEFORGE_SLURM_DIR": str(directory),
        "MOEFORGE_SLURMCTLD_PORT": "6827",
        "MOEFORGE_SLURMD_PORT": "6828",
    }
    yield env, directory
    slurm_lib.cluster_cmd("stop", env)
    shutil.rmtree(directory, ignore_errors=True)


def test_start_is_idempotent_and_stop_ends_what_start_started(slurm_lib, private_cluster_env):
    lib = slurm_lib
    env, directory = private_cluster_env
    munge_before = munge_answers()

    t0 = time.monotonic()
    exports, started_here = lib.start_cluster(env)
    first_start = time.monotonic() - t0
    assert started_here
    conf = directory / "slurm.conf"
    assert exports == {"SLURM_CONF": str(conf)}
    assert lib.parse_export(lib.cluster_cmd("env", env).stdout) == exports
    run = directory / "run"
    pids = {name: int((run / f"{name}.pid").read_text()) for name in ("slurmctld", "slurmd")}
    munge_marker = run / "munged.started"
    assert munge_marker.exists() == (not munge_before), "munged is recorded as ours exactly when we started it"
    if munge_marker.exists():
        pids["munged"] = int(munge_marker.read_text())
    assert all(alive(pid, name) for name, pid in pids.items())

    t0 = time.monotonic()
    again = lib.cluster_cmd("start", env)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert time.monotonic() - t0 < 5
    assert {name: int((run / f"{name}.pid").read_text()) for name in ("slurmctld", "slurmd")} == {
        k: v for k, v in pids.items() if k != "munged"
    }
    status = lib.cluster_cmd("status", env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert re.search(r"node:\s+\S+ idle", status.stdout)

    # A job still running when stop comes: stop cancels it and does not hang.
    slurm_env = {**env, **exports}
    sub = subprocess.run(
        ["sbatch", "--parsable", f"--output={directory}/sleeper-%j.out", "--wrap", "sleep 300"],
        env=slurm_env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job_id = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=slurm_env, capture_output=True, text=True)
        if state.stdout.strip() == "RUNNING":
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"job {job_id} never ran")

    t0 = time.monotonic()
    stop = lib.cluster_cmd("stop", env)
    stop_time = time.monotonic() - t0
    assert stop.returncode == 0, stop.stderr
    assert "cancelling 1 job(s)" in stop.stderr
    assert stop_time < 30
    assert not any(alive(pid, name) for name, pid in pids.items()), pids
    assert not (run / "slurmctld.pid").exists() and not (run / "slurmd.pid").exists()
    assert not munge_marker.exists()
    assert munge_answers() == munge_before, "a munged that was running before must still run; ours must be gone"
    assert processes_using(directory) == [], "stop left processes (a slurmstepd?) behind"
    assert lib.cluster_cmd("status", env).returncode == 3
    print(f"private cluster: start {first_start:.1f}s, stop {stop_time:.1f}s")
