"""Issue 48, items 2-4, in a fresh `moeforge init` project (not this checkout): `check` checks every document
kind by its `schema:` key (sweeps as `sweep check` does, calibrations, platforms, models), recipe ids resolve
the same way in every command (`builtin:` in check; a bare id that is only built-in names `builtin:ID`), and
what moeforge writes or says names files that exist in the user's project."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from moeforge.compiler.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def user(tmp_path, monkeypatch, capsys):
    root = tmp_path / "newcomer"
    root.mkdir()
    monkeypatch.chdir(root)
    assert main(["init"]) == 0
    capsys.readouterr()
    return root


def run(capsys, *argv) -> tuple[int, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out + out.err


def _sweep(user: Path, name: str, recipe: str, axis: str = "training.micro_batch_size") -> Path:
    path = user / "recipes" / "sweeps" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"schema: moeforge/sweep/v1\nname: {name}\nrecipe: {recipe}\nset:\n  training.train_iters: 3\n"
                    f"axes:\n  {axis}: [1, 2]\n")
    return path


# ---------------------------------------------------------------------------------------------- item 2
def test_check_finds_a_misspelt_sweep_knob_as_sweep_check_does(user, capsys):
    _sweep(user, "typo", "builtin:tiny-moe/cpu", axis="training.micro_batch_sise")
    rc, sweep_out = run(capsys, "sweep", "check", "typo")
    assert rc == 1 and "did you mean 'training.micro_batch_size'?" in sweep_out
    for target in ("recipes/sweeps/typo.yaml", "recipes/sweeps/", "recipes"):
        rc, out = run(capsys, "check", target)
        assert rc == 1, (target, out)
        assert "recipes/sweeps/typo.yaml:7:3: error[E_UNKNOWN_KNOB]: unknown knob training.micro_batch_sise" in out
        assert "did you mean 'training.micro_batch_size'?" in out
        assert "checked 1 document(s): 1 error(s)" in out


def test_check_passes_a_good_sweep_and_says_which_points_the_rules_refuse(user, capsys):
    _sweep(user, "good", "builtin:tiny-moe/cpu")
    rc, out = run(capsys, "check", "recipes/sweeps")
    assert rc == 0 and "checked 1 document(s): 0 error(s)" in out, out
    path = user / "recipes" / "sweeps" / "half.yaml"
    path.write_text("schema: moeforge/sweep/v1\nname: half\nrecipe: builtin:tiny-moe/cpu\naxes:\n"
                    "  moe.overlap.ep_comm: [true]\n  moe.dispatcher: [alltoall, allgather]\n")
    rc, out = run(capsys, "check", str(path))
    assert rc == 0, out  # sweep launch skips a refused point: a warning at the line that set it
    assert "recipes/sweeps/half.yaml:6:" in out and "point p01 refused: sweep launch skips it" in out


def test_check_validates_calibrations_platforms_and_models_by_their_schema_key(user, capsys):
    cal = user / "recipes" / "platforms" / "cpu.calibration.yaml"
    cal.write_text("schema: moeforge/calibration/v1\nplatform: cpu\nruns: 3\n")
    (user / "recipes" / "models" / "odd.yaml").write_text("schema: moeforge/model/v1\nname: 3\n")
    elsewhere = user / "recipes" / "notes" / "cal.yaml"  # the key decides, not the folder
    elsewhere.parent.mkdir()
    elsewhere.write_text("schema: moeforge/calibration/v1\nplatform: cpu\n")
    rc, out = run(capsys, "check")
    assert rc == 1
    assert "recipes/platforms/cpu.calibration.yaml:3:7: error[E_SCHEMA]: runs: expected array, got 3" in out
    assert "recipes/models/odd.yaml" in out and "recipes/notes/cal.yaml" in out and "runs" in out
    assert "checked 3 document(s)" in out


def test_a_calibration_of_an_unknown_version_is_one_located_error(user, capsys):
    (user / "recipes" / "platforms" / "cpu.calibration.yaml").write_text("schema: moeforge/calibration/v9\n"
                                                                        "platform: cpu\nruns: []\n")
    rc, out = run(capsys, "check")
    assert rc == 1 and "recipes/platforms/cpu.calibration.yaml:1:9: error[E_SCHEMA_VERSION]: this moeforge reads " \
                       "moeforge/calibration/v1, not 'moeforge/calibration/v9'" in out, out


def test_the_hook_and_the_ci_example_pass_every_document_under_recipes(user):
    hook = yaml.safe_load((user / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"][0]
    ours = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())[0]
    for files in (hook["files"], ours["files"]):
        for name in ("recipes/sweeps/a.yaml", "recipes/platforms/cpu.calibration.yaml", "recipes/models/m.yml"):
            assert re.search(files, name), (files, name)
    workflow = (user / ".github" / "workflows" / "moeforge.yml").read_text()
    assert "'recipes/*.yaml'" in workflow  # a git pathspec: * crosses '/', so recipes/sweeps/x.yaml is passed
    subprocess.run(["git", "init", "-q"], cwd=user, check=True)
    _sweep(user, "s", "builtin:tiny-moe/cpu")
    listed = subprocess.run(["git", "ls-files", "--others", "--", "recipes/*.yaml"], cwd=user, check=True,
                            capture_output=True, text=True).stdout.split()
    assert "recipes/sweeps/s.yaml" in listed


# ---------------------------------------------------------------------------------------------- item 3
def test_builtin_ids_resolve_in_check_as_in_compile(user, capsys):
    assert run(capsys, "check", "builtin:tiny-moe/cpu") == (0, "checked 1 document(s): 0 error(s), 0 warning(s), "
                                                               "0 advice\n")
    assert run(capsys, "compile", "builtin:tiny-moe/cpu")[0] == 0


@pytest.mark.parametrize("command", ["check", "explain", "compile"])
def test_a_bare_id_only_built_in_names_builtin(user, capsys, command):
    rc, out = run(capsys, command, "tiny-moe/cpu")
    assert rc == 1
    assert "E_RECIPE_NOT_FOUND" in out and "help: write builtin:tiny-moe/cpu for the built-in recipe" in out


def test_extends_of_a_bare_id_only_built_in_names_builtin(user, capsys):
    (user / "recipes" / "mine").mkdir()
    (user / "recipes" / "mine" / "x.yaml").write_text("schema: moeforge/recipe/v3\nrevision: 1\nname: x\n"
                                                      "extends: tiny-moe/cpu\n")
    rc, out = run(capsys, "check", "recipes/mine/x.yaml")
    assert rc == 1 and "recipes/mine/x.yaml:4:10: error[E_EXTENDS_NOT_FOUND]" in out
    assert "help: write extends: builtin:tiny-moe/cpu for the built-in recipe" in out


def test_a_sweep_of_a_bare_id_only_built_in_is_one_error_at_its_recipe_line(user, capsys):
    _sweep(user, "bare", "tiny-moe/cpu")
    for argv in (("sweep", "check", "bare"), ("check", "recipes/sweeps/bare.yaml")):
        rc, out = run(capsys, *argv)
        assert rc == 1
        assert out.count("E_RECIPE_NOT_FOUND") == 1, out
        assert "recipes/sweeps/bare.yaml:3:9: error[E_RECIPE_NOT_FOUND]" in out and "builtin:tiny-moe/cpu" in out
        assert "p00" not in out


# ---------------------------------------------------------------------------------------------- item 4
def _schema_target(document: Path) -> Path:
    first = document.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema="), first
    return (document.parent / first.split("=", 1)[1]).resolve()


def test_the_sweep_scaffold_names_the_projects_schema(user, capsys):
    assert run(capsys, "new", "sweep", "mbs", "builtin:tiny-moe/cpu")[0] == 0
    target = _schema_target(user / "recipes" / "sweeps" / "mbs.yaml")
    assert target == (user / ".moeforge" / "schemas" / "sweep.v1.json").resolve() and target.is_file()


def test_the_calibration_document_names_the_projects_schema(user, tmp_path):
    from moeforge.compiler.calibrate import document

    path = user / "recipes" / "platforms" / "cpu.calibration.yaml"
    path.write_text(document.render({"schema": "moeforge/calibration/v1", "platform": "cpu", "runs": []},
                                    "moeforge calibrate", path))
    target = _schema_target(path)
    assert target == (user / ".moeforge" / "schemas" / "calibration.v1.json").resolve() and target.is_file()


def test_a_builtin_platform_without_performance_names_files_that_exist(user):
    """The built-in cpu platform has no performance block: the message names the built-in file and where the
    project's copy goes, and the schema where `init` put it (not this checkout's schemas/)."""
    from moeforge.compiler.estimate import steptime

    with pytest.raises(steptime.PerformanceError) as exc:
        steptime.performance({"platform": {"name": "cpu"}})
    text = str(exc.value)
    assert "see .moeforge/schemas/platform.v1.json" in text and (user / ".moeforge/schemas/platform.v1.json").is_file()
    assert "a copy of builtin:recipes/platforms/cpu.yaml at recipes/platforms/cpu.yaml" in text
    assert (REPO / "recipes" / "platforms" / "cpu.yaml").is_file()  # what builtin:recipes/platforms/cpu.yaml is


def test_init_writes_a_gitignore_for_build_outputs(user, capsys):
    ignore = (user / ".gitignore").read_text().split()
    assert "build/" in ignore
    subprocess.run(["git", "init", "-q"], cwd=user, check=True)
    (user / "build" / "x").mkdir(parents=True)
    (user / "build" / "x" / "plan.json").write_text("{}")
    (user / "build" / ".x.lock").write_text("")
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=user, check=True,
                            capture_output=True, text=True).stdout
    assert "build/" not in status and ".gitignore" in status
