"""Recipes live in the user's repository (issue 14): the project root is found like git's, platform
and model names resolve there first and then in the built-in catalogue, `extends: builtin:ID`,
`moeforge init` / `new`, a platform checked on its own, and the installed wheel working outside
the checkout."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from moeforge.compiler import project
from moeforge.compiler.cli import main
from moeforge.compiler.resources import BUILTIN_RECIPES, SCHEMAS, TEMPLATES

REPO = Path(__file__).resolve().parents[2]

RECIPE = """\
schema: moeforge/recipe/v3
revision: 1
name: mine
extends: builtin:tiny-moe/cpu
platform: box
training: {train_iters: 2}
"""


@pytest.fixture
def user(tmp_path, monkeypatch):
    root = tmp_path / "my project"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def run(*argv) -> int:
    return main(list(argv))


def test_resources_are_the_checkouts_here():
    assert SCHEMAS == REPO / "schemas" and TEMPLATES == REPO / "templates" and BUILTIN_RECIPES == REPO / "recipes"


def test_root_is_found_upward_like_git(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "moeforge.toml").write_text("")
    assert project.find_root(tmp_path / "a" / "b") == tmp_path / "a"


def test_init_new_check_compile_explain_in_a_user_directory(user, capsys):
    assert run("init") == 0
    for name in ("moeforge.toml", ".pre-commit-config.yaml", ".github/workflows/moeforge.yml",
                 "recipes/platforms/README.md", "recipes/models/README.md"):
        assert (user / name).is_file(), name
    assert "moeforge check" in (user / ".pre-commit-config.yaml").read_text()
    capsys.readouterr()
    assert run("init") == 1  # never overwrites, and says which files are in the way
    out = capsys.readouterr().out
    assert "E_EXISTS" in out and "moeforge.toml" in out and ".pre-commit-config.yaml" in out

    assert run("new", "platform", "box") == 0
    text = (user / "recipes/platforms/box.yaml").read_text()
    assert "# container_moeforge: mounted" in text and "megatron_core:" in text  # every key, from the schema
    assert _schema_of(user / "recipes/platforms/box.yaml") == (user / ".moeforge/schemas/platform.v1.json").resolve()
    assert run("check", "recipes/platforms/box.yaml") == 0
    (user / "recipes/mine.yaml").write_text(RECIPE)
    capsys.readouterr()
    assert run("check") == 0
    assert run("compile", "mine") == 0
    assert (user / "build/mine/plan.json").is_file() and (user / "build/mine/torchrun.sh").is_file()
    capsys.readouterr()
    assert run("explain", "mine") == 0
    out = capsys.readouterr().out
    assert "platform box from recipes/platforms/box.yaml" in out
    assert f"model tiny-moe from builtin:recipes/models/tiny-moe.yaml: {BUILTIN_RECIPES}/models/tiny-moe.yaml" in out

    assert run("new", "recipe", "tiny-moe", "box") == 0
    assert run("check", "recipes/tiny-moe/box.yaml") == 0
    assert run("new", "recipe", "tiny-moe", "box") == 1


def _schema_of(document: Path) -> Path:
    """The file a document's `# yaml-language-server: $schema=...` line names, resolved as editors resolve it
    (relative to the document), which must exist and be moeforge's schema of that kind."""
    first = document.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema="), first
    target = (document.parent / first.split("=", 1)[1]).resolve()
    assert target.is_file() and target.read_text() == (SCHEMAS / target.name).read_text(), target
    return target


def test_import_and_new_name_schemas_that_resolve_without_init(user, capsys):
    """A project that never ran init gets the schemas copied in by import (and a stale copy refreshed)."""
    (user / "recipes").mkdir()
    script = REPO / "tests" / "data" / "import" / "small_gpt_moe_h100.sh"
    assert run("import", str(script)) == 0
    for doc in (user / "recipes/imported").glob("*.yaml"):
        assert _schema_of(doc).parent == (user / ".moeforge/schemas").resolve()
    stale = user / ".moeforge/schemas/platform.v1.json"
    stale.write_text("{}")
    assert run("new", "platform", "box") == 0
    assert _schema_of(user / "recipes/platforms/box.yaml") == stale.resolve()
    assert run("new", "model", "mine") == 0
    assert _schema_of(user / "recipes/models/mine.yaml").name == "model.v1.json"
    config = REPO / "tests" / "fidelity" / "hf_configs" / "qwen3-30b-a3b.json"
    assert run("import", str(config), "--platform", "h100", "--name", "q3") == 0  # the Hugging Face import too
    assert _schema_of(user / "recipes/models/q3.yaml").name == "model.v1.json"
    assert _schema_of(user / "recipes/imported/q3.yaml").name == "recipe.v3.json"


def test_root_option_from_elsewhere(user, tmp_path, monkeypatch, capsys):
    (user / "recipes").mkdir()
    (user / "recipes/mine.yaml").write_text(RECIPE.replace("platform: box", "platform: cpu"))
    monkeypatch.chdir(tmp_path)
    assert run("--root", str(user), "compile", "mine") == 0
    assert (user / "build/mine/plan.json").is_file()


def test_project_platform_wins_over_builtin(user, capsys):
    (user / "recipes/platforms").mkdir(parents=True)
    cpu = (BUILTIN_RECIPES / "platforms/cpu.yaml").read_text().replace("gpus_per_node: 2", "gpus_per_node: 4")
    (user / "recipes/platforms/cpu.yaml").write_text(cpu)
    (user / "recipes/mine.yaml").write_text(RECIPE.replace("platform: box", "platform: cpu"))
    assert run("explain", "mine") == 0
    assert "platform cpu from recipes/platforms/cpu.yaml" in capsys.readouterr().out


def test_builtin_cannot_escape_and_local_escape_is_refused(user, capsys):
    (user / "recipes").mkdir()
    (user / "outside.yaml").write_text(RECIPE)
    for target in ("builtin:../../../etc/passwd", "builtin:../README", "../outside.yaml"):
        (user / "recipes/bad.yaml").write_text(RECIPE.replace("builtin:tiny-moe/cpu", target))
        assert run("check", "recipes/bad.yaml") == 1
        out = capsys.readouterr().out
        assert "E_PATH_ESCAPE" in out or "E_EXTENDS_NOT_FOUND" in out, out


def test_unsupported_megatron_core_names_the_supported_ones(user, capsys):
    assert run("new", "platform", "old") == 0
    path = user / "recipes/platforms/old.yaml"
    path.write_text(path.read_text().replace('megatron_core: "0.16.1"', 'megatron_core: "0.12.0"'))
    capsys.readouterr()
    assert run("check", "recipes/platforms/old.yaml") == 1
    out = capsys.readouterr().out
    assert "E_MEGATRON_CORE_VERSION" in out and "0.16.x" in out and "0.19.x" in out
    assert "recipes/platforms/old.yaml:" in out
    (user / "recipes/mine.yaml").write_text(RECIPE.replace("platform: box", "platform: old"))
    assert run("check", "recipes/mine.yaml") == 1
    assert "E_MEGATRON_CORE_VERSION" in capsys.readouterr().out


def test_container_moeforge_installed_mounts_no_checkout(user, capsys):
    (user / "recipes/platforms").mkdir(parents=True)
    h100 = (BUILTIN_RECIPES / "platforms/h100.yaml").read_text() + "container_moeforge: installed\n"
    (user / "recipes/platforms/h100.yaml").write_text(h100)
    assert run("compile", "builtin:qwen3-30b-a3b/h100-bf16") == 0
    sbatch = (user / "build/qwen3-30b-a3b/h100-bf16/launch.sbatch").read_text()
    assert "unset MOEFORGE_HOME" in sbatch and 'container_mounts+=",$MOEFORGE_HOME' not in sbatch


# ----------------------------------------------------------------------------- the installed wheel

def _sh(argv, cwd, env, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


@pytest.mark.slow
def test_installed_wheel_works_in_a_user_repository(tmp_path):
    """Build the wheel from a copy of the working tree, install it into a fresh venv (dependencies
    from the package index; no torch), and use it in a directory outside the checkout."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MOEFORGE_ROOT", "MOEFORGE_HOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    dist = tmp_path / "dist"
    proc = _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                str(src)], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [wheel] = dist.glob("moeforge-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    proc = _sh([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp_path, env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"

    user = tmp_path / "elsewhere" / "my project"
    user.mkdir(parents=True)
    where = _sh(["python", "-c", "import moeforge.compiler as c, importlib.util as u; print(c.__file__); "
                 "print(u.find_spec('torch') is None)"], user, env)
    assert str(env_dir) in where.stdout.splitlines()[0] and where.stdout.splitlines()[1] == "True", where.stdout
    # one import name: the wheel adds `moeforge` (and its dist-info) to site-packages, nothing else
    [site] = (env_dir / "lib").glob("python3*/site-packages")
    baseline = {"pip", "_distutils_hack", "setuptools", "pkg_resources", "distutils-precedence.pth"}
    with zipfile.ZipFile(wheel) as whl:
        tops = {name.split("/")[0] for name in whl.namelist()}
    assert tops == {"moeforge", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert not (site / "compiler").exists() and not (site / "runtime").exists() and not (site / "moeforge_data").exists()
    # a `runtime` and a `compiler` of the user's own, in the directory the launch runs in, change nothing
    (user / "runtime.py").write_text("raise SystemExit('the user runtime.py ran')\n")
    (user / "compiler").mkdir()
    (user / "compiler" / "__init__.py").write_text("raise SystemExit('the user compiler ran')\n")
    # (-c, like -m, puts the current directory first on sys.path; this venv has no torch to train with)
    shadow = _sh(["python", "-c", "import moeforge.runtime.plan.document as p, moeforge.compiler.cli as c; "
                  "print(p.__file__); print(c.__file__)"], user, env)
    assert shadow.returncode == 0 and "user" not in shadow.stdout + shadow.stderr, shadow.stdout + shadow.stderr
    assert all(line.startswith(f"{site}/moeforge/") for line in shadow.stdout.splitlines()), shadow.stdout

    def moeforge(*args, rc=0):
        proc = _sh(["moeforge", *args], user, env)
        assert proc.returncode == rc, (args, proc.stdout[-3000:], proc.stderr[-3000:])
        return proc.stdout

    moeforge("init")
    moeforge("new", "platform", "box")
    (user / "recipes" / "mine.yaml").write_text(RECIPE)
    (user / "recipes" / "sub").mkdir()
    assert "0 error(s)" in moeforge("check")
    moeforge("check", "recipes/platforms/box.yaml")
    assert "build/mine/" in moeforge("compile", "mine")
    assert (user / "build" / "mine" / "plan.json").is_file()
    out = moeforge("explain", "mine")
    assert "platform box from recipes/platforms/box.yaml" in out
    assert "model tiny-moe from builtin:recipes/models/tiny-moe.yaml: " + str(env_dir) in out
    # from a subdirectory, the root is found upward
    proc = _sh(["moeforge", "explain", "builtin:tiny-moe/cpu"], user / "recipes" / "sub", env)
    assert proc.returncode == 0 and "platform cpu from builtin:" in proc.stdout, proc.stdout + proc.stderr
    # the launch: in the project root, the installed runtime (no checkout on PYTHONPATH)
    proc = _sh(["moeforge", "launch", "build/mine", "--target", "print"], user, env)
    assert proc.returncode == 0, proc.stderr
    also = _sh(["moeforge", "launch", "mine", "--target", "print"], user, env)  # a recipe: compiled first
    assert also.returncode == 0 and also.stdout.endswith(proc.stdout), also.stdout + also.stderr
    assert f"local: cd {user}" in proc.stdout.replace("'", "") and "MOEFORGE_HOME" not in proc.stdout, proc.stdout
    assert "torchrun.sh" in proc.stdout and "sbatch" in proc.stdout
    # the plan is readable by the installed runtime's schema (no torch needed for that)
    proc = _sh(["python", "-c", "import json, jsonschema; from moeforge.runtime.plan.document import SCHEMA_FILE; "
                "s = json.loads(SCHEMA_FILE.read_text()); "
                "jsonschema.validate(json.load(open('build/mine/plan.json')), s); print(SCHEMA_FILE)"], user, env)
    assert proc.returncode == 0 and f"{site}/moeforge/schemas/plan.v1.json" in proc.stdout, proc.stdout + proc.stderr
    # import a launch script and plan a layout: both write into this project, and what they write compiles
    script = REPO / "tests" / "data" / "import" / "qwen3_30b_a3b_h100.sh"
    assert f"wrote {user}/recipes/imported/qwen3_30b_a3b_h100-imported.yaml" in moeforge("import", str(script))
    _schema_of(user / "recipes/imported/qwen3_30b_a3b_h100-imported.yaml")  # the installed wheel's schemas
    moeforge("compile", "imported/qwen3_30b_a3b_h100-imported", "--quiet")
    # a Hugging Face config (the wheel carries the transformers classes' defaults it reads)
    hf = REPO / "tests" / "fidelity" / "hf_configs" / "classes" / "mixtral-8x7b.json"
    assert f"wrote {user}/recipes/models/mixtral.yaml" in moeforge("import", str(hf), "--name", "mixtral")
    moeforge("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--top", "1",
             "--emit", "recipes/planned.yaml")
    assert "build/planned/" in moeforge("compile", "planned")
    assert not list(env_dir.rglob("*-imported.yaml")) and not list(env_dir.rglob("planned.yaml"))
