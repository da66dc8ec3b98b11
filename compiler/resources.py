"""Where moeforge's own files are: the JSON Schemas, the templates and the built-in catalogue.

The one place that decides it. In a checkout they are the top-level schemas/, templates/ and
recipes/ beside compiler/; in an installed wheel the same directories are package data under
`moeforge_data/` beside the `compiler` package (pyproject.toml maps them there). The user's own
recipes are elsewhere: compiler/project.py finds the project root.
"""
from __future__ import annotations

from pathlib import Path

_BESIDE = Path(__file__).resolve().parent.parent   # the checkout, or site-packages when installed
INSTALLED_DATA = "moeforge_data"                      # the wheel's data package (pyproject.toml)


def _home() -> Path:
    installed = _BESIDE / INSTALLED_DATA
    if (installed / "schemas").is_dir():
        return installed
    return _BESIDE


HOME = _home()
SCHEMAS = HOME / "schemas"
TEMPLATES = HOME / "templates"
BUILTIN_RECIPES = HOME / "recipes"
# The directory whose `runtime` package the launch scripts run when moeforge is not installed in the
# job's Python (a checkout: it is put on PYTHONPATH, or mounted into a container).
CHECKOUT = _BESIDE if HOME == _BESIDE else None
# Megatron's own fields and argument parser as data (package data of `compiler`, in a checkout and a wheel).
MEGATRON_DATA = Path(__file__).resolve().parent / "data"
# Each document kind's current schema version: schemas/<kind>.v<N>.json (recipe/validate.py checks against it)
KINDS = {"recipe": 3, "platform": 1, "model": 1, "sweep": 1}
