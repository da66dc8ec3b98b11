"""`moeforge results` on forged and hostile build directories (issue 46: families 3 to 8 for results).

Every file results reads that moeforge did not write in this process (sweep.json, status.json, report.json,
plan.json, a run's log) is forged many ways: each outcome is an exit code of 0, 1 or 2 with no traceback and
no internal error; a refusal is one line naming the file and the key; a success writes a valid results.json
with finite numbers only and a CSV without formulas (resultslib.assert_clean). Readers that could block or
read without end (a FIFO, /dev/zero, a huge log, repeats: 1e9) are run as processes with a deadline.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import resultslib  # noqa: E402

LONG = os.environ.get("MOEFORGE_FUZZ") == "long"
N = None if LONG else 60  # forged variants per file in the normal suite; all of them in `make fuzz`


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("results") / "proj"
    top = resultslib.make(root)
    return root, top


@pytest.fixture
def fresh(built, tmp_path):
    """A private copy of the built project (a test may break any file in it), without the results another test
    may have written into the shared one: a test that asserts none were written must not find those."""
    root = tmp_path / "proj"
    shutil.copytree(built[0], root, symlinks=True, ignore=shutil.ignore_patterns("results.*"))
    return root, root / "build" / "sweeps" / "s"


def test_the_untouched_directory_gives_results(built):
    root, top = built
    rc, out, err = resultslib.results(root, top, "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [p["status"] for p in doc["points"]] == ["ok", "failed"]
    assert doc["points"][1]["error"] == "exit 1: error: boom"


@pytest.mark.parametrize("name,seed", [("sweep.json", 1), ("p00/runs/1/status.json", 2),
                                       ("p00/runs/1/report.json", 3), ("p01/runs/1/status.json", 4)])
def test_forged_files_give_a_located_error_or_clean_results(built, name, seed):
    root, top = built
    path = top / name
    original = path.read_text()
    located = 0
    try:
        for what, doc in resultslib.variants(json.loads(original), N, seed):
            path.write_text(json.dumps(doc))
            try:
                rc, out, err = resultslib.results(root, top)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {what}: {exc}") from None
            if rc:
                assert path.name in err, (what, err)
                located += 1
    finally:
        path.write_text(original)
    assert located  # a forged file is refused at least some of the time: the test reaches the checks


def test_forged_plan_is_refused_with_its_key(fresh):
    root, top = fresh
    plan = top / "p00" / "plan.json"
    doc = json.loads(plan.read_text())
    for what, forged in resultslib.variants({"layout": doc["layout"], "training": doc["training"]}, 30, 5):
        plan.write_text(json.dumps({**doc, **forged} if isinstance(forged, dict) else forged))
        rc, out, err = resultslib.results(root, top)
        assert rc == 0 or "plan.json" in err, (what, err)


def _run(root: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", "--root", str(root), *argv], cwd=root,
                          env=env, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "internal error" not in out, out[-2000:]
    return proc


def _set_status(top: Path, point: str, **fields) -> None:
    path = top / point / "runs" / "1" / "status.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def test_a_fifo_log_is_refused_not_waited_on(fresh):
    root, top = fresh
    log = top / "p01" / "runs" / "1" / "run.log"
    log.unlink()
    os.mkfifo(log)
    proc = _run(root, "results", str(top), "--no-plot", timeout=60)
    assert proc.returncode == 2 and "run.log" in proc.stderr and "not a regular file" in proc.stderr, proc.stderr


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd"])
def test_a_log_outside_the_sweep_is_never_read(fresh, target):
    """A forged status.json naming /dev/zero would read until memory ran out; naming any file would copy its
    last line into results.json and the HTML page. Directly, or through a link planted in the sweep."""
    root, top = fresh
    _set_status(top, "p01", log=target)
    proc = _run(root, "results", str(top), "--no-plot")
    assert proc.returncode == 2 and "outside the sweep's directory" in proc.stderr and "status.json" in proc.stderr
    link = top / "p01" / "runs" / "1" / "run.log"
    link.unlink()
    link.symlink_to(target)
    _set_status(top, "p01", log=str(link))
    proc = _run(root, "results", str(top), "--no-plot")
    assert proc.returncode == 2 and "outside the sweep's directory" in proc.stderr
    assert not (top / "results.json").exists()


def test_a_huge_log_is_read_by_its_tail(fresh):
    root, top = fresh
    log = top / "p01" / "runs" / "1" / "run.log"
    with open(log, "wb") as fh:  # 8 GiB without a newline, sparse: reading it whole would not end in time
        fh.truncate(8 << 30)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\nmoeforge.runtime.train[rank 0]: error: the end\n")
    proc = _run(root, "results", str(top), "--no-plot", "--format", "json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["points"][1]["error"] == "exit 1: error: the end"


def test_a_billion_repeats_is_refused(fresh):
    root, top = fresh
    path = top / "sweep.json"
    doc = json.loads(path.read_text())
    doc["sweep"]["repeats"] = 1_000_000_000
    path.write_text(json.dumps(doc))
    proc = _run(root, "results", str(top), "--no-plot", timeout=30)
    assert proc.returncode == 2 and "sweep.json: sweep.repeats:" in proc.stderr, proc.stderr


@pytest.mark.parametrize("started,ended", [(-1e308, 1e308), (1e308, 1e308), (100.0, 50.0)])
def test_impossible_times_are_refused(fresh, started, ended):
    root, top = fresh
    _set_status(top, "p00", started=started, ended=ended)
    rc, out, err = resultslib.results(root, top)
    assert rc == 2 and "status.json" in err and ("started" in err or "ended" in err), err


@pytest.mark.parametrize("text,key", [('{"time_s": -0.5}', "steps.1.time_s"), ('{"time_s": 0}', "steps.1.time_s"),
                                      ('{"time_s": 1e400}', "too large for a 64-bit float"),
                                      ('{"time_s": NaN}', "NaN is not a number")])
def test_negative_or_non_finite_step_times_are_refused(fresh, text, key):
    root, top = fresh
    path = top / "p00" / "runs" / "1" / "report.json"
    doc = json.loads(path.read_text())
    doc["steps"][1] = {"step": 2}
    path.write_text(json.dumps(doc).replace('{"step": 2}', text))
    rc, out, err = resultslib.results(root, top)
    assert rc == 2 and "report.json" in err and key in err, err


def test_formulas_and_escapes_from_a_log_and_a_report_stay_text(fresh):
    root, top = fresh
    log = top / "p01" / "runs" / "1" / "run.log"
    log.write_text('step 1\nmoeforge.runtime.train[rank 0]: out of memory: =HYPERLINK("http://evil","x")\x1b]0;t\x07\n')
    report = top / "p00" / "runs" / "1" / "report.json"
    doc = json.loads(report.read_text())
    doc["peak_memory_source"] = "=cmd|' /C calc'!A0\x1b[2J\n::error::forged"
    report.write_text(json.dumps(doc))
    for fmt in ("table", "csv", "json"):
        rc, out, err = resultslib.results(root, top, "--format", fmt)  # assert_clean: no escapes, no formulas
        assert rc == 0, err
        if fmt == "table":
            assert "\n::error" not in out and "\\x1b" in out
    rows = (top / "results.csv").read_text()
    assert "'=HYPERLINK" in rows and "'=cmd|" in rows


def test_a_bad_calibration_is_an_error_not_an_internal_one(fresh):
    root, top = fresh
    platforms = root / "recipes" / "platforms"
    platforms.mkdir(parents=True)
    (platforms / "cpu.calibration.yaml").write_text("schema: moeforge/calibration/v1\nplatform: [cpu\n")
    for argv, prog in ((("results", str(top), "--no-plot"), "results"), (("sweep", "check", "s"), "sweep check")):
        rc, out, err = resultslib.cli(root, *argv)
        assert "internal error" not in out + err and "Traceback" not in out + err
        assert rc == 1 and err.startswith(f"moeforge {prog}: error: ") and "cpu.calibration.yaml" in err, err
