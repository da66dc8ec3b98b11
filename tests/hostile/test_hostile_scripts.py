"""Shell metacharacters in every recipe string that reaches a generated script, end to end.

tests/launch/test_templates.py renders the templates with hostile *contexts*; here hostile
*recipes* go through the whole compiler (load, schema, solve, plan, emit) and the generated
files are then checked and run:

- torchrun.sh, launch.sbatch and env.sh pass `bash -n` (and shellcheck -S warning);
- torchrun.sh and launch.sbatch, run under fake python3/srun/scontrol that record their argv,
  hand every string over verbatim as one argument and never execute it (no `pwned-*` file);
- each #SBATCH line carries exactly one directive (no newline opens a second one);
- pytorchjob.yaml parses back to the very same strings; megatron-lm.args and bridge.overrides
  (consumed line by line: `grep -v '^#' | xargs`, Hydra overrides) get no injected lines;
- strings the schema restricts (the recipe `name`) are refused with a located diagnostic, and
  no build directory appears.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import hostilelib as H
from moeforge.compiler.diagnostics import CompileError


def shellcheck_bin() -> str | None:
    for candidate in (Path(sys.executable).with_name("shellcheck"), shutil.which("shellcheck")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return None


def check_static(build: Path) -> None:
    for name in H.SHELL_OUTPUTS:
        H.bash_n(build / name)
    sc = shellcheck_bin()
    if sc:
        for name in H.SHELL_OUTPUTS:
            proc = subprocess.run([sc, "-S", "warning", "-s", "bash", str(build / name)], capture_output=True,
                                  text=True, timeout=60)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    args = (build / "megatron-lm.args").read_text()
    for line in H.non_comment_lines(args):
        assert line.startswith("--"), f"megatron-lm.args: a line that is not a flag: {line!r}"
    overrides = (build / "bridge.overrides").read_text()
    for line in H.non_comment_lines(overrides):
        key = line.split("=", 1)[0].removeprefix("++")  # Hydra's force-add form is part of the grammar
        assert "=" in line and key.replace(".", "").replace("_", "").isalnum(), \
            f"bridge.overrides: a line that is not key=value: {line!r}"
    json.loads((build / "plan.json").read_text())


def pytorchjob_images(files: dict) -> list[str]:
    [job] = [d for d in yaml.safe_load_all(files["pytorchjob.yaml"]) if d]
    return [c["image"] for spec in job["spec"]["pytorchReplicaSpecs"].values()
            for c in spec["template"]["spec"]["containers"]]


def run_both(root: Path, build: Path, tmp: Path, marker_dir: Path, env: dict | None = None) -> tuple[dict, dict]:
    """Run torchrun.sh (from elsewhere) and launch.sbatch (in the root, as a Slurm job would)."""
    bin_dir, out = H.shims(tmp)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    proc = H.run_script(build / "torchrun.sh", bin_dir, elsewhere, env)
    assert proc.returncode == 0, proc.stderr
    torchrun = H.recorded(out, "python3")
    proc = H.run_script(build / "launch.sbatch", bin_dir, root,
                        {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_SUBMIT_DIR": str(root),
                         **(env or {})})
    assert proc.returncode == 0, proc.stderr
    srun = H.recorded(out, "srun")
    assert not H.pwned(marker_dir, root, elsewhere), "a recipe string was executed"
    return torchrun, srun


def launched(text: str, root: Path, bin_dir_parent: Path, extra: dict | None = None) -> str:
    """What launch.sbatch makes of a mount: each ${NAME} expanded in the job's environment (H.run_script's,
    bash's own IFS), everything else as written."""
    env = {"PATH": f"{bin_dir_parent / 'shim-bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(root),
           "IFS": " \t\n", **(extra or {})}
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env[m.group(1)], text)


@pytest.fixture(scope="module")
def marker_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("m")


def _launch_cases(marker_dir: Path) -> list[dict]:
    p = H.payloads(marker_dir)
    short = [s for s in p if len(s) <= 128]
    cases = []
    for i in range(len(p)):  # every payload once in each field, rotating
        cases.append({"partition": short[i % len(short)], "account": short[(i + 3) % len(short)],
                      "container_image": p[i], "container_mounts": [p[(i + 1) % len(p)], "/data:/data"],
                      "extra_sbatch_args": [p[(i + 2) % len(p)], "--exclusive", p[i]]})
    return cases


@pytest.mark.parametrize("case", range(len(H.payloads(Path("/m")))))
def test_launch_strings_are_inert(sandbox, marker_dir, tmp_path, case):
    launch = _launch_cases(marker_dir)[case]
    rid = f"hostile/launch-{case}"
    (sandbox / "recipes" / f"{rid}.yaml").write_text(H.recipe_with({"launch": launch}), encoding="utf-8")
    files = H.compile_here(sandbox, rid)
    build = sandbox / "build" / rid
    assert sorted(p.name for p in build.iterdir()) == sorted(H.OUTPUTS)
    check_static(build)

    sbatch = files["launch.sbatch"]
    lines = H.sbatch_lines(sbatch)
    expected = [f"#SBATCH --partition={json.dumps(launch['partition'])}",
                f"#SBATCH --account={json.dumps(launch['account'])}"]
    expected += [f"#SBATCH {json.dumps(a)}" for a in launch["extra_sbatch_args"]]
    for line in expected:
        assert line in lines, f"missing or altered directive {line!r}"
    # job-name nodes ntasks-per-node time output error open-mode
    assert len(lines) == 7 + len(expected), f"an injected #SBATCH line: {lines}"

    torchrun, srun = run_both(sandbox, build, tmp_path, marker_dir)
    assert torchrun["argv"][:2] == ["-m", "torch.distributed.run"]
    assert torchrun["argv"][-3:] == [f"build/{rid}/plan.json", "--out", f"build/{rid}"]
    assert f"--container-image={launch['container_image']}" in srun["argv"]
    mounts = [f"{sandbox}:{sandbox}"] + [launched(m, sandbox, tmp_path) for m in launch["container_mounts"]]
    assert f"--container-mounts={','.join(mounts)}" in srun["argv"]

    images = pytorchjob_images(files)
    assert images and all(i == launch["container_image"] for i in images)


def test_platform_container_image_is_inert(fresh_sandbox, marker_dir, tmp_path):
    """The platform document's container_image (used when the recipe names none)."""
    image = H.payloads(marker_dir)[0] + H.payloads(marker_dir)[5]
    cpu = yaml.safe_load((fresh_sandbox / "recipes" / "platforms" / "cpu.yaml").read_text())
    cpu.update(name="evil", container_image=image)
    (fresh_sandbox / "recipes" / "platforms" / "evil.yaml").write_text(yaml.safe_dump(cpu, sort_keys=False))
    rid = "hostile/platform-image"
    (fresh_sandbox / "recipes" / f"{rid}.yaml").write_text(H.recipe_with({"platform": "evil"}), encoding="utf-8")
    files = H.compile_here(fresh_sandbox, rid)
    build = fresh_sandbox / "build" / rid
    check_static(build)
    _, srun = run_both(fresh_sandbox, build, tmp_path, marker_dir)
    assert f"--container-image={image}" in srun["argv"]
    assert pytorchjob_images(files) == [image] * len(pytorchjob_images(files)) != []


def test_hostile_launch_through_the_cli(sandbox, marker_dir, tmp_path, moeforge_cli):
    """The same, once through `python -m moeforge.compiler compile` as a process (exit code, stdout, files)."""
    launch = _launch_cases(marker_dir)[5]
    rid = "hostile/launch-cli"
    (sandbox / "recipes" / f"{rid}.yaml").write_text(H.recipe_with({"launch": launch}), encoding="utf-8")
    proc = moeforge_cli(sandbox, "compile", rid)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    build = sandbox / "build" / rid
    check_static(build)
    run_both(sandbox, build, tmp_path, marker_dir)


@pytest.mark.parametrize("index", range(len(H.payloads(Path("/m")))))
def test_hostile_recipe_name_is_refused(sandbox, marker_dir, index):
    """`name:` reaches #SBATCH --job-name and the PyTorchJob: the schema keeps it a plain name."""
    name = H.payloads(marker_dir)[index]
    rid = f"hostile/name-{index}"
    text = H.recipe_with({"name": name})
    (sandbox / "recipes" / f"{rid}.yaml").write_text(text, encoding="utf-8")
    name_line = next(i for i, line in enumerate(text.split("\n"), 1) if line.startswith("name:"))
    for overrides in ([], [f"name={name}"]):
        if overrides:
            (sandbox / "recipes" / f"{rid}.yaml").write_text(H.TINY, encoding="utf-8")
        with pytest.raises(CompileError) as err:
            H.compile_here(sandbox, rid, overrides)
        [d] = err.value.diagnostics
        assert d.code == "E_SCHEMA", d.render()
        if overrides:
            assert d.pos.file == f"--set name={name}", d.render()
        else:
            assert (d.pos.file, d.pos.line) == (f"recipes/{rid}.yaml", name_line), d.render()
    assert not (sandbox / "build" / rid).exists()


RECIPE_IDS = ["a b", "$(touch pwned-id-1)", "`touch pwned-id-2`", "q'x", "x;touch pwned-id-3", "x\"y", "-x",
              "a\n--save=pwned-id-4",  # BUG-13 (fixed): the newline opened a line in megatron-lm.args
              os.fsdecode(b"\xff"), "\u2028", "x\r", "-", "..x", "a\tb"]


@pytest.mark.parametrize("stem", RECIPE_IDS)
def test_hostile_recipe_file_names(fresh_sandbox, marker_dir, tmp_path, stem):
    """The recipe id (its path under recipes/) reaches build_dir, comments and job names: either a
    located refusal, or a build whose every output is inert."""
    rid = f"hostile/{stem}"
    (fresh_sandbox / "recipes" / f"{rid}.yaml").write_text(H.TINY, encoding="utf-8")
    try:
        H.compile_here(fresh_sandbox, rid)
    except CompileError as exc:
        assert all(d.pos and d.pos.file for d in exc.diagnostics)
        return
    build = fresh_sandbox / "build" / rid
    check_static(build)
    torchrun, _ = run_both(fresh_sandbox, build, tmp_path, marker_dir)
    assert torchrun["argv"][-3:] == [f"build/{rid}/plan.json", "--out", f"build/{rid}"]
    assert not H.pwned(fresh_sandbox), "a recipe id was executed"


def test_recipe_file_name_not_utf8(fresh_sandbox, moeforge_cli):
    """(BUG-13, fixed) recipes/hostile/<0xff>.yaml: `compile hostile/<0xff>` said 'moeforge:
    internal error: UnicodeEncodeError: ... surrogates not allowed' (exit 2) when the build_dir
    reached a file. Now: a located refusal of the recipe id (or a build), through the CLI."""
    rid = "hostile/" + os.fsdecode(b"\xff")
    (fresh_sandbox / "recipes" / f"{rid}.yaml").write_text(H.TINY, encoding="utf-8")
    proc = moeforge_cli(fresh_sandbox, "compile", rid)
    assert proc.returncode in (0, 1)


# --- paths in the plan: checkpoint.save, data.paths, logging.tensorboard, launch.logs_dir -------------

MEGATRON_LM = ["platform.software.megatron_core=0.19.2", "runtime.entrypoint=megatron-lm"]


def sbatch_reads(value: str) -> str:
    """What sbatch makes of `"<json of value>"` on an #SBATCH line: each backslash escapes the next character
    (so a JSON \\n becomes n: altered, never a second line)."""
    chars, out = iter(json.dumps(value)[1:-1]), []
    for c in chars:
        out.append(next(chars) if c == "\\" else c)
    return "".join(out)


def _path_cases(marker_dir: Path) -> list[dict]:
    p = H.payloads(marker_dir)
    one_line = [s for s in p if not set(s) & {"\n", "\r"}]  # the schema refuses line breaks in paths
    n = len(one_line)
    return [{"save": f"/ck pt/{one_line[i]}", "data": [f"${{DATA_ROOT}}/{one_line[(i + 1) % n]}/prefix",
                                                      f"/abs/{one_line[(i + 2) % n]}/prefix"],
             "tensorboard": f"/tb/{one_line[(i + 3) % n]}", "logs_dir": f"logs/{p[i % len(p)]}"}
            for i in range(n)]


@pytest.mark.parametrize("case", range(len(_path_cases(Path("/m")))))
def test_plan_paths_are_inert(sandbox, marker_dir, tmp_path, case):
    """Shell characters in the plan's paths and the logs directory: the scripts pass bash -n and
    shellcheck, hand every path over verbatim (mounts: only ${NAME} is expanded), and run nothing."""
    from moeforge.compiler.commands import launch as L

    c = _path_cases(marker_dir)[case]
    rid = f"hostile/paths-{case}"
    recipe = H.recipe_with({"schema": "moeforge/recipe/v3",
                            "checkpoint": {"save": c["save"], "interval": 10},
                            "data": {"kind": "indexed", "paths": c["data"]},
                            "logging": {"tensorboard": c["tensorboard"]},
                            "launch": {"logs_dir": c["logs_dir"], "container_image": "img:1"}})
    (sandbox / "recipes" / f"{rid}.yaml").write_text(recipe, encoding="utf-8")
    files = H.compile_here(sandbox, rid, MEGATRON_LM)
    build = sandbox / "build" / rid
    check_static(build)

    lines = H.sbatch_lines(files["launch.sbatch"])
    pattern = c["logs_dir"].rstrip("/").replace("%", "%%")
    for line in (f"#SBATCH --output={json.dumps(pattern + '/%x-%j.out')}",
                 f"#SBATCH --error={json.dumps(pattern + '/%x-%j.err')}",
                 "#SBATCH --requeue", '#SBATCH --signal="B:USR1@120"'):
        assert line in lines, f"missing or altered directive {line!r}: {lines}"
    assert len(lines) == 9, f"an injected #SBATCH line: {lines}"  # 7 + requeue + signal (CPU: no exclusive)
    assert L.logs_dir(build) == Path(sbatch_reads(pattern).replace("%%", "%"))  # where make launch creates it

    data_root = "/data root/$(touch pwned-dr)"
    torchrun, srun = run_both(sandbox, build, tmp_path, marker_dir, {"DATA_ROOT": data_root})
    assert torchrun["argv"][-4:] == ["moeforge.runtime.megatron", f"build/{rid}/plan.json", "--out", f"build/{rid}"]
    dirs = list(dict.fromkeys([c["data"][0].rsplit("/", 1)[0], c["data"][1].rsplit("/", 1)[0], c["save"].rstrip("/"),
                               c["tensorboard"].rstrip("/")]))
    mounts = [f"{sandbox}:{sandbox}"] + [launched(f"{d}:{d}", sandbox, tmp_path, {"DATA_ROOT": data_root})
                                         for d in dirs]
    assert srun["argv"][srun["argv"].index("python3"):] == [
        "python3", "-m", "moeforge.runtime.megatron", f"build/{rid}/plan.json", "--out", f"build/{rid}"]
    assert f"--container-mounts={','.join(mounts)}" in srun["argv"]

    [job] = [d for d in yaml.safe_load_all(files["pytorchjob.yaml"]) if d]
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v] == dirs
    assert pod["containers"][0]["command"][-4:] == ["moeforge.runtime.megatron", f"build/{rid}/plan.json", "--out",
                                                    f"build/{rid}"]
    assert not H.pwned(marker_dir, sandbox, tmp_path), "a path was executed"
