"""Fixtures for the runtime tests (helpers live in runtime_testlib.py)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

# Test modules here import runtime_testlib; make that work under any pytest import mode.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from runtime_testlib import EXAMPLE_PLAN  # noqa: E402


@pytest.fixture
def tiny_plan() -> dict:
    """A fresh copy of the compiler's example plan (tiny MoE, EP=2, alltoall, EP overlap)."""
    return copy.deepcopy(json.loads(EXAMPLE_PLAN.read_text()))
