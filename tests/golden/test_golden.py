"""Every catalogue recipe compiles to the reviewed files under tests/golden/<recipe>/.

A difference is either a regression or an intended change; for the latter, run
`make golden`, read the diff of tests/golden line by line, and commit it with the change.
"""
import os
from pathlib import Path

import pytest

from moeforge.compiler import driver
from moeforge.compiler.commands.check import recipe_files
from moeforge.compiler.targets.emit import render

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
UPDATE = os.environ.get("MOEFORGE_UPDATE_GOLDEN") == "1"
RECIPES = [str(p.relative_to(ROOT / "recipes").with_suffix("")) for p in recipe_files([ROOT / "recipes"])]


def _compiled(rid: str) -> dict[str, str]:
    compiled = driver.compile(rid)  # the compile every command runs
    return render(compiled.plan, compiled.composed.data, f"build/{rid}")


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


GOLDEN_SCRIPTS = sorted(GOLDEN.rglob("*.sh")) + sorted(GOLDEN.rglob("launch.sbatch"))


def test_every_generated_script_passes_bash_n_and_shellcheck():
    import shutil
    import subprocess
    import sys

    assert GOLDEN_SCRIPTS
    for script in GOLDEN_SCRIPTS:
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script}: {done.stderr}"
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    done = subprocess.run([shellcheck, "-S", "warning", *map(str, GOLDEN_SCRIPTS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_generated_pytorchjob_validates():
    """Every catalogue recipe's pytorchjob.yaml (the files above are what compile writes) against the
    training-operator's PyTorchJob CRD schema and schemas/pytorchjob.json (tests/launch/pytorchjob_schema.py)."""
    import importlib.util

    import yaml

    spec = importlib.util.spec_from_file_location("moeforge_golden_pytorchjob_schema",
                                                  ROOT / "tests" / "launch" / "pytorchjob_schema.py")
    schema = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(schema)
    v = schema.validator()
    jobs = sorted(GOLDEN.rglob("pytorchjob.yaml"))
    assert len(jobs) == len(RECIPES)
    for job in jobs:
        errors = [("/".join(map(str, e.absolute_path)), e.message) for e in v.iter_errors(yaml.safe_load(job.read_text()))]
        assert errors == [], f"{job}: {errors}"
