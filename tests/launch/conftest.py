"""Fixtures for the launch-template tests: the renderer (tests/launch/rendering.py) and contexts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def load_helper(file: str, name: str):
    """A helper module of tests/launch, imported by path (independent of pytest's import mode)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def load_rendering():
    """tests/launch/rendering.py."""
    return load_helper("rendering.py", "moeforge_tests_rendering")


@pytest.fixture(scope="session")
def rendering():
    return load_rendering()


@pytest.fixture(scope="session")
def pytorchjob_schema():
    """tests/launch/pytorchjob_schema.py: the PyTorchJob CRD's schema and schemas/pytorchjob.json."""
    return load_helper("pytorchjob_schema.py", "moeforge_tests_pytorchjob_schema")
