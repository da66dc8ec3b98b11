"""The user's project: its root, its recipes/ and its build/.

The root is found the way git finds its own: from the current directory upward, the first
directory holding a `moeforge.toml` or a `recipes/` folder (`moeforge --root DIR` says it
instead). Without either, the current directory is the root (its recipes/ may not exist:
then only `builtin:` recipes and the built-in platforms and models are reachable).

Platform and model names resolve in the root's recipes/platforms|models first, then in the
built-in catalogue (compiler/resources.py); a recipe names a built-in one with `builtin:ID`.
In moeforge's own checkout the root is the checkout and the two catalogues are the same.
"""
from __future__ import annotations

import os
from pathlib import Path

from compiler.resources import BUILTIN_RECIPES

MARKER = "moeforge.toml"
BUILTIN_PREFIX = "builtin:"

_root: Path | None = None


def find_root(start: Path | None = None) -> Path:
    here = Path(start or os.getcwd()).absolute()
    for d in (here, *here.parents):
        if (d / MARKER).is_file() or (d / "recipes").is_dir():
            return d
    return here


def set_root(path: str | Path | None) -> Path:
    """Fix the project root for this process (`--root`); None finds it from the current directory."""
    global _root
    _root = Path(path).absolute() if path is not None else find_root()
    return _root


def root() -> Path:
    return _root if _root is not None else find_root()


def recipes() -> Path:
    return root() / "recipes"


def build() -> Path:
    return root() / "build"


def is_builtin(recipes_dir: Path) -> bool:
    try:
        return recipes_dir.resolve() == BUILTIN_RECIPES.resolve()
    except OSError:
        return False
