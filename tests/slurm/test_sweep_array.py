"""recipes/sweeps/tiny-overlap.yaml on the real single-node Slurm: one job array (task index = point number, at most
two tasks at a time), followed to the end by `moeforge sweep launch --target slurm`; every launchable point
trains on 2 CPU ranks, and the results table has each of them with measured values."""
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]
LAUNCHED = ["p00", "p01", "p04", "p05", "p06", "p07"]


def test_the_sweep_runs_as_one_job_array(slurm_lib, slurm_cluster, tmp_path):
    out = tmp_path / "build"
    env = dict(slurm_cluster.env)
    env.update(PYTHONPATH=str(ROOT), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               # a base port of this session's own: task i rendezvous on base + i (another test session's
               # cluster numbers its jobs from 1 too, so ports derived from job ids could meet)
               MASTER_PORT=str(slurm_lib.free_ports(1)[0]))
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "sweep", "launch", "tiny-overlap", "--target", "slurm",
                           "--out", str(out), "--concurrency", "2", "--timeout", "1500"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    top = out / "sweeps" / "tiny-overlap"
    logs = sorted((top / "logs").glob("*.out"))
    tail = "".join(p.read_text(errors="replace")[-1500:] for p in logs)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + tail
    assert "job array" in done.stdout and "(6 point(s), at most 2 at a time)" in done.stdout
    script = (top / "sweep.sbatch").read_text()
    assert '#SBATCH --array="0-1,4-7%2"' in script
    manifest = json.loads((top / "sweep.json").read_text())
    [launch] = manifest["launches"]
    job = launch["array_job_id"]
    assert launch["target"] == "slurm" and launch["points"] == LAUNCHED
    assert sorted(p.name for p in logs) == sorted(f"tiny-overlap-{job}_{int(p[1:])}.out" for p in LAUNCHED)

    res = subprocess.run([sys.executable, "-m", "moeforge.compiler", "results", str(top), "--format", "json"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, json.loads((ROOT / "schemas" / "results.v1.json").read_text()))
    points = {p["id"]: p for p in doc["points"]}
    assert len(points) == 9 and points["p02"]["status"] == "refused" and points["p08"]["status"] == "duplicate"
    for pid in LAUNCHED:
        p = points[pid]
        [run] = p["runs"]
        assert p["status"] == "ok", p
        assert run["job_id"] and run["log"].endswith(f"tiny-overlap-{job}_{int(pid[1:])}.out")
        assert p["measured"]["step_time_s"]["median"] > 0 and p["measured"]["tokens_per_s_per_gpu"] > 0
        assert len(p["measured"]["peak_memory_bytes_per_rank"]) == 2
        assert p["realised"]["world_size"] == 2
