"""Issue 14: a CLI that fits habits (help everywhere, launch/dryrun subcommands, explain/rules JSON, diff of the
environment, matrix that scales nodes and fits 120 columns, migrate --check, old-schema notes, tabs named) and
provenance that is never wrong."""
import argparse
import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from moeforge.compiler import cli
from moeforge.compiler.commands import runtime as runtime_commands
from moeforge.compiler.knobs import table as K
from moeforge.compiler.cli import main
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.recipe.load import load_text
from moeforge.compiler.driver import load, resolve

ROOT = Path(__file__).resolve().parents[2]
VPP_CASE = ["parallelism.pp=4", "parallelism.ep=4", "moe.overlap.ep_comm=true"]


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _walk(parser: argparse.ArgumentParser, path=("moeforge",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), "(subcommand)", helps.get(name)
                yield from _walk(sub, path + (name,))
        else:
            yield path, "/".join(action.option_strings) or action.dest, action.help


def test_every_subcommand_and_option_has_a_description():
    missing = [f"{' '.join(p)} {opt}" for p, opt, text in _walk(cli.parser())
               if not text or text == argparse.SUPPRESS]
    assert missing == []
    names = {p[1] for p, _, _ in _walk(cli.parser()) if len(p) > 1}
    assert {"compile", "explain", "check", "rules", "diff", "matrix", "migrate", "launch", "dryrun"} <= names


@pytest.mark.parametrize("command", ["launch", "dryrun", "rules", "migrate", "explain"])
def test_subcommand_help_exits_0(command):
    rc, out, _ = run(command, "--help")
    assert rc == 0 and "usage: moeforge" in out


# --- launch / dryrun -----------------------------------------------------------------------------------------

def test_launch_compiles_a_recipe_and_prints_the_exact_commands(tmp_path):
    rc, out, err = run("launch", "tiny-moe/cpu", "--target", "print", "--out", str(tmp_path))
    assert rc == 0, err
    build = tmp_path / "tiny-moe" / "cpu"
    assert (build / "plan.json").exists()
    lines = out.splitlines()
    assert lines[0].startswith("compiled tiny-moe/cpu")
    assert any(line.startswith("local: ") and str(build / "torchrun.sh") in line for line in lines)
    assert any(line.startswith("slurm: ") and "sbatch --wait" in line for line in lines)
    rc, out2, _ = run("launch", str(build), "--target", "print")  # a build directory runs as it is
    assert rc == 0 and [x for x in out2.splitlines() if x.startswith("local: ")] == \
        [x for x in lines if x.startswith("local: ")]
    rc, _, err = run("launch", str(build), "--set", "parallelism.ep=1")
    assert rc == 2 and "--set applies to a recipe" in err
    rc, out, _ = run("launch", str(build), "--needs-venv312")
    assert rc == 0 and out.strip() == "no"


def test_launch_of_an_unknown_recipe_is_a_located_error():
    rc, out, _ = run("launch", "no-such/recipe", "--target", "print")
    assert rc == 1 and "error[" in out


def test_make_launch_calls_moeforge_launch():
    text = (ROOT / "Makefile").read_text()
    block = text[text.index("\nlaunch:"):text.index("\nmatrix:")]
    assert "$(MOEFORGE) launch --target $(TARGET) $(BUILD_DIR)" in block
    assert "\nBUILD_DIR = $(or $(OUT),build)/$(RECIPE)\n" in text  # build/<recipe> unless OUT says otherwise
    assert "moeforge.compiler.commands.launch" not in block


def test_dryrun_runs_the_runtime_in_a_subprocess_of_this_interpreter(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(runtime_commands, "_run_runtime",
                        lambda module, rest, prog, env=None, quiet=False: seen.append((module, rest, quiet)) or 0)
    (tmp_path / "plan.json").write_text("{}")
    assert main(["dryrun", str(tmp_path), "--rank", "0,-1", "--local-spec"]) == 0
    (module, rest, quiet), = seen
    assert module == "moeforge.runtime.dryrun" and quiet  # the runtime writes its JSON to --out; moeforge prints it
    assert rest[:4] == [str(tmp_path / "plan.json"), "--rank", "0,-1", "--local-spec"] and rest[4] == "--out"


def test_dryrun_report_carries_the_compilers_memory_estimate(tmp_path, monkeypatch, capsys):
    """The runtime reports the shard it built; `moeforge dryrun` adds the one memory model's estimate."""
    import json

    plan = json.loads((ROOT / "tests" / "golden" / "qwen3-30b-a3b" / "h100-bf16" / "plan.json").read_text())
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    from moeforge.compiler.estimate import memory
    from moeforge.compiler.knobs.layout import Layout

    counts = memory.rank_parameters(plan["transformer_config"], plan["model"], Layout.from_plan(plan["layout"]), 0)
    shard = {"plan": str(tmp_path / "plan.json"), "rank": 0, "coordinates": {"pp": 0},
             "parameters": {"total": counts["total"]}}

    def fake(module, rest, prog, env=None, quiet=False):
        Path(rest[rest.index("--out") + 1]).write_text(json.dumps(shard))
        return 0
    monkeypatch.setattr(runtime_commands, "_run_runtime", fake)
    assert main(["dryrun", str(tmp_path), "--out", str(tmp_path / "report.json")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "report.json").read_text())
    mem = printed["memory_estimate"]
    est, _ = memory.peak(plan)  # PP1: rank 0 is the only stage
    assert mem["total_bytes"] == est.total and mem["parameters_match"]
    assert mem["source"].startswith("compiler/estimate/memory.py")


def test_the_compiler_never_imports_torch_for_dryrun():
    import subprocess
    import sys

    code = ("import sys\nfrom moeforge.compiler import cli\nfrom moeforge.compiler.commands import runtime as runtime_commands\nruntime_commands._run_runtime = lambda *a, **k: 0\n"
            "cli.main(['dryrun', 'x/plan.json'])\nassert 'torch' not in sys.modules and 'megatron' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr


# --- explain / provenance ------------------------------------------------------------------------------------

def test_explain_format_json_is_json():
    rc, out, _ = run("explain", "tiny-moe/cpu", "--format", "json")
    data = json.loads(out)
    assert rc == 0 and data["recipe"] == "tiny-moe/cpu"
    dw = next(d for d in data["decisions"] if d["knob"] == "moe.overlap.delay_wgrad")
    assert dw["value"] is False and dw["source"] == "rule" and dw["rule"] == "DELAY_WGRAD_NEEDS_TE_BACKWARD_DW"


def test_explain_changed_shows_only_what_differs_from_the_defaults():
    rc, out, _ = run("explain", "tiny-moe/cpu", "--changed", "--format", "json")
    rows = json.loads(out)["decisions"]
    assert rc == 0 and rows
    assert all(d["value"] != K.BY_FIELD[d["field"]].default for d in rows)
    knobs = {d["knob"] for d in rows}
    assert "parallelism.ep" in knobs and "training.seed" not in knobs
    _, full, _ = run("explain", "tiny-moe/cpu")
    _, text, _ = run("explain", "tiny-moe/cpu", "--changed")
    assert len(text.splitlines()) < len(full.splitlines()) and "training.seed " not in text


def test_vpp_chosen_for_ep_overlap_names_the_rule_everywhere():
    from moeforge.compiler.targets.emit import render
    from moeforge.compiler.targets.plan import build

    r = resolve(load("qwen3-30b-a3b/h100-bf16", VPP_CASE))
    d = r.decisions["virtual_pipeline_model_parallel_size"]
    assert d.value not in (None, 1)
    assert (d.source, d.rule) == ("rule", "EP_OVERLAP_NEEDS_VPP") and "is excluded" in d.reason
    plan = build(r)
    [row] = [x for x in plan["decisions"] if x["knob"] == "parallelism.vpp"]
    assert row["source"] == "rule" and row["rule"] == "EP_OVERLAP_NEEDS_VPP"
    md = render(plan, r.composed.data, "build/x")["EXPLAIN.md"]
    assert "parallelism.vpp" in md and "EP_OVERLAP_NEEDS_VPP" in md
    _, out, _ = run("explain", "qwen3-30b-a3b/h100-bf16", *sum((["--set", s] for s in VPP_CASE), []))
    [line] = [x for x in out.splitlines() if x.startswith("parallelism.vpp ")]
    assert "EP_OVERLAP_NEEDS_VPP" in line and "megatron-core default" not in line


def _catalogue():
    from moeforge.compiler.commands.check import recipe_files

    return [str(p.relative_to(ROOT / "recipes").with_suffix("")) for p in recipe_files([ROOT / "recipes"])]


@pytest.mark.parametrize("overrides", [[], VPP_CASE], ids=["as-written", "pp4-ep-overlap"])
def test_every_auto_knob_names_a_rule_or_preference_or_is_the_default(overrides):
    recipes = _catalogue() if not overrides else ["qwen3-30b-a3b/h100-bf16"]
    for rid in recipes:
        r = resolve(load(rid, overrides))
        for name in r.auto:
            d = r.decisions[name]
            if d.source == "default":
                assert d.value == K.BY_FIELD[name].default, (rid, name, d)
            elif d.source in ("rule", "preference"):
                assert d.rule, (rid, name, d)
            else:
                assert d.source in ("derived", "solver"), (rid, name, d)


# --- rules ---------------------------------------------------------------------------------------------------

def test_rules_filters_by_id_and_prints_json():
    rc, out, _ = run("rules", "EP_OVERLAP_NEEDS_VPP", "--format", "json")
    data = json.loads(out)
    assert rc == 0 and [r["id"] for r in data["rules"]] == ["EP_OVERLAP_NEEDS_VPP"] and data["preferences"] == []
    rc, out, _ = run("rules", "ep_overlap_*", "--format", "json")
    ids = [r["id"] for r in json.loads(out)["rules"]]
    assert len(ids) > 3 and all(i.startswith("EP_OVERLAP_") for i in ids)
    rc, out, _ = run("rules", "PREFER_P2P_OVERLAP_WITH_VPP")
    assert rc == 0 and out.startswith("PREFER_P2P_OVERLAP_WITH_VPP  [preference")
    rc, _, err = run("rules", "EP_OVERLAP_NEEDS_VP")
    assert rc == 2 and "did you mean EP_OVERLAP_NEEDS_VPP" in err


# --- YAML ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,line,col", [("a:\n\tb: 1\n", 2, 1), ("a:\n  b: 1\n  \tc: 2\n", 3, 3),
                                           ("\tname: x\n", 1, 1), ("a:\n  - 1\n\t- 2\n", 3, 1)])
def test_a_tab_in_the_indentation_says_tab_with_its_position(text, line, col):
    with pytest.raises(CompileError) as exc:
        load_text(text, "r.yaml")
    [d] = exc.value.diagnostics
    assert d.code == "E_YAML_TAB" and "tab" in d.message and (d.pos.line, d.pos.col) == (line, col)


def test_tabs_inside_values_and_other_syntax_errors_are_unchanged():
    assert load_text('x: "a\\tb"\ny: [1,\t2]\n', "r.yaml").data == {"x": "a\tb", "y": [1, 2]}
    with pytest.raises(CompileError) as exc:
        load_text("a: [1\n", "r.yaml")
    assert exc.value.diagnostics[0].code == "E_YAML_SYNTAX"


# --- migrate --check / old schema notes ----------------------------------------------------------------------

def _v2(text: str) -> str:
    out = text.replace("schema: moeforge/recipe/v3", "schema: moeforge/recipe/v2").replace("recipe.v3.json",
                                                                                            "recipe.v2.json")
    return out.replace("\ndata:\n  kind:", "\n  data:").replace("\nschedule:\n  lr:", "\n  lr:")


def test_migrate_check_lists_what_would_change_and_changes_nothing(tmp_path):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(_v2((ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text()))
    shutil.copy(ROOT / "recipes" / "tiny-moe" / "cpu.yaml", new)
    before = old.read_text()
    rc, out, _ = run("migrate", "--check", str(old), str(new))
    assert rc == 1 and f"{old}: would be migrated" in out and str(new) not in out.replace(str(old), "")
    assert old.read_text() == before
    rc, out, _ = run("migrate", "--check", str(new))
    assert rc == 0 and "already current" in out
    assert run("migrate", str(old))[0] == 0 and run("migrate", "--check", str(old))[0] == 0


@pytest.fixture
def v2_recipe():
    path = ROOT / "recipes" / "tiny-moe" / "_v2_for_test.yaml"
    path.write_text(_v2((ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text()))
    yield path
    path.unlink()


def test_check_notes_a_document_on_an_old_schema_version(v2_recipe):
    rc, out, _ = run("check", str(v2_recipe), "--format", "json", "--advice")
    report = json.loads(out)
    assert rc == 0 and report["errors"] == 0
    [note] = [d for ds in report["results"].values() for d in ds if d["code"] == "SCHEMA_OLD_VERSION"]
    assert note["severity"] == "advice" and "moeforge/recipe/v2" in note["message"]
    assert note["pos"]["line"] > 0 and "moeforge migrate" in note["help"]
    rc, out, _ = run("check", str(ROOT / "recipes" / "tiny-moe" / "cpu.yaml"))
    assert rc == 0 and "SCHEMA_OLD_VERSION" not in out


# --- matrix --------------------------------------------------------------------------------------------------

def test_matrix_scales_nodes_to_each_platforms_gpus_per_node():
    from moeforge.compiler.commands import matrix

    rows, plats, table = matrix.build([str(ROOT / "recipes" / "qwen3-30b-a3b" / "h100-bf16.yaml")])
    assert rows == ["qwen3-30b-a3b/h100-bf16"]
    world = {p: table[(rows[0], p)].get("world") for p in plats}
    assert world["h100"] == world["gb200-nvl72"] == world["b200"] == 16  # 2 x 8 on H100 = 4 x 4 on GB200
    assert table[(rows[0], "gb200-nvl72")]["nodes"] == 4 and table[(rows[0], "h100")]["nodes"] == 2
    assert matrix.scaled_nodes(2, 8) == 1 and matrix.scaled_nodes(16, 4) == 4 and matrix.scaled_nodes(18, 4) == 5


def test_matrix_error_cells_name_the_same_rules_as_check():
    from moeforge.compiler.commands import matrix

    c = matrix.cell(ROOT / "recipes" / "qwen3-30b-a3b" / "h100-bf16.yaml", "cpu", 8)
    try:
        resolve(load(ROOT / "recipes" / "qwen3-30b-a3b" / "h100-bf16.yaml", ["platform=cpu", "resources.nodes=8"]))
        full = []
    except CompileError as exc:
        full = [d.code for d in exc.diagnostics if d.is_error]
    assert c["status"] == "error" and c["errors"] == full


def test_check_takes_ids_as_compile_does_and_names_a_file_that_is_no_recipe(monkeypatch):
    """`check tiny-moe/cpu` checks recipes/tiny-moe/cpu.yaml (compile's spelling); `check README.md` says the file is
    not a recipe instead of looking for recipes/README.md.yaml; a name that is neither says what to give."""
    monkeypatch.chdir(ROOT)
    assert run("check", "tiny-moe/cpu")[:2] == (0, "checked 1 document(s): 0 error(s), 0 warning(s), 0 advice\n")
    rc, out, _ = run("check", "README.md")
    assert rc == 1 and "'README.md' is a file but not a recipe" in out and "recipes/README.md.yaml" not in out
    rc, out, _ = run("check", "nosuch/x")
    assert rc == 1 and "no such file" in out and "recipe id (MODEL/NAME" in out


def test_a_missing_recipe_path_is_named_as_given(monkeypatch):
    """`compile recipes/x.yaml` (and plan-layout --evaluate) name the missing file as the user wrote it, not as
    recipes/recipes/x.yaml, and say what to give, as check does."""
    monkeypatch.chdir(ROOT)
    for argv in (("compile", "recipes/nosuch.yaml"), ("plan-layout", "--evaluate", "recipes/nosuch.yaml")):
        rc, out, err = run(*argv)
        text = out + err
        assert rc != 0 and "no such file: recipes/nosuch.yaml" in text, text
        assert "recipes/recipes" not in text and "recipe id (MODEL/NAME" in text, text


def test_a_path_that_cannot_be_written_is_one_line_not_an_internal_error(tmp_path):
    """`init DIR` where DIR cannot be made is the user's path, not a bug in moeforge: one line naming it, exit 1."""
    (tmp_path / "plain-file").write_text("x")
    rc, out, err = run("init", str(tmp_path / "plain-file" / "project"))
    assert rc == 1 and "internal error" not in err and "Traceback" not in err
    assert err == f"moeforge: error: {tmp_path}/plain-file/project: Not a directory: choose a path you can write " \
                  "to\n"


def test_a_symlinked_build_directory_is_built_through(tmp_path):
    """build/<recipe> linked to a scratch directory: the build is written there (the link stays), the scripts
    name that place, and what a run left there stays (compile once replaced the link and the scripts named
    the old target, which had no plan.json)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "report.json").write_text('{"steps": 3}\n')
    (tmp_path / "build" / "tiny-moe").mkdir(parents=True)
    link = tmp_path / "build" / "tiny-moe" / "cpu"
    link.symlink_to(scratch)
    rc, out, err = run("compile", "tiny-moe/cpu", "--out", str(tmp_path / "build"))
    assert rc == 0, out + err
    assert link.is_symlink() and (scratch / "plan.json").exists()
    assert (scratch / "report.json").read_text() == '{"steps": 3}\n'
    assert f"build_dir={scratch}" in (scratch / "launch.sbatch").read_text()
