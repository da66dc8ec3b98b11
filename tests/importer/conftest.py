"""The importer tests' recipes root: the built-in platforms and an empty models/ (one per test module)."""
from __future__ import annotations

import shutil

import pytest

from moeforge.compiler.recipe.compose import RECIPES


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    top = tmp_path_factory.mktemp("recipes")
    shutil.copytree(RECIPES / "platforms", top / "platforms")
    (top / "models").mkdir()
    return top
