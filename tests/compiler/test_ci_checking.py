"""CI-grade checking: machine-readable output, GitHub annotations, diff and matrix."""
import io
import json
import shutil
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from moeforge.compiler.cli import main
from moeforge.compiler.recipe.validate import validator

ROOT = Path(__file__).resolve().parents[2]


def run(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(list(argv))
    return rc, out.getvalue()


def test_check_of_the_catalogue_is_clean_and_its_json_matches_the_schema():
    rc, out = run("check", str(ROOT / "recipes"), "--format", "json")
    report = json.loads(out)
    assert list(validator("check-report.v1.json").iter_errors(report)) == []
    assert rc == 0 and report["errors"] == 0 and report["recipes"] >= 25


@pytest.fixture
def broken(tmp_path):
    path = ROOT / "recipes" / "tiny-moe" / "_broken_for_test.yaml"
    text = (ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text()
    path.write_text(text.replace("  ep: 2", "  ep: 1").replace("  seed: 1234", "  sed: 1234"))
    yield path
    path.unlink()


def test_a_broken_recipe_gives_github_annotations(broken):
    rc, out = run("check", str(broken), "--format", "github")
    assert rc == 1
    lines = out.splitlines()
    assert lines == [
        "::error file=recipes/tiny-moe/_broken_for_test.yaml,line=29,col=3,title=E_UNKNOWN_KEY::"
        "unknown key 'sed' in training%0Ahelp: did you mean 'seed'?",
    ]
    fixed = broken.read_text().replace("  sed: 1234", "  seed: 1234")
    broken.write_text(fixed)
    rc, out = run("check", str(broken), "--format", "github")
    assert rc == 1
    [line] = out.splitlines()
    assert line.startswith("::error file=recipes/tiny-moe/_broken_for_test.yaml,line=22,col=14,"
                           "title=EP_OVERLAP_NEEDS_EP::EP overlap needs expert parallelism (EP > 1)%0A")
    assert "parallelism.ep = 1  (recipes/tiny-moe/_broken_for_test.yaml:16:7)" in line


def test_strict_turns_silent_megatron_behaviour_into_errors(tmp_path):
    # the shipped catalogue pins what runs (it passes --strict, as .ci/github-actions.example.yml runs it);
    # TP overlap asked for at TP=1 is what Megatron-Bridge drops without an error
    tpo = ("compile", "qwen3-30b-a3b/h100-bf16", "--set", "overlap.tp_comm=true", "--out", str(tmp_path))
    rc, out = run(*tpo)
    assert rc == 0 and "warning[TP_OVERLAP_NEEDS_TP]" in out
    rc, out = run(*tpo, "--strict")
    assert rc == 1 and "error[TP_OVERLAP_NEEDS_TP]" in out
    rc, _ = run("check", str(ROOT / "recipes" / "qwen3-30b-a3b" / "h100-bf16.yaml"), "--strict")
    assert rc == 0


def test_usage_errors_exit_2():
    assert run("compile")[0] == 2
    assert run("no-such-command")[0] == 2


def test_diff_shows_each_differing_knob_with_where_it_came_from():
    base = "qwen3-30b-a3b/h100-bf16-ep16-alltoall"
    rc, out = run("diff", base, f"{base}-overlap", "--format", "json")
    rows = json.loads(out)
    assert rc == 1  # they differ, as diff(1) says
    # the knob, and the launch environment it changes (plan.json's env section)
    assert [r["knob"] for r in rows] == ["moe.overlap.ep_comm", "env NVTE_BWD_LAYERNORM_SM_MARGIN",
                                         "env NVTE_FWD_LAYERNORM_SM_MARGIN"]
    row = rows[0]
    assert (rows[1]["a"], rows[1]["b"]) == (None, "20") and "keep SMs free" in rows[1]["b_from"]
    _, text = run("diff", base, f"{base}-overlap")
    assert 'env NVTE_FWD_LAYERNORM_SM_MARGIN: (unset) -> "20"' in text
    assert (row["a"], row["b"]) == (False, True)
    assert row["b_from"].startswith("recipes/qwen3-30b-a3b/h100-bf16-ep16-alltoall-overlap.yaml:")
    rc, out = run("diff", base, base)
    assert rc == 0 and "resolve to the same configuration" in out


def test_diff_of_two_compiled_plans(tmp_path):
    run("compile", "tiny-moe/cpu", "--out", str(tmp_path / "a"))
    run("compile", "tiny-moe/cpu", "--out", str(tmp_path / "b"), "--set", "moe.overlap.ep_comm=false")
    rc, out = run("diff", str(tmp_path / "a" / "tiny-moe" / "cpu"), str(tmp_path / "b" / "tiny-moe" / "cpu"))
    assert rc == 1 and "moe.overlap.ep_comm: true -> false" in out


def test_matrix_text_and_html(tmp_path):
    recipes = tmp_path / "r"
    recipes.mkdir()
    shutil.copy(ROOT / "recipes" / "qwen3-30b-a3b" / "h100-bf16.yaml", recipes / "x.yaml")
    page = tmp_path / "m.html"
    rc, out = run("matrix", str(ROOT / "recipes" / "qwen3-30b-a3b" / "h100-bf16.yaml"), "--html", str(page))
    assert rc == 0
    header, row = out.splitlines()[:2]
    assert header.split()[1:] == ["b200", "b300", "cpu", "cpu-cluster", "gb200-nvl72", "gb300-nvl72", "h100", "h200"]
    assert row.startswith("qwen3-30b-a3b/h100-bf16 ") and "hep O-" in row  # flex/HybridEP, EP overlap on
    assert "ERR E1" in row  # the CPU platform cannot run a flex/TE recipe
    assert "hep flex/HybridEP" in out and "O EP overlap on" in out and "\nE1 " in out  # the legend
    assert all(len(line) <= 120 for line in out.splitlines())
    html = page.read_text()
    assert html.startswith("<!doctype html>") and "<table>" in html and 'class="err"' in html
    assert "dispatcher flex/hybridep; EP overlap on" in html


def test_version():
    from moeforge.compiler import __version__

    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", "--version"], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == f"moeforge {__version__}"
