"""A real single-node Slurm for the tests marked `slurm` (tests/slurm/cluster.sh does the work).

Use:

    @pytest.mark.slurm
    def test_something(slurm_cluster, submit_and_wait, tmp_path):
        rc, job_id = submit_and_wait(script_path, timeout=120)          # sbatch --wait under timeout
        rc, job_id = submit_and_wait(script_path, 120, args=["--export=ALL,X=1"], cwd=repo_root)
        info = slurm_cluster.job_info(job_id)                           # scontrol show job, parsed
        text = slurm_cluster.output(job_id)                             # the job's stdout+stderr

`slurm_cluster` (session scope) starts the cluster once (`cluster.sh start`: about 16 s cold, of
which 12 s installing the Debian packages, 3.5 s when they are installed, most of it a probe job),
yields a SlurmCluster whose `.env` is os.environ plus SLURM_CONF (pass it to any sbatch, srun or
scontrol you run yourself), and stops it at the end of the session (about 2 s). A cluster that was already running (someone ran `cluster.sh start` by
hand, or another pytest session holds it) is used as it is and left running.

Skips, with the reason, only when not root or when the packages cannot be installed (no Debian
mirror reachable); any other failure to start is a test error showing cluster.sh's output.
Job output goes to <cluster dir>/jobs/slurm-<id>.out unless the caller passes --output.
submit_and_wait polls `scontrol show job` by default; wait="sbatch" uses `sbatch --wait`, which
looks at the job 2 s after submission, then 8 s later, then less and less often.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def load_slurm_lib():
    """tests/slurm/slurm_lib.py, imported by path (independent of pytest's import mode)."""
    name = "moeforge_tests_slurm_lib"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("slurm_lib.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


lib = load_slurm_lib()


@pytest.fixture(scope="session")
def slurm_lib():
    """The helper module: SlurmCluster, SbatchRejected, SlurmJobTimeout, cluster_cmd, start_cluster, ..."""
    return lib


@pytest.fixture(scope="session")
def slurm_cluster():
    exports, started_here = lib.start_cluster()
    env = {**os.environ, **exports}
    cluster = lib.SlurmCluster(conf=Path(exports["SLURM_CONF"]), env=env, started_here=started_here)
    try:
        yield cluster
    finally:
        if started_here:
            proc = lib.cluster_cmd("stop")
            if proc.returncode != 0:
                print(f"tests/slurm/cluster.sh stop failed ({proc.returncode}):\n{proc.stderr}")


@pytest.fixture
def submit_and_wait(slurm_cluster):
    """submit_and_wait(script, timeout, *, args=(), cwd=None, env=None, wait="poll") -> (exit_code, job_id).
    See SlurmCluster.submit_and_wait in slurm_lib.py."""
    return slurm_cluster.submit_and_wait


def pytest_collection_modifyitems(config, items):
    """A test that uses the cluster is a `slurm` test, marked or not (so -m "not slurm" leaves it out)."""
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
