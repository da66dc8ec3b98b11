"""The compiled tiny recipe's launch.sbatch, submitted to a real single-node Slurm. (Megatron-LM's loop under
Slurm, USR1 -> save -> requeue -> resume, runs on two nodes: test_multinode_launch.py.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def free_master_port(slurm_lib) -> str:
    """A free rendezvous port for the job. Without one launch.sbatch takes 15000 + job id, and a
    second test session's cluster (job ids from 1 too) would rendezvous on the same port."""
    return str(slurm_lib.free_ports(1)[0])


def test_tiny_recipe_runs_under_sbatch(slurm_lib, slurm_cluster, submit_and_wait, tmp_path):
    """One task per rank (srun, no torchrun): moeforge.runtime.train takes RANK/LOCAL_RANK/WORLD_SIZE from
    SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS; the logs go where the script's #SBATCH lines say."""
    out = tmp_path / "build"
    logs = tmp_path / "job logs"
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(out),
                           "--set", f"launch.logs_dir={logs}"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    build = out / "tiny-moe" / "cpu"
    logs.mkdir()
    job_env = dict(slurm_cluster.env)
    job_env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{job_env.get('PATH', '')}",
                   MOEFORGE_ROOT=str(ROOT), PYTHONWARNINGS="ignore", MASTER_PORT=free_master_port(slurm_lib))
    rc, job = submit_and_wait(build / "launch.sbatch", 600, cwd=ROOT, env=job_env, args=["--export=ALL"],
                              script_output=True)
    log = "".join(p.read_text(errors="replace") for p in sorted(logs.glob(f"*-{job}.*")))
    assert rc == 0, log[-4000:]
    assert (logs / f"tiny-moe-cpu-{job}.out").exists() and (logs / f"tiny-moe-cpu-{job}.err").exists()
    assert "one task per rank" in log and "torch.distributed.run" not in log
    report = json.loads((build / "report.json").read_text())
    assert report["world_size"] == 2 and report["ep"] == 2
    assert report["realised"]["expert_model_parallel_size"]["realised"] == 2
    assert len(report["steps"]) == 4
    assert all(isinstance(s["loss"], float) and 3.0 < s["loss"] < 6.0 for s in report["steps"])
    assert report["schedule_taken"] == "combined_1f1b"


def test_make_launch_target_slurm_reports_exit_code_and_report(slurm_lib, slurm_cluster, tmp_path):
    """`make launch TARGET=slurm` runs `python -m moeforge.compiler.commands.launch --target slurm`: sbatch --wait,
    the job's exit code, then the report summary."""
    env = dict(slurm_cluster.env)
    env.update(PYTHONPATH=str(ROOT), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               MASTER_PORT=free_master_port(slurm_lib))
    out = tmp_path / "build"
    logs = tmp_path / "make launch logs"  # moeforge.compiler.commands.launch creates it: sbatch opens the files before the job runs
    subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(out),
                    "--set", f"launch.logs_dir={logs}"], cwd=ROOT, env=env, check=True, capture_output=True)
    build = out / "tiny-moe" / "cpu"
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "slurm", "--timeout", "600",
                           str(build)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=700)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exited with 0" in done.stdout and "schedule taken: combined_1f1b" in done.stdout
    assert f"slurm logs: {logs}/" in done.stdout
    assert len(list(logs.glob("tiny-moe-cpu-*.out"))) == 1  # one node: the ranks write to the job's own log
    assert json.loads((build / "report.json").read_text())["world_size"] == 2
    # a failing job's exit code comes back: a plan the runtime refuses (world size mismatch)
    plan = json.loads((build / "plan.json").read_text())
    plan["layout"]["world_size"] = 3
    (build / "plan.json").write_text(json.dumps(plan))
    (build / "report.json").unlink()
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "slurm", "--timeout", "600",
                           str(build)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=700)
    assert done.returncode != 0 and "exited with 0" not in done.stdout
