"""One run of a point: its record, `<point>/runs/<repeat>/status.json`, and how it ended.

The record is written when the run starts (state running) and again when it ends (state ended, with the
exit code), by the local runner or by the Slurm array task itself (templates/sweep.sbatch.j2), atomically;
report.json moves next to it. How a run ended is read from the exit code, the report, the runtime's one
error line in the log (runtime/errors.py: `moeforge.runtime.train[rank N]: <kind>: <message>`) and, on Slurm, the
job state: a run that died before writing report.json is a failed run, never a missing one.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
from pathlib import Path

from moeforge.compiler.bounded import LIMITS, Unreadable
from moeforge.compiler.bounded import read_json as bounded_json
from moeforge.compiler.sweep import inputs

# the runtime's exit codes (runtime/errors.py; the compiler never imports the runtime: a test compares them)
EXIT_OUT_OF_MEMORY = 9
from moeforge.compiler.files import write_file_atomically  # noqa: E402
from moeforge.compiler.targets.emit import EXIT_SAVED_ON_SIGNAL  # noqa: E402  (75: saved on a signal)

FINAL = ("ok", "failed", "cancelled", "oom", "preempted", "timeout")
STATUSES = (*FINAL, "running", "pending", "refused", "duplicate")
SLURM_STATES = {"OUT_OF_MEMORY": "oom", "TIMEOUT": "timeout", "PREEMPTED": "preempted", "CANCELLED": "cancelled",
                "DEADLINE": "timeout", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "FAILED": "failed"}
CANCEL_SIGNALS = {"SIGINT", "SIGTERM", "SIGHUP"}
RUNTIME_ERROR = re.compile(r"^(?:moeforge\.)?runtime\.(?:train|megatron)\[rank \d+\]: "
                           r"(?P<kind>[^:]+): (?P<message>.*)$", re.MULTILINE)


def run_dir(point_dir: Path, repeat: int) -> Path:
    """Where a repeat's record and log live: <point>/runs/<repeat>, one place for launcher and results."""
    return point_dir / "runs" / str(repeat)


def write(path: Path, record: dict) -> None:
    """status.json (or any small JSON) written atomically."""
    write_file_atomically(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> dict | None:
    """A run's JSON (status.json, report.json) through the compiler's bounded reader: None when there is
    none or it is not a JSON object within the limits (a run killed mid-write, a corrupted file)."""
    try:
        data = bounded_json(path, LIMITS["report"])
    except Unreadable:
        return None
    return data if isinstance(data, dict) else None


def signal_name(returncode: int) -> str | None:
    """A subprocess return code of -N (killed by signal N), or a shell's 128+N: the signal's name."""
    n = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else None
    try:
        return signal.Signals(n).name if n else None
    except ValueError:
        return None


def runtime_error(log: str) -> tuple[str | None, str | None]:
    """(kind, message) of the runtime's error line in a run's log, else (None, the last line)."""
    m = RUNTIME_ERROR.search(log)
    if m:
        return m.group("kind"), m.group("message")[:400]
    lines = [x for x in log.splitlines() if x.strip()]
    return None, (lines[-1][:400] if lines else None)


def classify(record: dict, report: dict | None, log: str = "") -> tuple[str, str | None]:
    """(status, error) of one run: one of FINAL, or running."""
    if record.get("state") != "ended" and not record.get("slurm_state"):
        return "running", None
    code, sig = record.get("exit_code"), record.get("signal")
    kind, message = runtime_error(log)
    slurm = SLURM_STATES.get(record.get("slurm_state") or "")
    if (report or {}).get("status") == "preempted" or code == EXIT_SAVED_ON_SIGNAL or slurm == "preempted":
        return "preempted", "saved a checkpoint on a signal and stopped: the same launch resumes from it"
    if code == 0 and report is not None and report.get("status", "ok") == "ok" and slurm is None:
        return "ok", None
    if slurm in ("oom", "timeout", "cancelled"):
        return slurm, message or f"Slurm: {record['slurm_state']}"
    if kind == "out of memory" or code == EXIT_OUT_OF_MEMORY:
        return "oom", message
    if sig in CANCEL_SIGNALS or record.get("cancelled"):
        return "cancelled", f"stopped by {sig or 'a cancel'}"
    if code == 0:
        return "failed", "exited 0 but wrote no report.json"
    why = f"{kind}: {message}" if kind else message
    return "failed", (f"killed by {sig}" if sig else f"exit {code}") + (f": {why}" if why else "")


def point_status(runs: list[str], repeats: int) -> str:
    """A point's status from its runs' (one per repeat done or begun): ok only when every repeat is."""
    if len(runs) == repeats and all(s == "ok" for s in runs):
        return "ok"
    for s in ("running", "failed", "oom", "timeout", "cancelled", "preempted"):
        if s in runs:
            return s
    return "pending"


def runs(point_dir: Path, repeats: int, fingerprint: str | None, log_of=None) -> list[dict]:
    """Each begun repeat of a point as results.json records it: repeat, status, error, exit code, signal,
    seconds, log, report (paths as found), record. Runs of another launch fingerprint (the sweep or the
    recipe changed since) do not count. log_of(record) -> the log path when the record names none. Every
    file is read as a user's input (compiler/sweep/inputs.py): InputError, located, on anything wrong."""
    out = []
    for repeat in range(1, repeats + 1):
        here = run_dir(point_dir, repeat)
        record = inputs.read(here / "status.json", "status.json", optional=True)
        if record is None or (fingerprint and record.get("fingerprint") not in (None, fingerprint[:16])):
            continue
        report_path = here / "report.json"
        report = inputs.read(report_path, "report.json", optional=True)
        if report is None and record.get("target") == "k8s" and record.get("state") == "running":
            report_path = point_dir / "report.json"  # a pod wrote it into the build directory itself
            report = inputs.read(report_path, "report.json", optional=True)
            if report is not None:
                record = {**record, "state": "ended", "exit_code": 0}
        log = record.get("log") or (log_of(record) if log_of else None)
        text = inputs.log_tail(inputs.inside(log, point_dir.parent, here / "status.json"), here / "status.json") \
            if log else ""
        state, error = classify(record, report, text)
        started, ended = record.get("started"), record.get("ended")
        if started is not None and ended is not None and ended < started:
            raise inputs.InputError(f"{here / 'status.json'}: ended: {ended} is before started ({started}): "
                                    f"{inputs.HOW['status.json']}")
        out.append({"repeat": repeat, "status": state, "error": error, "exit_code": record.get("exit_code"),
                    "signal": record.get("signal"), "slurm_state": record.get("slurm_state"),
                    "job_id": record.get("job_id"), "log": log,
                    "report": str(report_path) if report is not None else None,
                    "seconds": (ended - started) if started is not None and ended is not None else None,
                    "_report": report})
    return out


def process_start(pid: int) -> str | None:
    """When process `pid` started (Linux: /proc/PID/stat's start time, in clock ticks since boot), so a
    recorded pid that the kernel has since given to another process is not taken for the run; None when
    unknown (no such process, or no /proc)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            stat_ = fh.read(4096).decode("ascii", "replace")
        return stat_.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError, ValueError):
        return None


def alive(record: dict) -> bool | None:
    """Whether the local run a `running` record names is still going: True, False, or None for a record
    that names no local process (a Slurm task, a pod). A record from another host counts as alive: it
    cannot be checked from here."""
    pid = record.get("pid")
    if record.get("job_id") is not None or record.get("target") not in (None, "local") or \
            not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2 ** 22:
        return None
    if record.get("host") not in (None, socket.gethostname()):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone's process: the start time says whether it is ours
    started = record.get("pid_start")
    return started is None or process_start(pid) in (None, started)


class RunAlive(Exception):
    """A point's recorded run is still going: launching it again would train twice in one build directory."""


def settle(point_dir: Path, repeats: int) -> None:
    """Before a launch: refuse (RunAlive) when a run of the point is still going; a local run whose launcher
    died (its record says running, its process is gone) is recorded as it ended: ok when its report.json
    is complete (moved next to its status.json), else cancelled. Nothing is ever deleted."""
    for repeat in range(1, repeats + 1):
        here = run_dir(point_dir, repeat)
        record = inputs.read(here / "status.json", "status.json", optional=True)
        if record is None or record.get("state") != "running":
            continue
        state = alive(record)
        if state is None:
            continue
        if state:
            raise RunAlive(f"{here / 'status.json'}: repeat {repeat} of {point_dir.name} is still running (pid "
                           f"{record.get('pid')} on {record.get('host')}): wait for it to end, or stop it "
                           f"(kill -TERM -{record.get('pid')}), then launch again")
        report = inputs.read(here / "report.json", "report.json", optional=True)
        if report is None and read_json(point_dir / "report.json") is not None:
            os.replace(point_dir / "report.json", here / "report.json")
            report = inputs.read(here / "report.json", "report.json", optional=True)
        complete = report is not None and report.get("status", "ok") == "ok" and isinstance(report.get("steps"), list)
        record.update(state="ended", recovered="the launcher ended before recording how the run ended")
        if complete:
            record.update(exit_code=0, signal=None)
        else:
            record.update(cancelled=True, exit_code=record.get("exit_code"), signal=record.get("signal"))
        write(here / "status.json", record)


def todo(point_dir: Path, repeats: int, fingerprint: str | None, resume: bool) -> list[int]:
    """The repeats to run: all of them, or with resume those without a successful run."""
    if not resume:
        return list(range(1, repeats + 1))
    done = {r["repeat"] for r in runs(point_dir, repeats, fingerprint) if r["status"] == "ok"}
    return [r for r in range(1, repeats + 1) if r not in done]
