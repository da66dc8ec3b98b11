"""A killed `sweep launch` leaves no training behind, and `--resume` never deletes a result nor starts a point
whose run is still going (issue 46, family 2).

The launcher runs as a real process on a one-point sweep of tiny-moe/cpu; the point's command is a stand-in
(a shell that records its pid and a grandchild's, then sleeps), because what is tested is process handling,
not training. The stand-in is swapped in by a wrapper that replaces local.local_command before the CLI runs.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

WRAPPER = """\
import sys
from moeforge.compiler.sweep import local
STAND_IN = sys.argv[1]
local.local_command = lambda build: ["sh", "-c", STAND_IN, "stand-in", str(build)]
from moeforge.compiler.cli import main
sys.exit(main(sys.argv[2:]))
"""
# records its own pid and a grandchild's, then waits: a training that would run for minutes
LONG = 'echo $$ > "$1/stand-in.pid"; sleep 300 & echo $! > "$1/grandchild.pid"; wait'
# a run that finishes at once with a complete report
QUICK = ('printf \'{"status": "ok", "world_size": 2, "steps": [{"step": 1, "time_s": 0.5}, '
         '{"step": 2, "time_s": 0.4}]}\' > "$1/report.json"')


@pytest.fixture
def proj(tmp_path):
    root = tmp_path / "proj"
    (root / "recipes" / "sweeps").mkdir(parents=True)
    (root / "moeforge.toml").write_text("[moeforge]\nversion = 1\n")
    (root / "recipes" / "sweeps" / "one.yaml").write_text(textwrap.dedent("""\
        schema: moeforge/sweep/v1
        name: one
        recipe: builtin:tiny-moe/cpu
        axes:
          training.micro_batch_size: [1]
        """))
    (root / "wrapper.py").write_text(WRAPPER)
    return root


def launcher(root: Path, stand_in: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, str(root / "wrapper.py"), stand_in, "--root", str(root), "sweep",
                             "launch", "one", *args], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_launcher(root: Path, stand_in: str, *args: str) -> tuple[int, str]:
    proc = launcher(root, stand_in, *args)
    out, err = proc.communicate(timeout=120)
    text = out + err
    assert "Traceback" not in text and "internal error" not in text, text
    return proc.returncode, text


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie is dead, only not reaped
    except FileNotFoundError:
        return True


def wait_for(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_a_killed_launcher_leaves_no_run_behind(proj, sig):
    point = proj / "build" / "sweeps" / "one" / "p00"
    proc = launcher(proj, LONG)
    wait_for(lambda: (point / "grandchild.pid").exists() and (point / "grandchild.pid").read_text().strip(),
             "the stand-in to start")
    pids = [int((point / name).read_text()) for name in ("stand-in.pid", "grandchild.pid")]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in out + err
    if sig != signal.SIGKILL:
        assert proc.returncode == 128 + sig, out + err
        assert "--resume" in err
    wait_for(lambda: all(gone(p) for p in pids), "the run's processes to end", timeout=40)
    record = json.loads((point / "runs" / "1" / "status.json").read_text())
    assert record["state"] == "ended" and record["cancelled"] is True, record
    # and --resume runs the point again, now that nothing of it is left running
    rc, text = run_launcher(proj, QUICK, "--resume")
    assert rc == 0, text
    assert json.loads((point / "runs" / "1" / "status.json").read_text())["exit_code"] == 0


def test_resume_refuses_a_point_whose_run_is_alive(proj):
    rc, text = run_launcher(proj, QUICK)
    assert rc == 0, text
    here = proj / "build" / "sweeps" / "one" / "p00" / "runs" / "1"
    alive = subprocess.Popen(["sleep", "60"])
    try:
        record = json.loads((here / "status.json").read_text())
        start = Path(f"/proc/{alive.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        record.update(state="running", pid=alive.pid, pid_start=start, host=socket.gethostname())
        for key in ("ended", "exit_code", "signal"):
            record.pop(key, None)
        (here / "status.json").write_text(json.dumps(record))
        report = (here / "report.json").read_text()
        for args in (("--resume",), ()):
            rc, text = run_launcher(proj, LONG, *args)
            assert rc == 2 and "still running" in text and f"pid {alive.pid}" in text, text
            assert not (proj / "build" / "sweeps" / "one" / "p00" / "stand-in.pid").exists()  # nothing started
            assert (here / "report.json").read_text() == report
        # the same pid with another start time is another process: the run is dead, and resumed
        record["pid_start"] = "1"
        (here / "status.json").write_text(json.dumps(record))
        rc, text = run_launcher(proj, QUICK, "--resume")
        assert rc == 0, text
    finally:
        alive.kill()
        alive.wait()


def test_resume_keeps_a_finished_report_whose_launcher_died(proj):
    """The run wrote a complete report.json, then the launcher died before recording it: resume keeps it as
    the finished run (moved next to its status.json) and runs nothing."""
    rc, text = run_launcher(proj, QUICK)
    assert rc == 0, text
    point = proj / "build" / "sweeps" / "one" / "p00"
    here = point / "runs" / "1"
    dead = subprocess.Popen(["true"])
    dead.wait()
    record = json.loads((here / "status.json").read_text())
    record.update(state="running", pid=dead.pid, host=socket.gethostname())
    for key in ("ended", "exit_code", "signal"):
        record.pop(key, None)
    (here / "status.json").write_text(json.dumps(record))
    os.replace(here / "report.json", point / "report.json")  # where the run writes it
    report = (point / "report.json").read_text()
    rc, text = run_launcher(proj, LONG, "--resume")
    assert rc == 0 and "already has a successful result" in text, text
    assert (here / "report.json").read_text() == report
    assert not (point / "stand-in.pid").exists()
    assert json.loads((here / "status.json").read_text())["exit_code"] == 0


def test_a_new_run_keeps_an_unclaimed_report(proj):
    """A report.json in the build directory that no record claims is moved aside, never deleted."""
    rc, text = run_launcher(proj, QUICK)
    point = proj / "build" / "sweeps" / "one" / "p00"
    (point / "report.json").write_text('{"status": "ok", "steps": []}')
    rc, text = run_launcher(proj, QUICK)
    assert rc == 0, text
    assert [p.read_text() for p in point.glob("report.unclaimed-*.json")] == ['{"status": "ok", "steps": []}']


def test_a_sweep_outside_a_terminal_prints_a_line_per_finished_run(proj):
    rc, text = run_launcher(proj, QUICK)
    assert rc == 0, text
    assert "sweep: p00 repeat 1: ok (1/1 ended, 0 not ok)" in text
