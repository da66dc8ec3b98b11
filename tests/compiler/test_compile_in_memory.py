"""Issue 45: driver.compile() takes a recipe document held in memory (a dict, named for its diagnostics), and the
planner compiles its candidates that way: no temporary YAML file per candidate."""
import copy
import pathlib
from pathlib import Path

import pytest
import yaml

from moeforge.compiler import driver
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.planner import search

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "recipes" / "tiny-moe" / "cpu.yaml"


def test_a_dict_compiles_to_the_plan_of_the_same_file():
    doc = yaml.safe_load(CPU.read_text())
    kept = copy.deepcopy(doc)
    from_memory = driver.compile(doc, name="tiny-moe/cpu")
    from_file = driver.compile(CPU)
    def values(plan):  # without where each value was written: a file's lines, the dict's name
        return {**plan, "recipe": {k: v for k, v in plan["recipe"].items() if k != "path"},
                "decisions": [{k: v for k, v in d.items() if k != "where"} for d in plan["decisions"]]}
    assert values(from_memory.plan) == values(from_file.plan)  # the id too: it stands where its name's file would
    assert from_memory.plan["recipe"]["path"] == "tiny-moe/cpu"
    assert doc == kept, "the caller's document is not changed"
    assert from_memory.composed.file == "tiny-moe/cpu" and from_memory.composed.recipe_id == "tiny-moe/cpu"
    overridden = driver.compile(doc, ["parallelism.ep=1", "moe.overlap.ep_comm=false"], name="x")
    assert overridden.plan["layout"]["ep"] == 1 and overridden.composed.recipe_id == "x"


def test_a_bad_dict_is_placed_at_its_name():
    doc = yaml.safe_load(CPU.read_text())
    doc["parallelism"]["tp"] = "two"
    with pytest.raises(CompileError) as exc:
        driver.compile(doc, name="candidate")
    assert any(d.pos is not None and d.pos.file == "candidate" for d in exc.value.diagnostics)
    with pytest.raises(CompileError) as exc:
        driver.compile(dict(doc, parallelism={"tp": 1}), name="../escape")
    assert [d.code for d in exc.value.diagnostics] == ["E_RECIPE_ID"]
    with pytest.raises(CompileError) as exc:
        driver.compile(dict(yaml.safe_load(CPU.read_text()), extends="no-such"), name="c")
    assert [d.code for d in exc.value.diagnostics] == ["E_EXTENDS_NOT_FOUND"]


def test_the_planner_writes_no_file(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the planner wrote a file")

    monkeypatch.setenv("MOEFORGE_NO_CACHE", "1")  # the validity cache's own files are not the planner's
    monkeypatch.setattr(pathlib.Path, "write_text", refuse)
    monkeypatch.setattr(pathlib.Path, "write_bytes", refuse)
    monkeypatch.setattr("tempfile.NamedTemporaryFile", refuse)
    monkeypatch.setattr("tempfile.mkdtemp", refuse)
    monkeypatch.setattr("tempfile.mkstemp", refuse)
    result = search.search(search.setting("qwen3-30b-a3b", "h100", 16), top=2)
    assert result.ranked and result.compiles >= 1
