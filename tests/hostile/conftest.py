"""Fixtures for the hostile-input tests: a sandbox checkout, recording shims, the CLI as a process.

The sandbox is a copy of compiler/, schemas/, templates/ and recipes/ under a directory whose
name has a blank and a quote in it (quoting bugs show up there first). The compiler finds its
root from its own location, so `python -m moeforge.compiler` run there compiles the sandbox's recipes
into the sandbox's build/ and never touches the checkout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import hostilelib` in any import mode


def _copy_tree(dst: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("compiler", "schemas", "templates", "recipes"):
        shutil.copytree(REPO / name, dst / name, ignore=ignore)
    return dst


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory) -> Path:
    """A private checkout (read-mostly: tests add recipes under recipes/hostile/)."""
    root = _copy_tree(tmp_path_factory.mktemp("hostile") / "repo root'q")
    (root / "recipes" / "hostile").mkdir()
    return root


@pytest.fixture
def fresh_sandbox(tmp_path) -> Path:
    """A private checkout for a test that changes platforms/ or models/ or plants links."""
    root = _copy_tree(tmp_path / "repo root'q")
    (root / "recipes" / "hostile").mkdir()
    return root


def moeforge(root: Path, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """`python -m moeforge.compiler ARGS` in the sandbox `root`; never a traceback, exit 0/1/2."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout, **kw)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1, 2), (proc.returncode, out[-3000:])
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    return proc


@pytest.fixture(scope="session")
def moeforge_cli():
    return moeforge
