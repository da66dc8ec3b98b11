"""Helpers for the sweep tests: a project of one's own with a sweep file, and the CLI in process."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from moeforge.compiler import project
from moeforge.compiler.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """An empty moeforge project (recipes from the built-in catalogue), the current directory."""
    root = tmp_path / "proj"
    (root / "recipes" / "sweeps").mkdir(parents=True)
    (root / "moeforge.toml").write_text("[moeforge]\nversion = 1\n")
    monkeypatch.chdir(root)
    previous = project._root
    project.set_root(root)
    yield root
    project._root = previous


def _write_sweep(root: Path, name: str, text: str) -> Path:
    path = root / "recipes" / "sweeps" / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def write_sweep():
    """write_sweep(root, name, yaml text) -> the file recipes/sweeps/NAME.yaml (dedented)."""
    return _write_sweep


@pytest.fixture
def cli():
    """cli(*argv) -> moeforge's exit code, run in this process."""
    return lambda *argv: main(list(argv))
