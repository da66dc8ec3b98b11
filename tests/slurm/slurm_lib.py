"""Helpers for the tests against a real Slurm (tests/slurm/cluster.sh): one node, or several in
network namespaces (private_cluster(nodes=2)).

Imported by path from tests/slurm/conftest.py (`load_slurm_lib()`), and handed to tests through the
`slurm_lib` fixture, so it works whatever pytest's import mode; do not `import conftest`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CLUSTER_SH = Path(__file__).resolve().with_name("cluster.sh")
REPO_ROOT = CLUSTER_SH.parents[2]

EXIT_NOT_ROOT = 77
EXIT_NO_PACKAGES = 75
EXIT_NO_NETNS = 76


class SbatchRejected(RuntimeError):
    """sbatch refused the job (no job id): the message is sbatch's stderr."""


class SlurmJobTimeout(RuntimeError):
    """The job did not finish within the timeout; it has been cancelled."""


def wait_until(condition, limit_s: float, what, every_s: float = 0.5):
    """Poll ``condition()`` until it returns something true and return that; a hang guard, not a
    timing assertion: past ``limit_s`` it raises SlurmJobTimeout with ``what()`` (the state to show)."""
    deadline = time.monotonic() + limit_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SlurmJobTimeout(f"still waiting after {limit_s} s: {what()}")
        time.sleep(every_s)


# Job states after which nothing more happens (COMPLETING is not one: steps are still ending).
FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)


def exit_code_of(info: dict[str, str]) -> int:
    """What `sbatch --wait` returns for a finished job: its exit status, 1 when a signal ended it."""
    status, _, signal = info.get("ExitCode", "1:0").partition(":")
    return 1 if signal not in ("", "0") else int(status)


def cluster_cmd(action: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CLUSTER_SH), action],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def parse_export(stdout: str) -> dict[str, str]:
    """`export SLURM_CONF=/path` lines (as cluster.sh prints them) -> {"SLURM_CONF": "/path"}."""
    out = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"export ([A-Z_]+)=(\S+)", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


@dataclass
class SlurmCluster:
    conf: Path
    env: dict[str, str]
    cluster_env: dict[str, str] = field(default_factory=dict)  # cluster.sh's: its directory, ports, nodes
    jobs_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.jobs_dir = self.conf.parent / "jobs"
        self.jobs_dir.mkdir(exist_ok=True)

    @property
    def dir(self) -> Path:
        return self.conf.parent

    def run(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        """Run a Slurm client (squeue, scontrol, ...) against this cluster (env: self.env unless given)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        kw.setdefault("env", self.env)
        return subprocess.run(list(argv), **kw)

    def submit_and_wait(
        self,
        script: str | os.PathLike,
        timeout: float,
        *,
        args: list[str] | tuple[str, ...] = (),
        cwd: str | os.PathLike | None = None,
        env: dict[str, str] | None = None,
        wait: str = "poll",
        script_output: bool = False,
    ) -> tuple[int, str]:
        """Submit the script, wait for the job to end (at most `timeout` s); return (exit code, job id).

        The exit code is the one `sbatch --wait` returns: the batch script's, or 1 when a signal
        ended it (cancelled, time limit). wait="sbatch" waits with `sbatch --wait` under
        `timeout`; wait="poll" (default) submits, then polls `scontrol show job` every 0.25 s:
        same result, but sbatch --wait looks at the job 2 s after submission, then 8 s later,
        then at longer intervals (its back-off), so a job of a few seconds costs 10 s. Raises SbatchRejected when sbatch refuses the
        job, SlurmJobTimeout (after cancelling the job) when it runs past `timeout`. `cwd` is
        where sbatch runs (the job's submit directory; default: the current one); `env` replaces
        self.env (keep SLURM_CONF in it). Output: <cluster dir>/jobs/slurm-<id>.out unless `args`
        has --output or script_output is true (then the script's own #SBATCH --output/--error apply).
        """
        if wait not in ("poll", "sbatch"):
            raise ValueError(f"wait must be 'poll' or 'sbatch', not {wait!r}")
        cmd = ["sbatch", "--parsable"]
        if wait == "sbatch":
            cmd = ["timeout", "--kill-after=10", str(int(timeout)), *cmd, "--wait"]
        if not script_output and not any(a == "-o" or a.startswith("--output") for a in args):
            cmd.append(f"--output={self.jobs_dir}/slurm-%j.out")
        cmd += [*args, str(script)]
        started = time.monotonic()
        proc = subprocess.run(
            cmd, cwd=cwd, env=env or self.env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        m = re.match(r"\s*(\d+)", proc.stdout)
        job_id = m.group(1) if m else None
        if wait == "sbatch" and proc.returncode in (124, 137):
            self._timed_out(script, job_id, timeout, proc.stderr)
        if job_id is None or (wait == "poll" and proc.returncode != 0):
            raise SbatchRejected(f"sbatch rejected {script} (exit {proc.returncode}): {proc.stderr.strip()}")
        if wait == "sbatch":
            return proc.returncode, job_id
        while True:
            info = self.job_info(job_id, check=False)
            if info.get("JobState") in FINAL_STATES:
                return exit_code_of(info), job_id
            if time.monotonic() - started > timeout:
                self._timed_out(script, job_id, timeout, "")
            time.sleep(0.25)

    def _timed_out(self, script, job_id: str | None, timeout: float, stderr: str):
        if job_id:
            self.run("scancel", job_id)
        raise SlurmJobTimeout(
            f"job {job_id} of {script} did not finish in {timeout}s; cancelled\n"
            + (self.run("scontrol", "show", "job", job_id).stdout if job_id else stderr)
        )

    def job_info(self, job_id: str, *, check: bool = True) -> dict[str, str]:
        """`scontrol show job` as a dict (finished jobs stay visible for MinJobAge=300 s).
        JobName is taken whole (it may hold blanks); other values end at the next ` Key=`.
        With check=False an unanswered query gives {} instead of raising."""
        proc = self.run("scontrol", "show", "job", job_id)
        if proc.returncode != 0:
            if check:
                raise RuntimeError(f"scontrol show job {job_id}: {proc.stderr.strip()}")
            return {}
        text = proc.stdout
        info: dict[str, str] = {}
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("JobId="):
                first, _, name = line.partition(" JobName=")
                info["JobId"] = first.split("=", 1)[1]
                info["JobName"] = name
                continue
            for m in re.finditer(r"(\w[\w:/]*)=(.*?)(?=\s+\w[\w:/]*=|$)", line):
                info[m.group(1)] = m.group(2)
        return info

    def output(self, job_id: str) -> str:
        path = self.jobs_dir / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def nodes(self) -> list[str]:
        """The cluster's node names, in order."""
        return self.run("sinfo", "-h", "-N", "-o", "%N").stdout.split()

    def on_node(self, node: str, *argv: str) -> list[str]:
        """The command line that runs argv on `node` of a multi-node cluster (its network namespace, its
        hostname): `cluster.sh exec NODE ...`; run it with env=self.cluster_env plus what argv needs."""
        return ["bash", str(CLUSTER_SH), "exec", node, *argv]

    def start_again(self) -> None:
        """`cluster.sh start` once more: starts what is not running (a killed node's slurmd), waits until
        every node is idle."""
        proc = cluster_cmd("start", self.cluster_env)
        if proc.returncode != 0:
            raise RuntimeError(f"tests/slurm/cluster.sh start failed ({proc.returncode}):\n{proc.stderr[-4000:]}")


def free_ports(n: int = 2) -> list[int]:
    """n different TCP ports that are free now, chosen by the OS (bind to port 0). The sockets stay
    open until all n are chosen so no port comes twice; bound on all addresses, as slurmctld and
    slurmd bind theirs (a port free on 127.0.0.1 alone may be taken on another address)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for sock in socks:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in socks]


def new_cluster_env(nodes: int = 1) -> dict[str, str]:
    """cluster.sh's environment for a cluster of its own: a fresh private directory and two free
    ports, so it shares nothing with any other cluster on the machine (another checkout's, another
    session's). The directory is in /var/tmp, mode 0755: pytest's tmp dirs are 0700 and the slurm
    and munge users must enter it. With nodes > 1, a multi-node cluster: cluster.sh derives its
    network namespaces' names and its subnet from the directory (and skips a subnet in use)."""
    directory = tempfile.mkdtemp(prefix="moeforge-slurm-", dir="/var/tmp")
    os.chmod(directory, 0o755)
    ctld_port, slurmd_port = free_ports(2)
    env = {
        **os.environ,
        "MOEFORGE_SLURM_DIR": directory,
        "MOEFORGE_SLURMCTLD_PORT": str(ctld_port),
        "MOEFORGE_SLURMD_PORT": str(slurmd_port),
    }
    env.pop("MOEFORGE_SLURM_NODES", None)
    env.pop("MOEFORGE_SLURM_SUBNET", None)
    if nodes > 1:
        env["MOEFORGE_SLURM_NODES"] = str(nodes)
    return env


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("a real Slurm needs root (daemons, users, apt-get); run the slurm tests as root")


def start_cluster(env: dict[str, str]) -> dict[str, str]:
    """`cluster.sh start` for `env`; return its exports ({"SLURM_CONF": ...}).
    Skips the test when not root, when the packages cannot be installed, or (multi-node) when this
    machine allows no network namespaces."""
    need_root()
    proc = cluster_cmd("start", env)
    if proc.returncode == EXIT_NOT_ROOT:
        pytest.skip("a real Slurm needs root: " + proc.stderr.strip())
    if proc.returncode == EXIT_NO_PACKAGES:
        pytest.skip("slurmctld/slurmd/munge not installable (no Debian mirror reachable?):\n" + proc.stderr[-2000:])
    if proc.returncode == EXIT_NO_NETNS:
        pytest.skip("a multi-node cluster needs network namespaces and a bridge, which this machine does not allow "
                    "(CAP_NET_ADMIN):\n" + proc.stderr[-2000:])
    if proc.returncode != 0:
        pytest.fail(f"tests/slurm/cluster.sh start failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return parse_export(proc.stdout)


def stop_and_remove(env: dict[str, str]) -> None:
    """`cluster.sh stop` for `env`, then remove its private directory. When stop fails the
    directory stays (logs; daemons may still use it) and this raises."""
    proc = cluster_cmd("stop", env)
    if proc.returncode != 0:
        raise RuntimeError(
            f"tests/slurm/cluster.sh stop failed ({proc.returncode}); left {env['MOEFORGE_SLURM_DIR']}:\n{proc.stderr}"
        )
    shutil.rmtree(env["MOEFORGE_SLURM_DIR"], ignore_errors=True)


@contextlib.contextmanager
def private_cluster(nodes: int = 1):
    """A cluster of its own (new_cluster_env: private directory, free ports, its own munged; with
    nodes > 1 its own network namespaces), started; yields a SlurmCluster. Stopped, its network
    removed and its directory removed however the block ends, a failed start included."""
    need_root()
    env = new_cluster_env(nodes)
    try:
        exports = start_cluster(env)
        yield SlurmCluster(conf=Path(exports["SLURM_CONF"]), env={**os.environ, **exports}, cluster_env=env)
    finally:
        stop_and_remove(env)
