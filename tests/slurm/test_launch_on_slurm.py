"""The rendered templates/launch.sbatch.j2, submitted to the real test Slurm with hostile strings.

The interpreter is a recording fake, so this checks Slurm's side of the launch (how sbatch reads
the #SBATCH header, the job's working directory, MASTER_ADDR from the allocation, srun's argv and
environment, exit codes), not training: the end-to-end test of the compiled tiny recipe does that.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
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


def slurm_context(kind: str, marker: Path, fake_python: Path) -> dict:
    if kind == "benign":
        ctx = rendering.benign_context()
    else:
        ctx = rendering.hostile_context(str(marker))
        # Keep what Slurm must accept valid: a partition and a time limit that exist.
        ctx["slurm"].update(partition=None, account=None, time="00:05:00", container_image=None)
        ctx["slurm"]["extra_args"] = [ctx["slurm"]["extra_args"][0]]  # --comment=<hostile>
    ctx["python"] = str(fake_python)
    return ctx


@pytest.mark.parametrize("kind", ["benign", "hostile"])
@pytest.mark.parametrize("rc", [0, 5])
def test_launch_sbatch_on_slurm(slurm_cluster, submit_and_wait, tmp_path, kind, rc):
    marker = tmp_path / "pwned"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python = bin_dir / "py'th\"on $(touch pwned-1)"
    rendering.write_shim(fake_python)
    ctx = slurm_context(kind, marker, fake_python)

    root = tmp_path / "repo root"
    build = root / ctx["build_dir"]
    paths = rendering.render_all(ctx, build)
    (build / ctx["plan_file"]).write_text("{}\n", encoding="utf-8")
    shim_out = tmp_path / "shim-out"
    shim_out.mkdir()

    env = {**slurm_cluster.env, "SHIM_OUT": str(shim_out), "SHIM_RC": str(rc)}
    env.pop("MOEFORGE_ROOT", None)
    env.pop("MASTER_PORT", None)
    exit_code, job_id = submit_and_wait(paths["launch.sbatch"], timeout=60, cwd=root, env=env)
    log = slurm_cluster.output(job_id)
    assert exit_code == rc, log

    info = slurm_cluster.job_info(job_id)
    assert info["JobName"] == rendering.sbatch_sees(ctx["job_name"])
    assert info["NumNodes"] == "1" and info["Partition"] == "debug"
    assert info["ExitCode"] == f"{rc}:0"

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
    for var in ctx["env"]:
        assert rec["env"][var["name"]] == var["value"]

    assert not marker.exists(), "a recipe string was executed"
    assert not list(tmp_path.rglob("pwned-1")), "a recipe string was executed"
