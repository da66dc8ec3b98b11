"""Suite-wide: a private cache directory, a time limit for tests that could block, the grouping of tests for
parallel workers, and a closing summary of skipped tests, grouped by reason.

Why: a skip hides a check (no root for Slurm, no Python 3.12 for Megatron's own judges, ...);
the end of `make test` says how many were skipped and why, so a green run never hides that.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections import Counter

import pytest

_CACHE = tempfile.mkdtemp(prefix="moeforge-test-cache-")


def pytest_configure(config):
    """The compiler's validity cache (compiler/recipe/cache.py) lives in a directory of this session's own,
    inherited by every subprocess, and is removed at the end: tests leave nothing in the user's cache."""
    os.environ["MOEFORGE_CACHE_DIR"] = _CACHE


def pytest_collection_modifyitems(config, items):
    """`make test` runs on pytest-xdist workers with --dist loadgroup. Tests that share an expensive fixture stay on
    one worker, so it is built once: every test that needs a real Slurm shares one worker (the session starts each
    cluster once), the users of a session-scoped fixture of ours (the planner's searches, the fuzz root) share one,
    and a file whose tests share a module-scoped fixture (a training run, a judge's Megatron import) stays whole.
    Every other test goes to whichever worker is free, so one long file does not hold a worker alone."""
    for item in items:
        shared = [(name, defs[-1].scope) for name, defs in sorted(item._fixtureinfo.name2fixturedefs.items())
                  if defs and defs[-1].baseid.startswith("tests") and defs[-1].scope in ("session", "package", "module")]
        if item.get_closest_marker("slurm"):
            group = "slurm"
        elif any(scope != "module" for _, scope in shared):
            group = "fixture:" + next(name for name, scope in shared if scope != "module")
        elif shared:
            group = item.nodeid.split("::")[0]
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.fixture
def deadline():
    """For a test that would block if what it guards regressed (reading a FIFO): after 300 s SIGALRM
    interrupts the blocking call and the test fails, instead of hanging the suite (the suite has no
    per-test timeout)."""
    def expire(signum, frame):
        raise TimeoutError("the test blocked for 300 s: what it guards has regressed")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(300)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        text = str(longrepr)
    return text.removeprefix("Skipped: ").strip().splitlines()[0] if text.strip() else "(no reason given)"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        terminalreporter.write_line("skipped: none")
        return
    reasons = Counter(_reason(r) for r in skipped)
    terminalreporter.section(f"{len(skipped)} skipped, by reason", sep="-")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:5d}  {reason}")
