"""Multi-node launches run for real: tiny-moe compiled for two nodes x one rank (platform cpu-cluster,
EP=2 across the nodes) on the two-node test cluster (network namespaces, tests/slurm/cluster.sh).

- `make launch TARGET=slurm`: the emitted launch.sbatch on both nodes; report.json names both hosts, and
  its losses equal the same recipe's on one node with two ranks (`moeforge launch --target local`).
- torchrun.sh on the two nodes (node ranks 0 and 1, --nnodes 2) trains the same recipe, the same losses.
- moeforge.runtime.megatron on two nodes: USR1 to the batch shell (what --signal=B:USR1@margin does before the
  time limit) reaches both ranks, both save and exit 75, the job is requeued and resumes from that
  checkpoint, and the first step after the resume has the loss of an uninterrupted run.
- a node lost mid-run (its slurmd and its rank killed): the job ends non-zero, the launch says so and
  where the logs are, and the last checkpoint is intact and loads.

Few trainings, each read by several tests (module-scoped fixtures). No wall-clock assertions: waits on
states and files, with deadlines only a hang reaches.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV312 = Path(os.environ.get("MOEFORGE_VENV312", ROOT / ".venv312"))
HAVE_VENV312 = (VENV312 / ".installed").exists() and (VENV312 / "bin" / "python").exists()
TWO_NODES = ("platform=cpu-cluster", "resources.nodes=2")
MEGATRON = ("platform.software.megatron_core=0.19.2", "runtime.entrypoint=megatron-lm", "logging.interval=1",
            "launch.time=00:15:00")
# One thread per rank in every run compared here: the same arithmetic, so the same losses bit for bit.
SAME_THREADS = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
needs_venv312 = pytest.mark.skipif(not HAVE_VENV312, reason=".venv312 is not built (`make setup312`): "
                                   "moeforge.runtime.megatron needs megatron-core >= 0.17 with megatron/training")


def compile_tiny(out: Path, *sets: str) -> Path:
    args = [a for s in sets for a in ("--set", s)]
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "tiny-moe" / "cpu"


def losses(report: dict) -> dict[int, float]:
    return {s["step"]: s["loss"] for s in report["steps"]}


def report_of(build: Path) -> dict:
    return json.loads((build / "report.json").read_text())


def job_logs(logs: Path, job: str) -> dict[str, str]:
    """The job's own log files and each node's (launch.sbatch: %x-%j.* and %x-%j-%N.*), by file name."""
    files = sorted(logs.glob(f"*-{job}.*")) + sorted(logs.glob(f"*-{job}-*.*"))
    return {p.name: p.read_text(errors="replace") for p in files}


def launch_env(cluster, python: Path) -> dict:
    return {**cluster.env, **SAME_THREADS, "PYTHONPATH": str(ROOT), "MOEFORGE_ROOT": str(ROOT),
            "PATH": f"{python.parent}{os.pathsep}{cluster.env.get('PATH', '/usr/bin:/bin')}"}


# --- moeforge.runtime.train: make launch on two nodes, one node, torchrun.sh on two nodes ----------------------------


@pytest.fixture(scope="module")
def make_launch(multinode_cluster, tmp_path_factory):
    """`make launch RECIPE=tiny-moe/cpu TARGET=slurm` for two nodes x one rank, built under a scratch OUT
    (the checkout's build/ is left alone): (make's result, build dir, logs dir). `-o .venv/.installed`: the
    environment is there already; make must not rebuild it because pyproject.toml is newer."""
    tmp = tmp_path_factory.mktemp("make-launch")
    logs = tmp / "logs"
    sets = " ".join([*TWO_NODES, f"launch.logs_dir={logs}"])
    done = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "launch",
                           "RECIPE=tiny-moe/cpu", "TARGET=slurm", f"OUT={tmp / 'build'}", f"SET={sets}"],
                          cwd=ROOT, env={**multinode_cluster.env, **SAME_THREADS}, capture_output=True, text=True,
                          timeout=1800)
    return done, tmp / "build" / "tiny-moe" / "cpu", logs


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    """The same recipe on one node with two ranks (the cpu platform), through `moeforge launch --target local`."""
    build = compile_tiny(tmp_path_factory.mktemp("one-node"))
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "local", str(build)], cwd=ROOT,
                          env={**os.environ, **SAME_THREADS, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return report_of(build)


def test_make_launch_runs_tiny_moe_on_two_nodes(make_launch):
    done, build, logs = make_launch
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    job = re.search(r"slurm job (\d+) exited with 0", done.stdout).group(1)
    assert "ranks per host: node1 (0), node2 (1)" in done.stdout  # the launch's summary of report.json
    plan = json.loads((build / "plan.json").read_text())
    assert (plan["layout"]["nnodes"], plan["layout"]["nproc_per_node"], plan["layout"]["ep"]) == (2, 1, 2)
    report = report_of(build)
    assert report["status"] == "ok" and report["world_size"] == 2
    # rank r on node r: srun's block distribution, as megatron-core's EP group [0, 1] is laid across the nodes
    assert report["placement"] == {"hosts": ["node1", "node2"], "node_ranks": [0, 1], "local_ranks": [0, 0],
                                   "expert_parallel_groups": [[0, 1]]}
    assert report["realised"]["expert_model_parallel_size"]["realised"] == 2
    text = job_logs(logs, job)
    assert sorted(text) == [f"tiny-moe-cpu-{job}{part}" for part in
                            ("-node1.err", "-node1.out", "-node2.err", "-node2.out", ".err", ".out")]
    # the rendezvous on the allocation's first node; each node's ranks in that node's log
    assert f"launch.sbatch: job {job}, 2 node(s) (node[1-2]) x 1 rank(s)" in text[f"tiny-moe-cpu-{job}.err"]
    assert f"rendezvous node1:{15000 + int(job) % 15000}" in text[f"tiny-moe-cpu-{job}.err"]
    assert "rank 0/2 on node1, node 0, local rank 0" in text[f"tiny-moe-cpu-{job}-node1.out"]
    assert "rank 1/2 on node2, node 1, local rank 0" in text[f"tiny-moe-cpu-{job}-node2.out"]
    assert "step    4/4" in text[f"tiny-moe-cpu-{job}-node1.out"]  # rank 0 logs the steps


def test_two_nodes_train_as_one_node_with_two_ranks(make_launch, one_node):
    _, build, _ = make_launch
    two = report_of(build)
    assert one_node["placement"]["hosts"][0] == one_node["placement"]["hosts"][1]  # really one node
    assert len(losses(two)) == 4 and losses(two) == losses(one_node)


def test_torchrun_sh_on_two_nodes(multinode_cluster, one_node, tmp_path):
    """torchrun.sh of the two-node build, started on node1 (NODE_RANK=0) and node2 (NODE_RANK=1) with the
    rendezvous on node1: trains the same recipe, the same losses."""
    build = compile_tiny(tmp_path / "build", *TWO_NODES)
    env = {**multinode_cluster.cluster_env, **SAME_THREADS, "PYTHONPATH": str(ROOT), "MOEFORGE_ROOT": str(ROOT),
           "MASTER_ADDR": "node1", "MASTER_PORT": "29400",  # node1's own network: no other job can hold it
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    procs = []
    for rank, node in enumerate(("node1", "node2")):
        log = open(tmp_path / f"{node}.log", "w")
        procs.append((subprocess.Popen(multinode_cluster.on_node(node, "bash", str(build / "torchrun.sh")),
                                       env={**env, "NODE_RANK": str(rank)}, stdout=log, stderr=subprocess.STDOUT),
                      log))
    codes = []
    try:
        for proc, log in procs:
            codes.append(proc.wait(timeout=900))
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
            log.close()
    text = {node: (tmp_path / f"{node}.log").read_text(errors="replace") for node in ("node1", "node2")}
    assert codes == [0, 0], text
    assert "torchrun.sh: node rank 0 of 2, rendezvous on node1:29400" in text["node1"]
    assert "torchrun.sh: node rank 1 of 2, rendezvous on node1:29400" in text["node2"]
    report = report_of(build)
    assert report["placement"]["hosts"] == ["node1", "node2"] and report["placement"]["node_ranks"] == [0, 1]
    assert losses(report) == losses(one_node)


# --- moeforge.runtime.megatron: USR1, save on both nodes, requeue, resume; a node lost ------------------------------


class RanksHere:
    """The plan's two ranks as processes on this machine (one node, as srun would start them there), with
    Megatron-LM arguments `extra` (moeforge.runtime.megatron ... -- EXTRA); their output in `log`."""

    def __init__(self, build: Path, extra: list[str], log: Path, port: int):
        self.log, self.sink = log, open(log, "w")
        argv = [str(VENV312 / "bin" / "python"), "-m", "moeforge.runtime.megatron", str(build / "plan.json"), "--out",
                str(build), "--", *extra]
        env = {**os.environ, **SAME_THREADS, "PYTHONPATH": str(ROOT), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        self.procs = [subprocess.Popen(argv, cwd=ROOT, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                       stdout=self.sink, stderr=subprocess.STDOUT) for r in (0, 1)]

    def finish(self, timeout: float = 900) -> list[int]:
        try:
            return [p.wait(timeout=timeout) for p in self.procs]
        finally:
            self.stop()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.sink.close()

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")


def tracker(ckpt: Path) -> int | None:
    """The iteration Megatron-LM's latest_checkpointed_iteration.txt names (written after a save completes)."""
    try:
        return int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    except (OSError, ValueError):
        return None


def checkpoint_files(ckpt: Path, iteration: int) -> list[str]:
    """What a torch_dist checkpoint of two ranks holds: its metadata and a shard written by each rank."""
    return sorted(p.name for p in (ckpt / f"iter_{iteration:07d}").iterdir())


TWO_RANK_CHECKPOINT = [".metadata", "__0_0.distcp", "__1_0.distcp", "metadata.json"]


@pytest.fixture(scope="module")
def requeued(multinode_cluster, slurm_lib, tmp_path_factory):
    """moeforge.runtime.megatron on two nodes through launch.sbatch: once training runs, USR1 to the batch shell;
    the job runs to its end (requeued once). Meanwhile (the requeued job waits for its credential), the
    uninterrupted reference: the same recipe from scratch, two ranks here, stopped one step past the
    iteration the job saved at."""
    cluster, tmp = multinode_cluster, tmp_path_factory.mktemp("usr1")
    logs, ckpt = tmp / "logs", tmp / "ckpt"
    sets = [*TWO_NODES, *MEGATRON, "checkpoint.interval=100000", "training.train_iters=80"]
    build = compile_tiny(tmp / "build", *sets, f"checkpoint.save={ckpt}", f"launch.logs_dir={logs}")
    reference = compile_tiny(tmp / "reference", *sets, f"checkpoint.save={tmp / 'reference-ckpt'}")
    logs.mkdir()
    submitted = cluster.run("sbatch", "--parsable", str(build / "launch.sbatch"), cwd=ROOT,
                            env=launch_env(cluster, VENV312 / "bin" / "python"))
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    text = lambda: "".join(job_logs(logs, job).values())  # noqa: E731
    ranks = None
    try:
        def training() -> bool:
            assert cluster.job_info(job, check=False).get("JobState") in {"PENDING", "CONFIGURING", "RUNNING"}, \
                text()[-4000:]
            return re.search(r"iteration\s+3/\s*80", text()) is not None  # Megatron-LM's log line, last rank

        slurm_lib.wait_until(training, 900, lambda: text()[-4000:])
        sent = cluster.run("scancel", "--signal=USR1", "--batch", job)
        assert sent.returncode == 0, sent.stderr
        saved = slurm_lib.wait_until(lambda: tracker(ckpt), 600, lambda: text()[-4000:])
        ranks = RanksHere(reference, ["--exit-interval", str(saved + 1)], tmp / "reference.log",
                          slurm_lib.free_ports(1)[0])

        def finished():
            info = cluster.job_info(job, check=False)
            return info if info.get("JobState") in slurm_lib.FINAL_STATES else None

        info = slurm_lib.wait_until(finished, 1500, lambda: text()[-4000:], every_s=1)
        reference_codes = ranks.finish()
    finally:
        cluster.run("scancel", job)
        if ranks is not None:
            ranks.stop()
    return {"job": job, "info": info, "logs": job_logs(logs, job), "report": report_of(build), "ckpt": ckpt,
            "saved": saved, "reference": (reference_codes, ranks.output, report_of(reference))}


@needs_venv312
def test_usr1_on_two_nodes_both_save_exit_75_and_the_job_is_requeued(requeued):
    job, info, logs = requeued["job"], requeued["info"], requeued["logs"]
    err = logs[f"tiny-moe-cpu-{job}.err"]
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, err[-4000:])
    assert info["Restarts"] == "1", info
    # the batch shell forwarded USR1 to srun, srun to the rank on each node; each saved and exited 75
    assert "forwarding it to srun" in err
    assert "srun: error: node1: task 0: Exited with exit code 75" in err
    assert "srun: error: node2: task 1: Exited with exit code 75" in err
    assert f"requeueing job {job}" in err and err.count(f"launch.sbatch: job {job}, 2 node(s) (node[1-2])") == 2
    saved = requeued["saved"]
    assert 3 <= saved < 80
    assert checkpoint_files(requeued["ckpt"], saved) == TWO_RANK_CHECKPOINT  # a shard from each node


@needs_venv312
def test_the_requeued_job_resumes_where_an_uninterrupted_run_would_be(requeued):
    report, saved = requeued["report"], requeued["saved"]
    assert report["status"] == "ok" and report["placement"]["hosts"] == ["node1", "node2"]
    assert report["checkpoint"]["resumed_iteration"] == saved, report["checkpoint"]
    steps = losses(report)
    assert min(steps) == saved + 1 and max(steps) == 80
    codes, output, reference = requeued["reference"]
    assert codes == [0, 0], output[-4000:]
    assert sorted(losses(reference)) == list(range(1, saved + 2))
    assert steps[saved + 1] == losses(reference)[saved + 1]


@pytest.fixture(scope="module")
def node_lost(multinode_cluster, slurm_lib, tmp_path_factory):
    """moeforge.runtime.megatron on two nodes through `moeforge launch --target slurm`, a checkpoint every 3
    iterations; once one is written, node2 is lost: its slurmd and its rank are killed (SIGKILL). The
    node comes back afterwards (its slurmd restarted) for whatever runs next."""
    cluster, tmp = multinode_cluster, tmp_path_factory.mktemp("node-lost")
    logs, ckpt = tmp / "logs", tmp / "ckpt"
    build = compile_tiny(tmp / "build", *TWO_NODES, *MEGATRON, "checkpoint.interval=3", "training.train_iters=300",
                         f"checkpoint.save={ckpt}", f"launch.logs_dir={logs}")
    out, err = open(tmp / "launch.out", "w"), open(tmp / "launch.err", "w")
    launch = subprocess.Popen([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "slurm", "--timeout", "1500",
                               str(build)], cwd=ROOT, env=launch_env(cluster, VENV312 / "bin" / "python"),
                              stdout=out, stderr=err)
    job, killed = None, []
    try:
        def running_job():
            assert launch.poll() is None, (tmp / "launch.err").read_text()
            jobs = cluster.run("squeue", "-h", "-n", "tiny-moe-cpu", "-o", "%A").stdout.split()
            return jobs[0] if jobs else None

        job = slurm_lib.wait_until(running_job, 300, lambda: cluster.run("squeue").stdout)
        slurm_lib.wait_until(lambda: tracker(ckpt), 900, lambda: "".join(job_logs(logs, job).values())[-4000:])
        slurmd = int((cluster.dir / "run" / "slurmd-node2.pid").read_text())
        rank = processes_of(job, rank=1)  # the rank and its data loader workers
        assert rank, "rank 1 is not running"
        for pid in [slurmd, *rank]:
            os.kill(pid, 9)
            killed.append(pid)
        rc = launch.wait(timeout=900)
    finally:
        if launch.poll() is None:
            launch.kill()
        out.close()
        err.close()
        if job:
            cluster.run("scancel", job)
        # What an operator does with a node that was lost: mark it down (which releases the job it was completing:
        # its slurmd died before it could say so, and the job would hold the node), then bring it back.
        cluster.run("scontrol", "update", "nodename=node2", "state=down", "reason=lost in a test")
        cluster.start_again()
    return {"rc": rc, "job": job, "out": (tmp / "launch.out").read_text(), "err": (tmp / "launch.err").read_text(),
            "logs": job_logs(logs, job), "ckpt": ckpt, "build": build, "tmp": tmp}


def processes_of(job: str, rank: int) -> list[int]:
    """PIDs whose environment says they are `rank` of Slurm job `job` (the rank and its children)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = set((proc / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if {f"SLURM_JOB_ID={job}".encode(), f"SLURM_PROCID={rank}".encode(), b"SLURM_STEP_ID=0"} <= env:
            found.append(int(proc.name))
    return found


@needs_venv312
def test_a_lost_node_ends_the_job_non_zero_and_the_launch_says_so(node_lost):
    job, logs = node_lost["job"], node_lost["logs"]
    assert node_lost["rc"] != 0
    code = int(re.search(rf"slurm job {job} exited with (\d+)", node_lost["out"]).group(1))
    assert code == node_lost["rc"] and code != 0
    assert "logs of the job: " in node_lost["err"] and f"tiny-moe-cpu-{job}-node2.err" in node_lost["err"]
    err = logs[f"tiny-moe-cpu-{job}.err"]
    assert "srun: error: node2: task 1: Killed" in err
    assert f"launch.sbatch: srun exited with status {code}" in err
    # the surviving rank says why it stopped: its peer went away, not a refused plan
    assert "moeforge.runtime.megatron[rank 0]: lost another rank:" in logs[f"tiny-moe-cpu-{job}-node1.err"]


@needs_venv312
def test_after_a_lost_node_the_last_checkpoint_is_intact_and_loads(node_lost, slurm_lib):
    ckpt, build = node_lost["ckpt"], node_lost["build"]
    last = tracker(ckpt)
    assert last is not None and last % 3 == 0
    assert checkpoint_files(ckpt, last) == TWO_RANK_CHECKPOINT
    ranks = RanksHere(build, ["--exit-interval", str(last + 1)], node_lost["tmp"] / "resume.log",
                      slurm_lib.free_ports(1)[0])
    assert ranks.finish() == [0, 0], ranks.output[-4000:]
    report = report_of(build)
    assert report["checkpoint"]["resumed_iteration"] == last and sorted(losses(report)) == [last + 1]
