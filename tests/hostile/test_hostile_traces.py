"""Issue 46 (items 3, 6, 7) for what `diagnose` reads: profiler traces whose events are not objects, lack
`dur`, or have negative or non-finite times are one located line (the event's index), never a traceback; a
step of 60k communication and 60k operator events is split in O(n log n) (the subtraction was quadratic:
30k + 30k took 41 s); a report with a negative step time is refused instead of pricing negative TFLOP/s.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from moeforge.compiler import driver
from moeforge.compiler.diagnose import trace


@pytest.fixture(scope="module")
def tiny_plan() -> dict:
    return driver.compile("tiny-moe/cpu", []).plan


def run_dir(root: Path, plan: dict, step_s=0.1, trace_events=None) -> Path:
    """A build directory as moeforge.runtime.train leaves it: plan.json, report.json, a rank's trace."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "plan.json").write_text(json.dumps(plan))
    report = {"status": "ok", "plan": str(root / "plan.json"), "steps": [{"step": 1, "time_s": step_s}],
              "steady_state": {"window": [1, 1], "steps": 1, "median_s": step_s, "mean_s": step_s}}
    if trace_events is not None:
        (root / "rank0.trace.json").write_text(json.dumps({"traceEvents": trace_events}))
        report["profile"] = {"traces": ["rank0.trace.json"]}
    (root / "report.json").write_text(json.dumps(report))
    return root


STEP = {"ph": "X", "cat": "user_annotation", "name": "moeforge.step 3", "ts": 0, "dur": 1000, "tid": 1}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 100, "tid": 1}

HOSTILE_EVENTS = {
    "an event that is a number": ([STEP, 7], r"traceEvents\[1\]: expected an event object, got int"),
    "an event that is a string": ([STEP, "x"], r"traceEvents\[1\]: expected an event object"),
    "an event without dur": ([STEP, {k: v for k, v in OP.items() if k != "dur"}], r"traceEvents\[1\]\.dur: .*missing"),
    "a step without dur": ([{k: v for k, v in STEP.items() if k != "dur"}], r"traceEvents\[0\]\.dur"),
    "a negative duration": ([STEP, {**OP, "dur": -1000}], r"traceEvents\[1\]\.dur: expected a finite number >= 0"),
    "a string duration": ([STEP, {**OP, "dur": "100"}], r"traceEvents\[1\]\.dur"),
    "a huge timestamp": ([STEP, {**OP, "ts": 1e308, "dur": 1e308}], None),
    "traceEvents not a list": ({"a": 1}, r"traceEvents: expected a list of events"),
}


@pytest.mark.parametrize("case", list(HOSTILE_EVENTS))
def test_a_hostile_event_is_one_located_line(tmp_path, case):
    events, words = HOSTILE_EVENTS[case]
    path = tmp_path / "rank0.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    if words is None:  # finite, if absurd: split, with finite numbers
        split = trace.split(path)
        assert all(math.isfinite(v) for v in (split.step_s, split.communication_s, split.compute_s, split.host_s))
        return
    with pytest.raises(trace.TraceError, match=words) as err:
        trace.split(path)
    assert str(path) in str(err.value) and len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("case", ["an event that is a number", "an event without dur", "a negative duration"])
def test_diagnose_says_which_event(sandbox, moeforge_cli, tmp_path, tiny_plan, case):
    events, words = HOSTILE_EVENTS[case]
    d = run_dir(tmp_path / "run", tiny_plan, trace_events=events)
    proc = moeforge_cli(sandbox, "diagnose", str(d), timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rank0.trace.json: traceEvents[1]" in proc.stderr, proc.stderr


@pytest.mark.parametrize("step_s", [-0.001, 0.0, 1e308])
def test_a_report_with_an_impossible_step_time_is_refused(sandbox, moeforge_cli, tmp_path, tiny_plan, step_s):
    d = run_dir(tmp_path / "run", tiny_plan, step_s=step_s, trace_events=[STEP, OP])
    proc = moeforge_cli(sandbox, "diagnose", str(d), timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "steady_state.median_s" in proc.stderr and "-1.0 ms" not in proc.stdout, proc.stderr


def _big_step(n: int, gpu: bool) -> list[dict]:
    """One step with n communication and n compute events interleaved (each overlapping the next)."""
    events = [{**STEP, "dur": 4 * n + 10}]
    for i in range(n):
        if gpu:
            events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllToAll", "ts": 4 * i, "dur": 3, "tid": 8})
            events.append({"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 4 * i + 2, "dur": 3, "tid": 7})
        else:
            events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 4 * i, "dur": 3, "tid": 1})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 4 * i + 3.5, "dur": 0.4, "tid": 1})
    return events


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu kernels", "cpu operators"])
def test_sixty_thousand_events_of_each_kind_split_in_n_log_n(tmp_path, monkeypatch, gpu):
    """Counts the interval comparisons of the subtraction instead of timing it: at most a constant times
    n log n (the quadratic one made about n^2 = 3.6e9), and a generous wall-clock bound besides."""
    n = 60_000
    path = tmp_path / "big.trace.json"
    path.write_text(json.dumps({"traceEvents": _big_step(n, gpu)}))
    calls = {"pairs": 0}
    minus = trace._minus

    def counted(a, b):
        calls["pairs"] += len(a) + len(b)
        return minus(a, b)

    monkeypatch.setattr(trace, "_minus", counted)
    split = trace.split(path)
    assert calls["pairs"] <= 4 * n  # the work is counted, not timed: the quadratic split ran past 120 s
    # the merge is exact: in each 4 us period communication 0..3; on a GPU compute 2..5 hides 2..3 and the
    # previous period's 0..1 (exposed 1 us; 2 us in the first), on a CPU the operator 3.5..3.9 hides nothing
    if gpu:
        assert split.communication_s == pytest.approx((n + 1) * 1e-6, rel=1e-6)
    else:
        assert split.communication_s == pytest.approx(3 * n * 1e-6, rel=1e-6)


def test_the_merge_subtracts_exactly():
    a = [(0.0, 10.0), (20.0, 30.0), (40.0, 41.0)]
    b = [(-5.0, 1.0), (2.0, 3.0), (9.0, 21.0), (29.0, 50.0)]
    # covered: 0..1, 2..3, 9..10, 20..21, 29..30, 40..41
    assert trace._minus(a, b) == pytest.approx(21.0 - 6.0)
    assert trace._minus(a, []) == pytest.approx(21.0) and trace._minus([], b) == 0.0
    assert trace._inside([(0.0, 1.0), (5.0, 6.0)], 5.5) and not trace._inside([(0.0, 1.0), (5.0, 6.0)], 1.0)


def test_the_json_reader_refuses_a_number_that_reads_as_infinity():
    """1e400 is valid JSON that Python reads as inf (an HF rope_theta became `rotary_base: .inf`)."""
    from moeforge.compiler import bounded

    with pytest.raises(bounded.Unreadable, match="1e400 is too large for a 64-bit float") as err:
        bounded.parse_json('{"rope_theta":\n   1e400}')
    assert err.value.where == "2:4"
    with pytest.raises(bounded.Unreadable, match="-1E999"):
        bounded.parse_json("[1.5, -1E999]")
    assert bounded.parse_json("[1e308, -2.5e-300]") == [1e308, -2.5e-300]


@pytest.mark.parametrize("where", ["report", "trace"])
def test_an_infinite_number_in_a_report_or_trace_is_located(sandbox, moeforge_cli, tmp_path, tiny_plan, where):
    d = run_dir(tmp_path / "run", tiny_plan, trace_events=[STEP, OP])
    name = "report.json" if where == "report" else "rank0.trace.json"
    text = (d / name).read_text()
    (d / name).write_text(text.replace('"dur": 100,', '"dur": 1e400,') if where == "trace"
                          else text.replace('"median_s": 0.1', '"median_s": 1e400'))
    proc = moeforge_cli(sandbox, "diagnose", str(d), timeout=120)
    assert proc.returncode == 1 and f"{d / name}:1:" in proc.stderr and "1e400" in proc.stderr, proc.stderr


def test_an_hf_config_number_that_reads_as_infinity_is_located(sandbox, moeforge_cli, tmp_path):
    """The issue's case through the same reader: `rope_theta: 1e400` imported as `rotary_base: .inf`."""
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "qwen3_moe", "rope_theta": 1e400, "hidden_size": 64}\n')
    proc = moeforge_cli(sandbox, "import", str(config), "--root", str(tmp_path / "out"), timeout=120)
    assert proc.returncode in (1, 2) and f"{config}:1:43" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists() or ".inf" not in "".join(
        p.read_text() for p in (tmp_path / "out").rglob("*.yaml"))
