"""Where moeforge's own files are: the JSON Schemas, the templates and the built-in catalogue.

The one place that decides it. In a checkout they are the top-level schemas/, templates/ and
recipes/ beside compiler/; an installed wheel has the same folders beside it, inside the `moeforge`
package (setup.py maps them there), so one rule finds both. The user's own recipes are elsewhere:
compiler/project.py finds the project root.
"""
from __future__ import annotations

from pathlib import Path

HOME = Path(__file__).resolve().parent.parent   # the checkout, or site-packages/moeforge when installed
SCHEMAS = HOME / "schemas"
TEMPLATES = HOME / "templates"
BUILTIN_RECIPES = HOME / "recipes"
# moeforge's own checkout (where .venv312 is), when moeforge runs from one (an editable install); None installed.
CHECKOUT = HOME if (HOME / "pyproject.toml").is_file() else None
# Megatron's own fields and argument parser as data (package data of `compiler`, in a checkout and a wheel).
MEGATRON_DATA = Path(__file__).resolve().parent / "data"
# Each document kind's current schema version: schemas/<kind>.v<N>.json (recipe/validate.py checks against it)
KINDS = {"recipe": 3, "platform": 1, "model": 1, "sweep": 1}
