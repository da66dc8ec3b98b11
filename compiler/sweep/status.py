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
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.bounded import LIMITS, Unreadable
from moeforge.compiler.bounded import read_json as bounded_json

# the runtime's exit codes (runtime/errors.py; the compiler never imports the runtime: a test compares them)
EXIT_OUT_OF_MEMORY = 9
from moeforge.compiler.files import write_file_atomically  # noqa: E402
from moeforge.compiler.targets.emit import EXIT_SAVED_ON_SIGNAL  # noqa: E402  (75: saved on a signal)

FINAL = ("ok", "failed", "cancelled", "oom", "preempted", "timeout")
STATUSES = (*FINAL, "running", "pending", "refused", "duplicate")
SLURM_STATES = {"OUT_OF_MEMORY": "oom", "TIMEOUT": "timeout", "PREEMPTED": "preempted", "CANCELLED": "cancelled",
                "DEADLINE": "timeout", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "FAILED": "failed"}
CANCEL_SIGNALS = {"SIGINT", "SIGTERM", "SIGHUP"}
RUNTIME_ERROR = re.compile(r"^(?:moeforge\.)?runtime\.(?:train|megatron)\[rank \d+\]: (?P<kind>[^:]+): (?P<message>.*)$", re.MULTILINE)


def run_dir(point_dir: Path, repeat: int) -> Path:
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
    recipe changed since) do not count. log_of(record) -> the log path when the record names none."""
    out = []
    for repeat in range(1, repeats + 1):
        here = run_dir(point_dir, repeat)
        record = read_json(here / "status.json")
        if record is None or (fingerprint and record.get("fingerprint") not in (None, fingerprint[:16])):
            continue
        report_path = here / "report.json"
        report = read_json(report_path)
        if report is None and record.get("target") == "k8s" and record.get("state") == "running":
            report_path = point_dir / "report.json"  # a pod wrote it into the build directory itself
            report = read_json(report_path)
            if report is not None:
                record = {**record, "state": "ended", "exit_code": 0}
        log = record.get("log") or (log_of(record) if log_of else None)
        text = read_text(log)
        state, error = classify(record, report, text)
        started, ended = record.get("started"), record.get("ended")
        out.append({"repeat": repeat, "status": state, "error": error, "exit_code": record.get("exit_code"),
                    "signal": record.get("signal"), "slurm_state": record.get("slurm_state"),
                    "job_id": record.get("job_id"), "log": log,
                    "report": str(report_path) if report is not None else None,
                    "seconds": (ended - started) if isinstance(started, (int, float)) and
                    isinstance(ended, (int, float)) else None, "_report": report})
    return out


def read_text(path) -> str:
    if not path:
        return ""
    if not os.path.isabs(path):
        path = project.root() / path
    try:
        with open(path, "rb") as fh:  # the end is where a run says why it stopped
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 200_000))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def todo(point_dir: Path, repeats: int, fingerprint: str | None, resume: bool) -> list[int]:
    """The repeats to run: all of them, or with resume those without a successful run."""
    if not resume:
        return list(range(1, repeats + 1))
    done = {r["repeat"] for r in runs(point_dir, repeats, fingerprint) if r["status"] == "ok"}
    return [r for r in range(1, repeats + 1) if r not in done]
