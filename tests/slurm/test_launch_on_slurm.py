"""The rendered templates/launch.sbatch.j2, submitted to the real test Slurm with hostile strings.

The interpreter is a recording fake, so this checks Slurm's side of the launch (how sbatch reads
the #SBATCH header, the logs it opens, the job's working directory, one task per rank, MASTER_ADDR
from the allocation, the tasks' argv and environment, exit codes, USR1 forwarded from the batch
shell through srun to every rank, the requeue after the ranks saved), not training: the end-to-end
test of the compiled tiny recipe does that.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def load_rendering():
    name = "moeforge_tests_rendering"  # the same module object tests/launch/conftest.py loads
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "launch" / "rendering.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


rendering = load_rendering()


def slurm_context(kind: str, marker: Path, fake_python: Path, logs: Path) -> dict:
    if kind == "benign":
        ctx = rendering.benign_context()
    else:
        ctx = rendering.hostile_context(str(marker))
        # Keep what Slurm must accept valid: a partition and a time limit that exist.
        ctx["slurm"].update(partition=None, account=None, time="00:05:00", container_image=None)
        ctx["slurm"]["extra_args"] = [ctx["slurm"]["extra_args"][0]]  # --comment=<hostile>
    ctx["python"] = str(fake_python)
    # The logs go where the script says; %x would put the hostile job name (slashes and all) in a
    # file name, so the hostile run names its files by job id only (the compiler's names are plain).
    name = "%x-%j" if kind == "benign" else "job-%j"
    ctx["slurm"]["output"] = f"{logs}/{name}.out"
    ctx["slurm"]["error"] = f"{logs}/{name}.err"
    return ctx


def _logs_dir(tmp_path: Path, kind: str) -> Path:
    return tmp_path / ("logs" if kind == "benign" else "lo gs'$(touch pwned-1) `x`;\"q\"")


def _read_logs(logs: Path, job_id: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(logs.glob(f"*{job_id}.*")))


@pytest.mark.parametrize("kind", ["benign", "hostile"])
@pytest.mark.parametrize("rc", [0, 5])
def test_launch_sbatch_on_slurm(slurm_cluster, submit_and_wait, tmp_path, kind, rc):
    marker = tmp_path / "pwned"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python = bin_dir / "py'th\"on $(touch pwned-1)"
    rendering.write_shim(fake_python)
    logs = _logs_dir(tmp_path, kind)
    logs.mkdir()  # sbatch opens the log files before the script runs (make launch creates the directory)
    ctx = slurm_context(kind, marker, fake_python, logs)

    root = tmp_path / "repo root"
    build = root / ctx["build_dir"]
    paths = rendering.render_all(ctx, build)
    (build / ctx["plan_file"]).write_text("{}\n", encoding="utf-8")
    shim_out = tmp_path / "shim-out"
    shim_out.mkdir()

    env = {**slurm_cluster.env, "SHIM_OUT": str(shim_out), "SHIM_RC": str(rc)}
    env.pop("MOEFORGE_ROOT", None)
    env.pop("MASTER_PORT", None)
    exit_code, job_id = submit_and_wait(paths["launch.sbatch"], timeout=60, cwd=root, env=env, script_output=True)
    log = _read_logs(logs, job_id)
    assert exit_code == rc, log

    info = slurm_cluster.job_info(job_id)
    assert info["JobName"] == rendering.sbatch_sees(ctx["job_name"])
    assert info["NumNodes"] == "1" and info["Partition"] == "debug"
    assert info["ExitCode"] == f"{rc}:0"
    assert "launch.sbatch: job" in log, "the script's #SBATCH --output/--error did not take"
    if kind == "benign":
        assert (logs / f"{ctx['job_name']}-{job_id}.err").exists()
    if ctx["checkpointing"]:
        assert info["Requeue"] == "1"

    rec = rendering.recorded(shim_out, fake_python.name)
    assert rec, f"the fake interpreter never ran:\n{log}"
    master = socket.gethostname().split(".")[0]
    port = rendering.expected_job_port(ctx, job_id)
    expected = rendering.expected_srun_argv(ctx, str(root), master, port, job_id)
    python_at = expected.index(ctx["python"])
    assert rec["argv"] == expected[python_at + 1 :]
    assert Path(rec["cwd"]).resolve() == root.resolve()
    assert rec["env"]["MASTER_ADDR"] == master
    assert rec["env"]["MASTER_PORT"] == str(port)
    assert rec["env"]["SLURM_JOB_ID"] == job_id
    # one task per rank: the runtime maps these to RANK / LOCAL_RANK / WORLD_SIZE
    assert rec["env"]["SLURM_NTASKS"] == str(ctx["world_size"])
    assert rec["env"]["SLURM_PROCID"] in {str(r) for r in range(ctx["world_size"])}
    for var in ctx["env"]:
        assert rec["env"][var["name"]] == var["value"]

    assert not marker.exists(), "a recipe string was executed"
    assert not list(tmp_path.rglob("pwned-1")), "a recipe string was executed"


# A fake rank: the first run (no "saved-<rank>" file) waits for USR1, records it, "saves" and exits 75;
# a requeued run finds the file and exits 0.
SAVING_RANK = r"""#!/bin/bash
rank="${SLURM_PROCID:?}"
if [[ -f "$SHIM_OUT/saved-$rank" ]]; then
    printf 'rank %s: resumed from the checkpoint\n' "$rank"
    exit 0
fi
got=0
trap 'got=1' USR1
touch "$SHIM_OUT/waiting-$rank"
for _ in $(seq 1200); do
    if ((got)); then break; fi
    sleep 0.05
done
if ((!got)); then exit 9; fi
printf 'rank %s: USR1: saved\n' "$rank"
touch "$SHIM_OUT/saved-$rank"
exit 75
"""


def test_usr1_reaches_every_rank_and_the_job_is_requeued(slurm_lib, slurm_cluster, submit_and_wait, tmp_path):
    """scancel --signal=USR1 --batch is what --signal=B:USR1@<margin> does at the time limit: only the
    batch shell gets it. It forwards it to srun, srun to both ranks; they exit 75; the script requeues
    the job; the second run (same job id, logs appended) completes."""
    ctx = rendering.with_checkpointing(rendering.benign_context())
    ctx["runtime_module"] = "moeforge.runtime.train"  # any module: the fake interpreter does not look
    logs = tmp_path / "logs"
    logs.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python = bin_dir / "python-fake"
    fake_python.write_text(SAVING_RANK)
    fake_python.chmod(0o755)
    ctx["python"] = str(fake_python)
    ctx["slurm"].update(output=f"{logs}/%x-%j.out", error=f"{logs}/%x-%j.err", time="00:05:00")
    root = tmp_path / "repo root"
    paths = rendering.render_all(ctx, root / ctx["build_dir"])
    (root / ctx["build_dir"] / ctx["plan_file"]).write_text("{}\n", encoding="utf-8")
    shim_out = tmp_path / "shim-out"
    shim_out.mkdir()
    env = {**slurm_cluster.env, "SHIM_OUT": str(shim_out)}
    env.pop("MOEFORGE_ROOT", None)

    submitted = subprocess.run(["sbatch", "--parsable", str(paths["launch.sbatch"])], cwd=root, env=env,
                               capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        show = lambda: slurm_cluster.run("scontrol", "show", "job", job_id).stdout  # noqa: E731
        slurm_lib.wait_until(lambda: all((shim_out / f"waiting-{r}").exists() for r in range(2)), 120, show,
                             every_s=0.1)
        time.sleep(0.5)
        sent = slurm_cluster.run("scancel", "--signal=USR1", "--batch", job_id)
        assert sent.returncode == 0, sent.stderr

        def finished():
            info = slurm_cluster.job_info(job_id, check=False)
            return info if info.get("JobState") in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"} else None

        info = slurm_lib.wait_until(finished, 240, show)
    finally:
        slurm_cluster.run("scancel", job_id)
    out = (logs / f"{ctx['job_name']}-{job_id}.out").read_text()
    err = (logs / f"{ctx['job_name']}-{job_id}.err").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, out, err)
    assert info["Restarts"] == "1"
    assert all((shim_out / f"saved-{r}").exists() for r in range(2)), "a rank never got USR1"
    # both runs in the same files (--open-mode=append): the save, the requeue, the resumed run
    assert "rank 0: USR1: saved" in out and "rank 1: USR1: saved" in out
    assert "rank 0: resumed from the checkpoint" in out and "rank 1: resumed from the checkpoint" in out
    assert "forwarding it to srun" in err
    assert f"requeueing job {job_id}" in err
    assert err.count("launch.sbatch: job") == 2
