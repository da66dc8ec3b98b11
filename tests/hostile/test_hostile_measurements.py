"""Issue 42's bounded readers, for what `calibrate` and `diagnose` read: run reports, plans, results files,
profiler traces, calibration documents and launches.  Each hostile file gets one located line and exit 1,
never a traceback, never a hang on a FIFO, never a read past the limit (compiler/bounded.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from moeforge.compiler import bounded

PLAN = {"schema": "moeforge/plan/v1", "platform": {"name": "cpu"}}


def run_dir(tmp_path: Path, report: bytes | str | None = None) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "plan.json").write_text(json.dumps(PLAN))
    if report is not None:
        (d / "report.json").write_bytes(report if isinstance(report, bytes) else report.encode())
    return d


HOSTILE_REPORTS = {
    "not UTF-8": (b'{"steps": [], "x": "\xff"}', "not valid UTF-8"),
    "nested 5000 deep": ("[" * 5000 + "]" * 5000, "nested deeper than"),
    "a 5000-digit integer": ('{"steps": [], "n": ' + "9" * 5000 + "}", "digits"),
    "NaN": ('{"steps": [], "n": NaN}', "NaN is not a number JSON allows"),
    "cut short": ('{"steps": [', "not a readable run report"),
}


@pytest.mark.parametrize("case", list(HOSTILE_REPORTS))
@pytest.mark.parametrize("command", ["calibrate", "diagnose"])
def test_a_hostile_report_is_one_located_line(sandbox, moeforge_cli, tmp_path, case, command):
    body, words = HOSTILE_REPORTS[case]
    d = run_dir(tmp_path, body)
    proc = moeforge_cli(sandbox, command, str(d / "report.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert str(d / "report.json") in line and words in line, line
    assert len(line.splitlines()) == 1, line


def test_a_fifo_is_refused_not_waited_on(sandbox, moeforge_cli, tmp_path):
    d = run_dir(tmp_path)
    os.mkfifo(d / "report.json")  # nobody writes: an open for reading without O_NONBLOCK would hang
    proc = moeforge_cli(sandbox, "diagnose", str(d / "report.json"), timeout=60)
    assert proc.returncode == 1 and "not a regular file" in proc.stderr, proc.stderr


def test_a_report_past_the_limit_is_not_read(sandbox, moeforge_cli, tmp_path):
    d = run_dir(tmp_path)
    with open(d / "report.json", "wb") as fh:  # sparse: no disk, but a reader without a bound would read it all
        fh.truncate(bounded.LIMITS["report"] + 1)
    proc = moeforge_cli(sandbox, "calibrate", str(d / "report.json"))
    assert proc.returncode == 1 and "larger than" in proc.stderr, proc.stderr


def test_a_trace_that_is_not_json_names_the_trace(sandbox, moeforge_cli, tmp_path):
    from moeforge.compiler.diagnose import trace

    bad = tmp_path / "rank0.trace.json"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(trace.TraceError, match=r"rank0\.trace\.json(:\d+:\d+)?: not a readable Chrome trace"):
        trace.split(bad)


def test_a_calibration_whose_alias_refers_to_itself_is_one_line(tmp_path):
    from moeforge.compiler.estimate import calibration

    doc = tmp_path / "cpu.calibration.yaml"
    doc.write_text("schema: moeforge/calibration/v1\nplatform: cpu\nloop: &a [*a]\n")
    with pytest.raises(calibration.CalibrationError) as err:
        calibration.load(doc, "cpu")
    assert str(doc) in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_launch_past_the_limit_is_not_imported(sandbox, moeforge_cli, tmp_path):
    log = tmp_path / "train.log"
    log.write_text(" [2026-11-28 10:00:00] iteration        2/      10 | elapsed time per iteration (ms): 100.0 |\n")
    launch = tmp_path / "launch.sh"
    with open(launch, "wb") as fh:
        fh.truncate(bounded.LIMITS["launch"] + 1)
    proc = moeforge_cli(sandbox, "calibrate", "--log", str(log), str(launch))
    assert proc.returncode == 1 and str(launch) in proc.stderr and "larger than" in proc.stderr, proc.stderr
