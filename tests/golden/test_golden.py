"""Every catalogue recipe compiles to the reviewed files under tests/golden/<recipe>/.

A difference is either a regression or an intended change; for the latter, run
`make golden`, read the diff of tests/golden line by line, and commit it with the change.
"""
import os
from pathlib import Path

import pytest

from compiler.check import recipe_files
from compiler.emit import render
from compiler.pipeline import load, resolve
from compiler.plan import build

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
UPDATE = os.environ.get("MOEFORGE_UPDATE_GOLDEN") == "1"
RECIPES = [str(p.relative_to(ROOT / "recipes").with_suffix("")) for p in recipe_files([ROOT / "recipes"])]


def _compiled(rid: str) -> dict[str, str]:
    resolved = resolve(load(rid))
    return render(build(resolved), resolved.composed.data, f"build/{rid}")


@pytest.mark.parametrize("rid", RECIPES)
def test_compiled_outputs_match_the_reviewed_files(rid):
    files = _compiled(rid)
    folder = GOLDEN / rid
    if UPDATE:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():
            if stale.name not in files:
                stale.unlink()
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
    assert folder.is_dir(), f"no golden files for {rid}: run `make golden` and review them"
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    for name, text in files.items():
        assert (folder / name).read_text(encoding="utf-8") == text, f"{rid}/{name} differs from the reviewed file"


def test_every_golden_folder_belongs_to_a_recipe():
    folders = {str(p.parent.relative_to(GOLDEN)) for p in GOLDEN.rglob("plan.json")}
    assert folders == set(RECIPES)
