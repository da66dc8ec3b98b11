"""runtime/report/build.py: the one report builder both entry points use (issue 45 item 3).

The window and steady state are worked out once, for a fresh run and a resumed one alike; a source scan
keeps it the only place a report's steady state is assembled.
"""

from __future__ import annotations

import ast
from pathlib import Path

from moeforge.runtime.report.build import steady_state, window

ROOT = Path(__file__).resolve().parents[2]


def test_the_plans_window_counts_from_the_first_iteration_this_process_ran():
    assert window([2, 20], list(range(1, 21))) == [2, 20]
    assert window([2, 20], list(range(11, 21))) == [12, 20]  # resumed at 11: its first step warms up too
    assert window([1, 4], [1, 2]) == [1, 2]  # stopped early (a signal): clamped to what ran


def test_profiled_steps_are_left_out_of_the_steady_state():
    times = {1: 9.0, 2: 1.0, 3: 1.0, 4: 5.0, 5: 5.0}
    steady = steady_state(times, [2, 5], skip=(4, 5))
    assert steady["window"] == [2, 5] and steady["left_out_profiled"] == [4, 5]
    assert steady["steps"] == 2 and steady["mean_s"] == 1.0
    assert steady_state(times, [4, 5], skip=(4, 5))["steps"] == 2  # nothing else in the window: keep them
    assert steady_state({}, [1, 1]) is None


def test_only_the_builder_assembles_a_report():
    """A second report builder would spell the report's keys again: only report/build.py may."""
    spelled = []
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value in
                                                  ("steady_state", "tokens_per_s", "peak_memory_bytes_max")
                                                  for k in node.keys):
                spelled.append(str(path.relative_to(ROOT)))
    assert spelled == ["runtime/report/build.py"]
