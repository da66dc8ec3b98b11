"""make targets that drive the compiler: compile-all names every recipe (make -n, nothing runs)."""
import shutil
import subprocess
from pathlib import Path

import pytest

from moeforge.compiler.commands.check import recipe_files

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_compile_all_compiles_every_recipe():
    """Its per-recipe pattern targets must not be phony: GNU make skips implicit rules for phony
    targets, and `make compile-all` then compiled nothing."""
    proc = subprocess.run(["make", "-n", "compile-all"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    compiled = sorted(line.rsplit(" ", 1)[-1] for line in proc.stdout.splitlines() if "-m moeforge.compiler compile " in line)
    expected = sorted(str(p.relative_to(ROOT / "recipes").with_suffix("")) for p in recipe_files([ROOT / "recipes"]))
    assert compiled == expected
