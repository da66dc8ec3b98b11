"""`sweep launch --target local`: the points one after another on this machine, each repeat through the
point's own torchrun.sh (what `moeforge launch --target local` runs), its output in runs/<repeat>/run.log.

Each run is started in a session of its own, so Ctrl-C stops the sweep cleanly: the running point's
processes get SIGTERM (SIGKILL 30 s later), the run is recorded as cancelled, and nothing else starts.
SIGTERM and SIGHUP to the launcher do the same. A SIGKILL cannot be caught: each run goes through
watchdog.py, the leader of its session, which stops the run's process group when the launcher's end of a
pipe closes, so no training outlives its launcher.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.sweep import inputs, status
from moeforge.compiler.sweep.builds import relative
from moeforge.compiler.sweep.progress import Progress
from moeforge.compiler.targets.job import job_env, job_python, local_command

KILL_AFTER_S = 30
WATCHDOG = Path(__file__).with_name("watchdog.py")


class Stopped(KeyboardInterrupt):
    """The launcher got SIGTERM or SIGHUP: handled as Ctrl-C is (the running point stopped, recorded)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum, _frame):
    raise Stopped(signum)


@dataclass
class Job:
    """One repeat of one point to run."""

    point: str
    build: Path           # absolute build directory
    repeat: int
    fingerprint: str


def run(jobs: list[Job], stream=None) -> list[dict]:
    """Run the jobs in order; each one's {point, repeat, status, error, log}. Ctrl-C ends the sweep
    (KeyboardInterrupt, after the running point is stopped and recorded)."""
    progress = Progress(len(jobs), "sweep", stream)
    done, failed, out = 0, 0, []
    previous = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, _raise_stopped)
    except ValueError:
        pass  # not the main thread (a test's): no handlers to install
    try:
        for job in jobs:
            progress.update(done, 1, failed)
            result = run_one(job)
            out.append(result)
            if result["status"] == "ok":
                done += 1
            else:
                failed += 1
            progress.update(done, 0, failed)
            progress.finished(f"{job.point} repeat {job.repeat}: {result['status']}", done, failed)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        progress.close()
    return out


def run_one(job: Job) -> dict:
    """Run one repeat of a point under the watchdog and return its status record; never reuses an earlier report."""
    here = status.run_dir(job.build, job.repeat)
    here.mkdir(parents=True, exist_ok=True)
    log = here / "run.log"
    earlier = job.build / "report.json"  # an earlier run's that no record claims: kept, never this one's
    if earlier.exists():
        os.replace(earlier, job.build / f"report.unclaimed-{time.time_ns()}.json")
    plan = json.loads((job.build / "plan.json").read_text(encoding="utf-8"))
    env = job_env(job_python(plan))
    record = {"point": job.point, "repeat": job.repeat, "fingerprint": job.fingerprint[:16], "state": "running",
              "log": relative(log), "host": socket.gethostname(), "started": time.time()}
    read_end, write_end = os.pipe()  # the write end stays here: its closing tells the watchdog we are gone
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-I", str(WATCHDOG), str(read_end), str(here / "status.json"),
                                     *local_command(job.build)], cwd=project.root(), env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    pass_fds=(read_end,))
            os.close(read_end)
            record.update(pid=proc.pid, pid_start=status.process_start(proc.pid))
            try:
                status.write(here / "status.json", record)
                returncode = proc.wait()
            except KeyboardInterrupt:
                _stop(proc)
                _finish(job, here, record, proc.returncode, cancelled=True)
                raise
    finally:
        os.close(write_end)
    return _finish(job, here, record, returncode)


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_AFTER_S), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _finish(job: Job, here: Path, record: dict, returncode: int | None, cancelled: bool = False) -> dict:
    report = job.build / "report.json"
    if report.exists():
        os.replace(report, here / "report.json")
    returncode = -signal.SIGKILL if returncode is None else returncode
    sig = status.signal_name(returncode)
    record.update(state="ended", ended=time.time(), signal=sig, cancelled=cancelled,
                  exit_code=128 + -returncode if returncode < 0 else returncode)
    status.write(here / "status.json", record)
    try:
        log = inputs.log_tail(here / "run.log", here / "status.json")
    except inputs.InputError:
        log = ""  # the run replaced its own log with something else: the exit code still says how it ended
    state, error = status.classify(record, status.read_json(here / "report.json"), log)
    return {"point": job.point, "repeat": job.repeat, "status": state, "error": error, "log": record["log"]}
