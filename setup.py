"""Packaging: the checkout's top-level folders under ONE import name, `moeforge`.

Why a setup.py beside pyproject.toml: the repository keeps the design's folders (compiler/, runtime/,
schemas/, templates/, recipes/) while the wheel installs them as moeforge.compiler, moeforge.runtime, ...,
so a user's own `compiler` or `runtime` can never shadow moeforge's. Package discovery in pyproject.toml
cannot add that prefix; find_packages here can, and it finds every subpackage, so none is listed by hand.
"""
from setuptools import find_packages, setup

CODE = ("compiler", "runtime")               # Python packages (each folder has an __init__.py)
DATA = ("schemas", "templates", "recipes")   # data folders, read through moeforge.compiler.resources


def _packages() -> list[str]:
    code = [p for p in find_packages(include=[f"{top}*" for top in CODE]) if p.split(".")[0] in CODE]
    return [f"moeforge.{p}" for p in code + list(DATA)]   # a data folder's files: package-data's ** globs


setup(packages=_packages(), package_dir={f"moeforge.{top}": top for top in CODE + DATA})
