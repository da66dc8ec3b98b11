"""The results table from report.json files of both entry points (moeforge.runtime.train and moeforge.runtime.megatron, as
they write them), without training: a run that died before writing one is a failed point, the estimate
stands beside each measured value with its ratio (memory only against the CUDA allocator's peak), and the
local runner tells how a run ended (ok, failed, oom, preempted, cancelled)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from moeforge.compiler.sweep import local, results, status, workflow

ROOT = Path(__file__).resolve().parents[2]
SWEEP = """\
    schema: moeforge/sweep/v1
    name: fake
    recipe: builtin:qwen3-30b-a3b/h100-bf16
    axes:
      training.micro_batch_size: [1, 2]
      moe.overlap.ep_comm: [true, false]
    repeats: 2
    warmup_steps: 2
"""


def train_report(step_s: float, peaks: list[int]) -> dict:
    """What moeforge.runtime.train writes (runtime/train/)."""
    return {"status": "ok", "world_size": 16, "layout": {"tp": 1, "pp": 1, "cp": 1, "ep": 16, "etp": 1, "dp": 16},
            "device": "cuda", "schedule_taken": "combined_1f1b",
            "steps": [{"step": i, "loss": 5.0, "time_s": 99.0 if i <= 2 else step_s} for i in range(1, 7)],
            "peak_memory_bytes_per_rank": peaks, "peak_memory_bytes_max": max(peaks),
            "peak_memory_source": "torch.cuda.max_memory_allocated",
            "realised": {"overlap_moe_expert_parallel_comm": {"plan": True, "realised": True}},
            "versions": {"torch": "2.13.0", "megatron_core": "0.19.2"}}


def megatron_report(step_s: float, peaks: list[int]) -> dict:
    """What moeforge.runtime.megatron writes (runtime/megatron/): iterations resumed from 11, no schedule probe fields."""
    rep = train_report(step_s, peaks)
    rep.update(entrypoint="megatron-lm", steps=[{"step": 10 + i, "loss": 5.0, "grad_norm": 1.0,
                                                 "time_s": 99.0 if i <= 2 else step_s} for i in range(1, 7)],
               megatron_lm_rewrites=[])
    return rep


def _run(top: Path, point: str, repeat: int, report: dict | None, code: int, seconds: float = 60.0,
         log: str = "") -> None:
    here = status.run_dir(top / point, repeat)
    fingerprint = json.loads((top / "sweep.json").read_text())["points"][int(point[1:])]["fingerprint"]
    (here / "run.log").parent.mkdir(parents=True, exist_ok=True)
    (here / "run.log").write_text(log)
    if report is not None:
        (here / "report.json").write_text(json.dumps(report))
    status.write(here / "status.json", {"point": point, "repeat": repeat, "fingerprint": fingerprint[:16],
                                        "state": "ended", "exit_code": code, "started": 1000.0,
                                        "ended": 1000.0 + seconds, "log": str(here / "run.log")})


@pytest.fixture
def fake(proj, write_sweep, cli, capsys):
    """The sweep's builds (print: nothing runs), then runs recorded by hand."""
    write_sweep(proj, "fake", SWEEP)
    assert cli("sweep", "launch", "fake", "--target", "print") == 0
    capsys.readouterr()
    top = proj / "build" / "sweeps" / "fake"
    GiB = 2 ** 30
    _run(top, "p00", 1, train_report(30.0, [60 * GiB, 62 * GiB]), 0)
    _run(top, "p00", 2, train_report(34.0, [61 * GiB, 60 * GiB]), 0)
    _run(top, "p01", 1, megatron_report(20.0, [50 * GiB] * 2), 0)
    _run(top, "p01", 2, megatron_report(22.0, [51 * GiB] * 2), 0)
    _run(top, "p02", 1, None, 1, log="step 1\nruntime.train[rank 3]: out of memory: CUDA out of memory. Tried ...\n")
    _run(top, "p03", 1, None, 1, log="Traceback...\nSegmentation fault\n")  # died before writing report.json
    return top


def test_both_entry_points_measured_beside_the_estimate(fake):
    doc = results.collect(fake)
    results.check(doc)
    p = {x["id"]: x for x in doc["points"]}
    for pid, medians in (("p00", [30.0, 34.0]), ("p01", [20.0, 22.0])):
        m = p[pid]["measured"]
        assert m["step_time_s"] == {"median": 32.0 if pid == "p00" else 21.0, "spread": 4.0 if pid == "p00" else 2.0,
                                    "runs": medians, "min": medians[0], "max": medians[1], "steps_counted": 8,
                                    "warmup_steps_skipped": 2}
        tokens = 1024 * 4096
        assert m["tokens_per_s_per_gpu"] == pytest.approx(tokens / m["step_time_s"]["median"] / 16)
        est = p[pid]["estimate"]
        assert est["step_time_s"] > 0 and est["gpu_hours"] > 0
        assert p[pid]["ratio"]["step_time"] == pytest.approx(m["step_time_s"]["median"] / est["step_time_s"])
        assert p[pid]["ratio"]["peak_memory"] == pytest.approx(m["peak_memory_bytes_max"] / est["allocated_bytes"])
        assert p[pid]["gpu_hours"] == pytest.approx(2 * 60 * 16 / 3600)
    assert p["p00"]["measured"]["peak_memory_bytes_per_rank"] == [61 * 2 ** 30, 62 * 2 ** 30]
    # Megatron-LM's FLOPs count of the plan over the measured step
    assert p["p01"]["realised"]["entrypoint"] == "megatron-lm"
    assert p["p01"]["measured"]["model_tflops_per_s_per_gpu"] == pytest.approx(
        p["p01"]["estimate"]["model_tflops_per_s_per_gpu"] * p["p01"]["estimate"]["step_time_s"] / 21.0)


def test_a_run_without_a_report_is_a_failed_point_not_a_missing_row(fake):
    p = {x["id"]: x for x in results.collect(fake)["points"]}
    assert p["p02"]["status"] == "oom" and p["p02"]["error"] == "CUDA out of memory. Tried ..."
    assert p["p03"]["status"] == "failed" and p["p03"]["error"] == "exit 1: Segmentation fault"
    assert p["p03"]["measured"] is None and p["p03"]["runs"][0]["log"].endswith("p03/runs/1/run.log")


def test_baseline_and_outputs(fake, cli, capsys):
    assert cli("results", str(fake), "--baseline", "p00") == 0
    text = capsys.readouterr().out
    assert "vs p00" in text and "step x1.00" in text and "p02" in text and "oom: CUDA out of memory" in text
    doc = json.loads((fake / "results.json").read_text())
    jsonschema.validate(doc, json.loads((ROOT / "schemas" / "results.v1.json").read_text()))
    p01 = {x["id"]: x for x in doc["points"]}["p01"]
    assert p01["relative"]["step_time"] == pytest.approx(21.0 / 32.0)
    assert cli("results", str(fake), "--baseline", "p1") == 2
    assert "did you mean p01?" in capsys.readouterr().err
    assert cli("results", str(fake), "--baseline", "p02") == 2
    assert "has no measured step time (oom)" in capsys.readouterr().err
    assert cli("results", str(fake.parent)) == 2
    assert "has no sweep.json" in capsys.readouterr().err
    assert cli("results", "fake", "--format", "csv", "--no-plot") == 0  # a sweep's name works too
    csv_text = capsys.readouterr().out
    assert csv_text.splitlines()[0].startswith("id,value:training.micro_batch_size,value:moe.overlap.ep_comm,status")


def test_without_matplotlib_the_table_is_still_written(fake, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_matplotlib(name, *args, **kw):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    written, notes = results.write_all(results.collect(fake), fake)
    assert sorted(p.name for p in written) == ["results.csv", "results.json"]
    assert "pip install 'moeforge[plots]'" in notes[0]


def test_the_runtime_exit_codes_the_sweep_reads_are_the_runtimes():
    text = (ROOT / "runtime" / "errors.py").read_text()
    assert int(re.search(r"^EXIT_OUT_OF_MEMORY = (\d+)", text, re.M).group(1)) == status.EXIT_OUT_OF_MEMORY
    assert int(re.search(r"^EXIT_SAVED_ON_SIGNAL = (\d+)", text, re.M).group(1)) == status.EXIT_SAVED_ON_SIGNAL


SCRIPTS = {
    "ok": 'printf \'{"status": "ok"}\\n\' > "$build/report.json"',
    "failed": 'echo "moeforge.runtime.train[rank 0]: realised configuration differs from the plan: EP" >&2; exit 1',
    "oom": 'echo "moeforge.runtime.train[rank 1]: out of memory: boom" >&2; exit 1',
    "preempted": 'printf \'{"status": "preempted"}\\n\' > "$build/report.json"; exit 75',
    "cancelled": 'kill -TERM $$',
    "no report": "exit 0",
}


@pytest.mark.parametrize("how", list(SCRIPTS))
def test_the_local_runner_records_how_each_run_ended(proj, how):
    build = proj / "build" / "sweeps" / "s" / "p00"
    build.mkdir(parents=True)
    (build / "plan.json").write_text(json.dumps({"platform": {"software": {"megatron_core": "0.16.1"}}}))
    (build / "torchrun.sh").write_text(f'#!/bin/bash\nbuild="$(dirname "$0")"\n{SCRIPTS[how]}\n')
    result = local.run_one(local.Job("p00", build, 1, "f" * 64))
    expected = {"no report": "failed"}.get(how, how)
    assert result["status"] == expected, result
    record = json.loads((build / "runs" / "1" / "status.json").read_text())
    assert record["state"] == "ended" and record["log"] == "build/sweeps/s/p00/runs/1/run.log"
    assert record["exit_code"] == {"ok": 0, "failed": 1, "oom": 1, "preempted": 75, "cancelled": 143,
                                   "no report": 0}[how]
    if how == "failed":
        assert result["error"] == "exit 1: realised configuration differs from the plan: EP"
    if how == "ok":
        assert (build / "runs" / "1" / "report.json").exists() and not (build / "report.json").exists()
    assert workflow.TARGETS == ("local", "slurm", "k8s", "print")
