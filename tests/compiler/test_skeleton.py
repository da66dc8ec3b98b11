"""The walking skeleton's compiler half: the embedded default resolves, bad pins are refused."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import load, resolve

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_recipe_resolves_with_overlap_on_and_delayed_wgrad_off_by_rule():
    r = resolve(load("tiny-moe/cpu"))
    assert r.env["overlap_moe_expert_parallel_comm"] is True
    assert r.env["moe_token_dispatcher_type"] == "alltoall"
    assert r.env["expert_model_parallel_size"] == 2
    dwg = r.decisions["delay_wgrad_compute"]
    assert (dwg.value, dwg.source, dwg.rule) == (False, "rule", "DELAY_WGRAD_NEEDS_TE_BACKWARD_DW")
    assert r.decisions["overlap_moe_expert_parallel_comm"].where == "recipes/tiny-moe/cpu.yaml:22:14"


def test_delayed_wgrad_pinned_on_is_refused_on_the_cpu_platform():
    with pytest.raises(CompileError) as err:
        resolve(load("tiny-moe/cpu", ["moe.overlap.delay_wgrad=true"]))
    codes = [d.code for d in err.value.diagnostics]
    assert codes == ["DELAY_WGRAD_NEEDS_TE_BACKWARD_DW"]


def test_ep1_with_overlap_pinned_is_rejected_before_anything_runs(tmp_path):
    recipe = ROOT / "recipes" / "tiny-moe" / "cpu.yaml"
    bad = ROOT / "recipes" / "tiny-moe" / "_test_ep1.yaml"
    bad.write_text(recipe.read_text().replace("  ep: 2", "  ep: 1"))
    try:
        out = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/_test_ep1",
                              "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    finally:
        bad.unlink()
    assert out.returncode == 1
    assert "Traceback" not in out.stdout + out.stderr
    first = out.stdout.splitlines()[0]
    # the pin that enables overlap is where the error points; the EP pin is named with its line
    assert first.startswith("recipes/tiny-moe/_test_ep1.yaml:22:14: error[EP_OVERLAP_NEEDS_EP]")
    assert "parallelism.ep = 1  (recipes/tiny-moe/_test_ep1.yaml:16:7)" in out.stdout
    assert not (tmp_path / "tiny-moe").exists()


def test_compile_writes_a_plan_that_matches_its_schema(tmp_path):
    from moeforge.compiler.cli import main
    from moeforge.compiler.recipe.validate import validator

    assert main(["compile", "tiny-moe/cpu", "--out", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / "tiny-moe" / "cpu" / "plan.json").read_text())
    assert list(validator("plan.v1.json").iter_errors(plan)) == []
    tc = plan["transformer_config"]
    assert tc["overlap_moe_expert_parallel_comm"] is True and tc["delay_wgrad_compute"] is False
    assert plan["runtime"]["schedule"] == "combined_1f1b"
    assert plan["layout"] == {"world_size": 2, "nnodes": 1, "nproc_per_node": 2, "tp": 1, "pp": 1, "vpp": None,
                              "cp": 1, "ep": 2, "etp": 1, "dp": 2, "edp": 1}
    assert plan["training"]["num_microbatches"] == 2
