"""The test cluster itself: jobs run, exit codes come back, start is idempotent, stop cleans up,
two clusters run side by side. No wall-clock bounds here (timings belong in bench/): each test
asserts the behaviour, and waits only on states, with deadlines that only a hang reaches."""

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


def two_task_script(path: Path, name: str = "two-tasks") -> Path:
    return write_script(
        path,
        f"#SBATCH --job-name={name}\n"
        "#SBATCH --nodes=1\n"
        "#SBATCH --ntasks-per-node=2\n"
        "#SBATCH --time=00:01:00\n"
        "set -euo pipefail\n"
        "srun bash -c 'echo \"rank=$SLURM_PROCID of $SLURM_NTASKS on $(hostname -s)\"'\n",
    )


def assert_two_tasks_ran(cluster, rc: int, job_id: str, name: str = "two-tasks") -> None:
    """The job ran both srun tasks on this node, and `cluster` (not another one) knows it by `name`."""
    assert rc == 0, cluster.output(job_id)
    ranks = sorted(re.findall(r"rank=(\d+) of (\d+) on (\S+)", cluster.output(job_id)))
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    assert ranks == [("0", "2", host), ("1", "2", host)]
    info = cluster.job_info(job_id)
    assert (info["JobName"], info["JobState"], info["ExitCode"]) == (name, "COMPLETED", "0:0")


def test_two_task_job_succeeds(slurm_cluster, submit_and_wait, tmp_path):
    script = two_task_script(tmp_path / "two-tasks.sbatch")
    rc, job_id = submit_and_wait(script, timeout=120, wait="sbatch")  # sbatch --wait under timeout
    assert_two_tasks_ran(slurm_cluster, rc, job_id)


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
    rc, job_id = submit_and_wait(script, timeout=120)
    assert rc == 1
    assert slurm_cluster.job_info(job_id)["JobState"] == "CANCELLED"


def test_job_past_the_timeout_is_cancelled(slurm_lib, slurm_cluster, submit_and_wait, tmp_path):
    script = write_script(tmp_path / "sleeps.sbatch", "#SBATCH --time=1\nsleep 60\n")
    with pytest.raises(slurm_lib.SlurmJobTimeout):
        submit_and_wait(script, timeout=2)
    jobs = slurm_cluster.run("squeue", "-h", "-n", "sleeps.sbatch", "-o", "%i %T").stdout.split()
    assert "RUNNING" not in jobs and "PENDING" not in jobs


def test_job_that_can_never_run_is_refused_not_queued(slurm_lib, slurm_cluster, submit_and_wait, tmp_path):
    """EnforcePartLimits=ALL: sbatch --wait would otherwise wait forever on a PENDING job. Refused
    means SbatchRejected (sbatch gave no job id); a queued job would give SlurmJobTimeout instead."""
    script = write_script(tmp_path / "too-big.sbatch", "#SBATCH --nodes=1\n#SBATCH --ntasks=512\ntrue\n")
    with pytest.raises(slurm_lib.SbatchRejected):
        submit_and_wait(script, timeout=120)
    assert slurm_cluster.run("squeue", "-h", "-n", "too-big.sbatch").stdout == ""


# --- lifecycle of a second, private cluster ------------------------------------------------------


def alive(pid: int, name: str) -> bool:
    """PID runs and is `name`. A zombie has exited: PID 1 here may take seconds to reap it."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2][:1]
    except OSError:
        return False
    return comm == name and state != "Z"


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
    """cluster.sh's environment for a second cluster: its own /var/tmp directory and free ports."""
    slurm_lib.need_root()
    env = slurm_lib.new_cluster_env()
    try:
        yield env, Path(env["MOEFORGE_SLURM_DIR"])
    finally:
        slurm_lib.stop_and_remove(env)


def test_start_is_idempotent_and_stop_ends_what_start_started(slurm_lib, private_cluster_env):
    lib = slurm_lib
    env, directory = private_cluster_env
    munge_before = munge_answers()  # the machine's own munged (/run/munge), if any

    exports = lib.start_cluster(env)
    conf = directory / "slurm.conf"
    assert exports == {"SLURM_CONF": str(conf)}
    assert lib.parse_export(lib.cluster_cmd("env", env).stdout) == exports
    assert f"AuthInfo=socket={directory}/munge/munge.socket,cred_expire=30\n" in conf.read_text()
    pidfiles = {
        "slurmctld": directory / "run" / "slurmctld.pid",
        "slurmd": directory / "run" / "slurmd.pid",
        "munged": directory / "munge" / "munged.pid",
    }
    pids = {name: int(path.read_text()) for name, path in pidfiles.items()}
    assert all(alive(pid, name) for name, pid in pids.items())

    # Idempotent: a second start finds it running and starts nothing (the same daemons answer).
    again = lib.cluster_cmd("start", env)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr and "starting" not in again.stderr
    assert {name: int(path.read_text()) for name, path in pidfiles.items()} == pids
    status = lib.cluster_cmd("status", env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert re.search(r"node:\s+\S+ idle", status.stdout)
    assert f"munged:    running (pid {pids['munged']}" in status.stdout

    # A job still running when stop comes: stop cancels it and ends everything it started.
    slurm_env = {**env, **exports}
    sub = subprocess.run(
        ["sbatch", "--parsable", f"--output={directory}/sleeper-%j.out", "--wrap", "sleep 300"],
        env=slurm_env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job_id = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120  # waits for a state; only a hang gets near the deadline
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=slurm_env, capture_output=True, text=True)
        if state.stdout.strip() == "RUNNING":
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"job {job_id} never ran")

    stop = lib.cluster_cmd("stop", env)  # cluster_cmd's timeout (300 s) catches a hang
    assert stop.returncode == 0, stop.stderr
    assert "cancelling 1 job(s)" in stop.stderr
    assert not any(alive(pid, name) for name, pid in pids.items()), pids
    assert not any(path.exists() for path in pidfiles.values())
    assert not (directory / "munge" / "munge.socket").exists()
    assert munge_answers() == munge_before, "the machine's munged must be neither started nor stopped"
    assert processes_using(directory) == [], "stop left processes (a slurmstepd?) behind"
    assert lib.cluster_cmd("status", env).returncode == 3


def test_two_clusters_side_by_side(slurm_lib, slurm_cluster, submit_and_wait, tmp_path):
    """A second cluster beside the session's (as another checkout's or CI job's would be): both
    run jobs, and stopping the second leaves the first working (its munged included)."""
    first_conf = slurm_cluster.conf.read_text()
    with slurm_lib.private_cluster() as second:
        second_conf = second.conf.read_text()
        for key in ("SlurmctldPort", "SlurmdPort", "AuthInfo"):
            (a,) = re.findall(rf"^{key}=(.*)$", first_conf, re.M)
            (b,) = re.findall(rf"^{key}=(.*)$", second_conf, re.M)
            assert a != b, f"both clusters have {key}={a}"

        rc, job_id = submit_and_wait(two_task_script(tmp_path / "first.sbatch", "on-first"), timeout=120)
        assert_two_tasks_ran(slurm_cluster, rc, job_id, "on-first")
        rc, job_id = second.submit_and_wait(two_task_script(tmp_path / "second.sbatch", "on-second"), timeout=120)
        assert_two_tasks_ran(second, rc, job_id, "on-second")
        second_dir = second.dir
    assert not second_dir.exists(), "the second cluster's directory outlived it"

    rc, job_id = submit_and_wait(two_task_script(tmp_path / "after.sbatch", "after-second-stopped"), timeout=120)
    assert_two_tasks_ran(slurm_cluster, rc, job_id, "after-second-stopped")
