"""A real Slurm for the tests marked `slurm` (tests/slurm/cluster.sh does the work): one node, and a
cluster of two nodes in network namespaces for the multi-node launches.

Use:

    @pytest.mark.slurm
    def test_something(slurm_cluster, submit_and_wait, tmp_path):
        rc, job_id = submit_and_wait(script_path, timeout=120)          # sbatch --wait under timeout
        rc, job_id = submit_and_wait(script_path, 120, args=["--export=ALL,X=1"], cwd=repo_root)
        info = slurm_cluster.job_info(job_id)                           # scontrol show job, parsed
        text = slurm_cluster.output(job_id)                             # the job's stdout+stderr

`slurm_cluster` (session scope) starts this session's own cluster once (`cluster.sh start`: about
16 s cold, of which 12 s installing the Debian packages, 3.5 s when they are installed, most of it a
probe job), yields a SlurmCluster whose `.env` is os.environ plus SLURM_CONF (pass it to any sbatch,
srun or scontrol you run yourself), and at the end of the session stops it and removes its directory,
whether tests failed or not. Its own private directory (/var/tmp/moeforge-slurm-*), its own two free
ports and its own munged: two sessions at once (two checkouts, CI beside another job) never meet.

`multinode_cluster` (session scope, started on first use: about 4 s with the packages installed) is
the same with MOEFORGE_SLURM_NODES=2: nodes node1 and node2, each a slurmd in its own network
namespace with its own hostname and address; `.on_node(node, *argv)` gives the command line that runs
argv on a node, `.start_again()` restarts what a test killed.

Skips, with the reason, only when not root, when the packages cannot be installed (no Debian
mirror reachable) or, for the two-node cluster, when the machine allows no network namespaces; any other failure to start is a test error showing cluster.sh's output.
Job output goes to <cluster dir>/jobs/slurm-<id>.out unless the caller passes --output.
submit_and_wait polls `scontrol show job` by default; wait="sbatch" uses `sbatch --wait`, which
looks at the job 2 s after submission, then 8 s later, then less and less often.
"""

from __future__ import annotations

import importlib.util
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
    """The helper module: SlurmCluster, SbatchRejected, SlurmJobTimeout, private_cluster, cluster_cmd, ..."""
    return lib


@pytest.fixture(scope="session")
def slurm_cluster():
    """This session's own cluster (slurm_lib.private_cluster), stopped and removed at the end."""
    with lib.private_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def multinode_cluster():
    """This session's own two-node cluster (slurm_lib.private_cluster(nodes=2)), stopped, its network
    and directory removed at the end."""
    with lib.private_cluster(nodes=2) as cluster:
        yield cluster


@pytest.fixture
def submit_and_wait(slurm_cluster):
    """submit_and_wait(script, timeout, *, args=(), cwd=None, env=None, wait="poll") -> (exit_code, job_id).
    See SlurmCluster.submit_and_wait in slurm_lib.py."""
    return slurm_cluster.submit_and_wait


def pytest_collection_modifyitems(config, items):
    """A test that uses a cluster is a `slurm` test, marked or not (so -m "not slurm" leaves it out)."""
    for item in items:
        if {"slurm_cluster", "multinode_cluster"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slurm)
