"""Fidelity tests (helpers live in fidelity_testlib.py; the judges run in .venv312)."""

import sys
from pathlib import Path

# Test modules here import fidelity_testlib; make that work under any pytest import mode.
sys.path.insert(0, str(Path(__file__).resolve().parent))
