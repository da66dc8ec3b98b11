"""Hypothesis profiles and shared fixtures for the fuzz / property suite.

Profiles (chosen by the environment, never by a test):
- ci (default, what `make test` runs): a bounded, derandomised number of examples, so the whole
  fuzz suite stays well under two minutes on two cores and gives the same verdict every run;
  no example database (nothing is written into the checkout).
- long (MOEFORGE_FUZZ=long, what `make fuzz` runs): about 30x the examples (an hour on two
  cores), random rather than derandomised, no deadline, the example database in .hypothesis/
  (git-ignored) so that a failure is replayed first next time.

The profiles are applied per test through fuzzlib.fuzz_settings(), not loaded globally, so the
rest of the test suite keeps hypothesis' defaults.
"""
from __future__ import annotations

import shutil
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import fuzzlib` in any import mode

import fuzzlib  # noqa: E402

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=30, derandomize=True, database=None, deadline=timedelta(seconds=20),
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("long", max_examples=1000, deadline=None, suppress_health_check=_SLOW_OK,
                          print_blob=True)


@pytest.fixture(scope="session")
def fuzz_root(tmp_path_factory) -> Path:
    """A private copy of recipes/ (tests write mutated recipes into fuzz/ and platforms/, models/)."""
    root = tmp_path_factory.mktemp("fuzz") / "recipes"
    shutil.copytree(fuzzlib.RECIPES, root, symlinks=True)
    (root / "fuzz").mkdir()
    (root.parent / "outside.yaml").write_text(fuzzlib.RECIPE_TEXT["tiny-moe/cpu"], encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def warm(fuzz_root) -> None:
    """Import and warm the compiler once in this process, so forked examples start warm."""
    fuzzlib.isolated(fuzzlib.load_only, str(fuzz_root), "tiny-moe/cpu", [])
    from moeforge.compiler.driver import load, resolve

    resolve(load("tiny-moe/cpu", [], fuzz_root))
