"""The multi-node test cluster itself (cluster.sh with MOEFORGE_SLURM_NODES=2): each node a slurmd with
its own hostname and address in its own network namespace, reachable from the controller and from each
other by name; two such clusters side by side share nothing; stop removes the network it made.
No wall-clock bounds here: only waits on states, with deadlines that only a hang reaches."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def where_each_task_runs(cluster, tmp_path: Path, name: str) -> dict[str, tuple[str, str, str]]:
    """A two-node job whose tasks report their node id, hostname, eth0 address and how node1 and node2
    resolve there: {hostname: (node id, address, resolved)}."""
    script = tmp_path / f"{name}.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --job-name={name}\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=00:01:00\n"
        "set -euo pipefail\n"
        "srun bash -c 'printf \"task %s %s %s %s\\n\" \"$SLURM_NODEID\" \"$(hostname)\" "
        "\"$(ip -4 -o addr show eth0 | awk \"{print \\$4}\")\" \"$(getent hosts node1 node2 | tr -s \" \\n\" \" \")\"'\n"
    )
    rc, job = cluster.submit_and_wait(script, 120)
    out = cluster.output(job)
    assert rc == 0, out
    tasks = re.findall(r"^task (\d) (\S+) (\S+) (.*)$", out, re.M)
    assert len(tasks) == 2, out
    return {host: (node_id, addr, resolved.strip()) for node_id, host, addr, resolved in tasks}


def node_addresses(cluster) -> dict[str, str]:
    """NodeName -> NodeAddr, as slurmctld knows them."""
    text = cluster.run("scontrol", "show", "nodes").stdout
    return dict(re.findall(r"NodeName=(\S+) .*?NodeAddr=(\S+)", text, re.S))


def cluster_network(cluster) -> tuple[set[str], set[str]]:
    """(this cluster's network namespaces, its bridge and veths): the names cluster_net.sh derives."""
    conf_dir = str(cluster.dir)
    net_id = subprocess.run(["md5sum"], input=conf_dir, capture_output=True, text=True).stdout[:8]
    spaces = {n.split()[0] for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                   text=True).stdout.splitlines() if n.strip()}
    links = set(re.findall(r"^\d+: ([^:@]+)", subprocess.run(["ip", "-o", "link"], capture_output=True,
                                                              text=True).stdout, re.M))
    return ({s for s in spaces if s.startswith(f"moeforge-{net_id}-")},
            {link for link in links if link in (f"mfbr{net_id}",) or link.startswith(f"mf{net_id}v")})


def test_each_node_has_its_own_hostname_and_address(multinode_cluster, tmp_path):
    cluster = multinode_cluster
    assert cluster.nodes == ["node1", "node2"]
    addresses = node_addresses(cluster)
    tasks = where_each_task_runs(cluster, tmp_path, "where")
    assert sorted(tasks) == ["node1", "node2"]  # one task per node, each node its own hostname
    resolved = f"{addresses['node1']} node1 {addresses['node2']} node2"
    for host, (node_id, addr, names) in tasks.items():
        assert node_id == str(int(host[-1]) - 1)
        assert addr == f"{addresses[host]}/24"  # its own address, the one slurmctld reaches it at
        assert names == resolved  # every node resolves every node's name (MASTER_ADDR is one)
    assert addresses["node1"] != addresses["node2"]
    # the controller is on the same private subnet, at .1; nothing of it is the machine's own network
    assert re.search(r"^SlurmctldHost=localhost\((\d+\.\d+\.\d+)\.1\)$", cluster.conf.read_text(), re.M).group(1) \
        == addresses["node1"].rsplit(".", 1)[0]


def test_exec_runs_on_a_node_in_its_namespaces(multinode_cluster):
    cluster = multinode_cluster
    done = subprocess.run(cluster.on_node("node2", "sh", "-c", "hostname; getent hosts node1; ip -o link"),
                          env=cluster.cluster_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    host, resolved, *links = done.stdout.splitlines()
    assert host == "node2"
    assert resolved.split() == [node_addresses(cluster)["node1"], "node1"]
    assert sorted(re.match(r"\d+: ([^:@]+)", line).group(1) for line in links) == ["eth0", "lo"]
    bad = subprocess.run(cluster.on_node("node7", "true"), env=cluster.cluster_env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and "no node 'node7' in this cluster (nodes: node1 node2)" in bad.stderr


def test_two_multinode_clusters_side_by_side_and_stop_removes_the_network(slurm_lib, multinode_cluster, tmp_path):
    """A second two-node cluster beside the session's: its own subnet, namespaces and bridge; both run
    jobs; stopping it removes every namespace, veth and bridge it made, ends what ran on its nodes, and
    leaves the first one working."""
    first = multinode_cluster
    first_net = cluster_network(first)
    assert len(first_net[0]) == 2 and len(first_net[1]) == 3  # two namespaces; a bridge and two veths
    with slurm_lib.private_cluster(nodes=2) as second:
        second_net = cluster_network(second)
        assert len(second_net[0]) == 2 and not (first_net[0] & second_net[0]) and not (first_net[1] & second_net[1])
        a, b = node_addresses(first), node_addresses(second)
        assert {x.rsplit(".", 1)[0] for x in a.values()} != {x.rsplit(".", 1)[0] for x in b.values()}
        assert where_each_task_runs(second, tmp_path, "on-second")["node1"][1] == f"{b['node1']}/24"
        # a job left running on the second cluster's nodes when it stops
        sleeper = second.run("sbatch", "--parsable", "--nodes=2", f"--output={tmp_path}/sleeper.out",
                             "--wrap", "srun sleep 300")
        assert sleeper.returncode == 0, sleeper.stderr
        job = sleeper.stdout.strip().split(";")[0]
        slurm_lib.wait_until(lambda: second.job_info(job, check=False).get("JobState") == "RUNNING", 120,
                             lambda: second.job_info(job, check=False))
        second_dir = second.dir
    assert not second_dir.exists()
    spaces, links = cluster_network(second)
    assert spaces == set() and links == set(), "stop left the second cluster's network behind"
    assert cluster_network(first) == first_net
    assert where_each_task_runs(first, tmp_path, "after-second-stopped")["node2"][1] == f"{a['node2']}/24"
