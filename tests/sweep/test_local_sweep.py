"""recipes/sweeps/tiny-overlap.yaml run locally, once for the whole module: 9 points (EP overlap x dispatcher x
micro-batch size, and one explicit point), 2 refused by the rules, 1 collapsed into its twin, 6 trained on
2 CPU ranks. One point is killed mid-run; `--resume` then runs it alone. The results table, its schema, the
plots (PNG series, the HTML page in headless Chromium with a screenshot) are checked on that one sweep."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
LAUNCHED = ["p00", "p01", "p04", "p05", "p06", "p07"]
KILLED = "p04"


def moeforge(*argv, out: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "moeforge.compiler", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1200, **kw)


def _kill_when_running(top: Path, point: str, proc: subprocess.Popen) -> int:
    """SIGKILL the point's processes once its run has started (status.json names the pid): the run dies
    before it can write report.json."""
    path = top / point / "runs" / "1" / "status.json"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:
        record = json.loads(path.read_text()) if path.exists() else {}
        if record.get("state") == "running":
            os.killpg(record["pid"], signal.SIGKILL)
            return record["pid"]
        time.sleep(0.05)
    pytest.fail(f"{point} never started")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    top = out / "sweeps" / "tiny-overlap"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-m", "moeforge.compiler", "sweep", "launch", "tiny-overlap", "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _kill_when_running(top, KILLED, proc)
    first_out, first_err = proc.communicate(timeout=1200)
    first = {"rc": proc.returncode, "out": first_out, "err": first_err,
             "results": moeforge("results", str(top), "--format", "json", out=out),
             "mtimes": {p: (top / p / "runs" / "1" / "status.json").stat().st_mtime_ns for p in LAUNCHED}}
    resumed = moeforge("sweep", "launch", "tiny-overlap", "--out", str(out), "--resume", out=out)
    final = moeforge("results", str(top), "--baseline", "p00", out=out)
    return {"out": out, "top": top, "first": first, "resumed": resumed, "final": final}


def test_the_sweep_ran_every_launchable_point_and_refused_or_collapsed_the_rest(sweep):
    first, top = sweep["first"], sweep["top"]
    assert first["rc"] == 1, first["out"][-3000:] + first["err"][-3000:]  # the killed point
    assert "9 point(s) of tiny-moe/cpu: 6 to run, 2 refused, 1 duplicate(s)" in first["out"]
    assert "p02 refused, never launched:" in first["out"] and "error[EP_OVERLAP_NEEDS_A2A_OR_FLEX]" in first["out"]
    assert "p08 = p05: moe.overlap.delay_wgrad" in first["out"] and "forces false" in first["out"]
    assert sorted(p.name for p in top.iterdir() if p.is_dir()) == LAUNCHED  # refused and collapsed: no build
    assert "sweep tiny-overlap: 6 run(s): 5 ok, 1 not" in first["out"]


def test_no_progress_bar_but_a_line_per_run_when_not_on_a_terminal(sweep):
    assert "it/s" not in sweep["first"]["err"] and "point/s" not in sweep["first"]["err"]
    assert "done " not in sweep["first"]["err"]
    assert "sweep: p00 repeat 1: ok (1/6 ended, 0 not ok)" in sweep["first"]["err"]  # a line per run


def test_the_killed_point_is_failed_with_its_exit_code_and_log(sweep):
    doc = json.loads(sweep["first"]["results"].stdout)
    p = {x["id"]: x for x in doc["points"]}[KILLED]
    [run] = p["runs"]
    assert p["status"] == "failed" and p["measured"] is None and run["report"] is None
    assert run["exit_code"] == 137 and run["signal"] == "SIGKILL" and run["error"].startswith("killed by SIGKILL")
    assert run["log"].endswith(f"{KILLED}/runs/1/run.log") and Path(run["log"]).exists()
    assert f"  {KILLED} repeat 1: failed: killed by SIGKILL" in sweep["first"]["out"]


def test_resume_runs_the_failed_point_alone(sweep):
    resumed, top = sweep["resumed"], sweep["top"]
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "sweep tiny-overlap: 1 run(s): 1 ok, 0 not" in resumed.stdout
    after = {p: (top / p / "runs" / "1" / "status.json").stat().st_mtime_ns for p in LAUNCHED}
    changed = [p for p in LAUNCHED if after[p] != sweep["first"]["mtimes"][p]]
    assert changed == [KILLED]


def test_the_results_table_has_every_point_with_measured_values(sweep):
    doc = json.loads((sweep["top"] / "results.json").read_text())
    points = {p["id"]: p for p in doc["points"]}
    assert list(points) == [f"p{i:02d}" for i in range(9)]
    assert {k: p["status"] for k, p in points.items()} == {
        "p00": "ok", "p01": "ok", "p02": "refused", "p03": "refused", "p04": "ok", "p05": "ok", "p06": "ok",
        "p07": "ok", "p08": "duplicate"}
    for pid in LAUNCHED:
        p = points[pid]
        m = p["measured"]
        assert m["step_time_s"]["median"] > 0 and m["step_time_s"]["warmup_steps_skipped"] == 1
        assert m["step_time_s"]["steps_counted"] == 2  # 3 steps, the first left out
        assert m["tokens_per_s_per_gpu"] > 0 and m["model_tflops_per_s_per_gpu"] > 0
        assert len(m["peak_memory_bytes_per_rank"]) == 2 and m["peak_memory_bytes_max"] > 100 * 2 ** 20
        assert p["gpu_hours"] > 0 and p["versions"]["megatron_core"] == "0.16.1"
        assert p["build_dir"].endswith(pid) and Path(p["report"]).name == "report.json"
        assert p["estimate"]["allocated_bytes"] > 0 and p["estimate"]["step_time_s"] is None
        assert p["ratio"]["peak_memory"] is None and p["ratio"]["notes"]  # RSS is not the allocator's peak
        assert p["relative"]["step_time"] > 0
        ep_overlap = p["values"]["moe.overlap.ep_comm"]
        assert p["realised"]["fields"]["overlap_moe_expert_parallel_comm"] is ep_overlap
        assert p["realised"]["schedule"] == ("combined_1f1b" if ep_overlap else "no_pipelining")
        assert p["realised"]["fields"]["moe_token_dispatcher_type"] == p["values"]["moe.dispatcher"]
    assert points["p08"]["duplicate_of"] == "p05" and points["p08"]["collapsed"][0]["why"] == "forced by a rule"
    assert points["p02"]["diagnostics"][0]["code"] == "EP_OVERLAP_NEEDS_A2A_OR_FLEX"
    assert points["p00"]["relative"] == {"step_time": 1.0, "tokens_per_s_per_gpu": 1.0, "peak_memory": 1.0}
    table = sweep["final"].stdout
    assert sweep["final"].returncode == 0 and "vs p00" in table
    assert all(f"\n{pid} " in table for pid in points)


def test_every_results_file_follows_the_results_schema(sweep):
    schema = json.loads((ROOT / "schemas" / "results.v1.json").read_text())
    for doc in (json.loads(sweep["first"]["results"].stdout), json.loads((sweep["top"] / "results.json").read_text())):
        jsonschema.validate(doc, schema)


def test_csv_has_a_row_per_point(sweep):
    import csv

    rows = list(csv.DictReader((sweep["top"] / "results.csv").open()))
    assert [r["id"] for r in rows] == [f"p{i:02d}" for i in range(9)]
    assert rows[0]["value:moe.overlap.ep_comm"] == "true" and float(rows[0]["step_time_median_s"]) > 0


def test_the_png_answers_which_value_won_over_every_point(sweep):
    """Three panels (throughput, steady-state cost, memory) over every point, each tick the knob values (four
    knobs vary: one line each, in the order the axis label names them); on CPU the memory measured is the process's RSS, so no
    estimate is drawn beside it (issue 48)."""
    from moeforge.compiler.sweep import plots

    doc = json.loads((sweep["top"] / "results.json").read_text())
    data = json.loads((sweep["top"] / "results.plot.json").read_text())
    assert data == plots.series(doc)
    fig = plots.figure(doc, data)
    assert len(fig.axes) == 3
    ticks = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
    assert fig.axes[-1].get_xlabel().startswith("ep_comm / dispatcher / micro_batch_size / delay_wgrad")
    assert ticks[0] == "true\nalltoall\n1\n." and ticks[8] == "false\nalltoall\n2\nfalse", ticks
    assert not any(re.fullmatch(r"p\d\d", t) for t in ticks)
    measured = [v for v in data["panels"][0]["series"][0]["values"] if v is not None]
    assert len(measured) == 6
    assert [s["label"] for s in data["panels"][2]["series"]] == ["measured"]  # RSS: no allocator estimate beside it
    assert (sweep["top"] / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _chromium() -> str:
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip("Chromium is not installed and installing it needs root: apt-get install chromium "
                    "(the HTML page of `moeforge results` is NOT checked in a browser)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300"]
    if subprocess.run([*apt, "install", "-y", "--no-install-recommends", "chromium"], env=env,
                      capture_output=True).returncode != 0:
        subprocess.run([*apt, "update"], env=env, capture_output=True)
        done = subprocess.run([*apt, "install", "-y", "--no-install-recommends", "chromium"], env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    return shutil.which("chromium")


def test_the_html_page_opens_in_headless_chromium_without_errors(sweep, tmp_path):
    page = sweep["top"] / "results.html"
    text = page.read_text()
    assert "<script" not in text and " src=" not in text  # self-contained: nothing to run, nothing to fetch
    assert all(link.startswith("#") for link in re.findall(r'href="([^"]*)"', text))
    chromium = _chromium()
    shot = tmp_path / "results.png"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
              f"--user-data-dir={tmp_path / 'profile'}"]
    done = subprocess.run([*common, f"--screenshot={shot}", "--window-size=1400,1400", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
    assert "CONSOLE" not in done.stderr, done.stderr  # no script error, no resource that failed to load
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<svg" in dom and "<table>" in dom and "<pre>" not in dom
    shutil.copy(shot, sweep["out"] / "results-screenshot.png")  # to look at: the page as Chromium drew it
    for pid in (f"p{i:02d}" for i in range(9)):
        assert f">{pid}<" in dom or f">{pid}\n" in dom or f">{pid}" in dom, pid
