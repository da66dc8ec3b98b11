"""Fixtures for the launch-template tests: the renderer (tests/launch/rendering.py) and contexts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def load_rendering():
    """tests/launch/rendering.py, imported by path (independent of pytest's import mode)."""
    name = "moeforge_tests_rendering"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("rendering.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def rendering():
    return load_rendering()
