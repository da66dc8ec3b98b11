"""Broken recipes give located diagnostics, all at once, and never a traceback."""
import shutil
from pathlib import Path

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.recipe.load import load_text
from moeforge.compiler.driver import load, resolve

ROOT = Path(__file__).resolve().parents[2]
TINY = (ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text()


@pytest.fixture
def recipes(tmp_path):
    root = tmp_path / "recipes"
    (root / "x").mkdir(parents=True)
    shutil.copytree(ROOT / "recipes" / "platforms", root / "platforms")
    shutil.copytree(ROOT / "recipes" / "models", root / "models")
    return root


def _errors(root, name, text=None, overrides=()):
    if text is not None:
        (root / f"{name}.yaml").write_text(text)
    with pytest.raises(CompileError) as err:
        resolve(load(name, overrides, root))
    return err.value.diagnostics


def test_unknown_key_gets_a_suggestion_at_its_line(recipes):
    [d] = _errors(recipes, "x/r", TINY.replace("  dispatcher: alltoall", "  dispatchr: alltoall"))
    assert d.code == "E_UNKNOWN_KEY"
    assert (d.pos.file, d.pos.line) == ("recipes/x/r.yaml", 20)
    assert "did you mean 'dispatcher'?" in d.help


def test_wrong_type_is_located(recipes):
    [d] = _errors(recipes, "x/r", TINY.replace("  ep: 2", "  ep: two"))
    assert d.code == "E_SCHEMA" and d.pos.line == 16 and "parallelism.ep" in d.message


def test_a_setting_moeforge_cannot_plan_says_why(recipes):
    """optimizer.megatron_fsdp: true reached no output (the launches ran megatron-core's DDP): refused, with why."""
    [d] = _errors(recipes, "x/r", TINY, overrides=["optimizer.megatron_fsdp=true"])
    assert d.code == "E_SCHEMA" and d.message == "optimizer.megatron_fsdp: true is not supported (only false)"
    assert d.help.startswith("Megatron-FSDP is not planned yet") and d.pos.file == "--set optimizer.megatron_fsdp=true"


def test_swiglu_stated_ungated_is_refused_where_it_is_stated(recipes):
    """activation swiglu with gated_linear_unit: false built a gated MLP (swiglu is SiLU, gated) and said nothing:
    the contradiction is refused at the model file's gated_linear_unit line, with both ways out."""
    model = recipes / "models" / "tiny-moe.yaml"
    model.write_text(model.read_text().replace("  gated_linear_unit: false\n",
                                               "  gated_linear_unit: false\n  activation: swiglu\n"))
    [d] = _errors(recipes, "x/r", TINY)
    assert d.code == "E_SCHEMA" and d.message == "architecture.gated_linear_unit: false is not supported (only true)"
    assert (d.pos.file, d.pos.line) == ("recipes/models/tiny-moe.yaml", 18)
    assert "drop gated_linear_unit: false" in d.help and "activation: silu" in d.help
    # a plain SiLU MLP, and SwiGLU with the gate stated or implied, are what they say
    from moeforge.compiler.targets.plan import build
    (recipes / "x" / "r.yaml").write_text(TINY)
    for sets, want in ((["model.architecture.activation=silu"], ("silu", False)),
                       (["model.architecture.activation=swiglu", "model.architecture.gated_linear_unit=true"],
                        ("silu", True))):
        tc = build(resolve(load("x/r", sets, recipes)))["transformer_config"]
        assert (tc["activation_func"], tc["gated_linear_unit"]) == want, sets


def test_several_errors_are_reported_together(recipes):
    text = TINY.replace("  ep: 2", "  ep: 0").replace("  dispatcher: alltoall", "  dispatcher: a2a") \
               .replace("  seed: 1234", "  sed: 1234")
    diags = _errors(recipes, "x/r", text)
    assert sorted(d.pos.line for d in diags) == [16, 20, 29]


def test_extends_cycle_is_detected(recipes):
    (recipes / "x" / "a.yaml").write_text(TINY + "extends: b.yaml\n")
    (recipes / "x" / "b.yaml").write_text(TINY + "extends: a.yaml\n")
    [d] = _errors(recipes, "x/a")
    assert d.code == "E_EXTENDS_CYCLE"
    assert "recipes/x/a.yaml -> recipes/x/b.yaml -> recipes/x/a.yaml" in d.message


def test_extends_cannot_escape_recipes(recipes, tmp_path):
    (tmp_path / "outside.yaml").write_text(TINY)
    [d] = _errors(recipes, "x/r", TINY + "extends: ../../outside.yaml\n")
    assert d.code == "E_PATH_ESCAPE" and d.pos.line == TINY.count("\n") + 1


def test_symlink_out_of_recipes_is_refused(recipes, tmp_path):
    (tmp_path / "outside.yaml").write_text(TINY)
    (recipes / "x" / "link.yaml").symlink_to(tmp_path / "outside.yaml")
    [d] = _errors(recipes, "x/r", TINY + "extends: link.yaml\n")
    assert d.code == "E_PATH_ESCAPE"


def test_platform_reference_cannot_escape(recipes):
    [d] = _errors(recipes, "x/r", TINY.replace("platform: cpu", "platform: ../../etc/passwd"))
    assert d.code == "E_REFERENCE_NAME" and d.pos.line == 8


def test_alias_bomb_is_bounded():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 9):
        bomb += f"{'abcdefghij'[i]}: &{'abcdefghij'[i]} [" + ", ".join([f"*{'abcdefghij'[i - 1]}"] * 10) + "]\n"
    with pytest.raises(CompileError) as err:
        load_text(bomb, "bomb.yaml")
    assert err.value.diagnostics[0].code == "E_YAML_TOO_MANY_NODES"


@pytest.mark.parametrize("text", ["a: !!python/object:os.system {}\n", "a: !custom 1\n", "a: !!binary aGk=\n",
                                  "a: !!set {x}\n"])
def test_arbitrary_tags_are_refused(text):
    with pytest.raises(CompileError) as err:
        load_text(text, "t.yaml")
    [d] = err.value.diagnostics
    assert d.code == "E_YAML_TAG" and d.pos.line == 1


def test_non_utf8_and_deep_and_huge_documents():
    with pytest.raises(CompileError) as err:
        load_text(b"a: 1\nb: \xff\xfe\n", "bad.yaml")
    assert err.value.diagnostics[0].code == "E_YAML_ENCODING" and err.value.diagnostics[0].pos.line == 2
    with pytest.raises(CompileError) as err:
        load_text("a: " + "[" * 200 + "]" * 200, "deep.yaml")
    assert err.value.diagnostics[0].code == "E_YAML_TOO_DEEP"
    with pytest.raises(CompileError) as err:
        load_text(b"a: " + b"x" * (2 << 20), "huge.yaml")
    assert err.value.diagnostics[0].code == "E_YAML_TOO_LARGE"


def test_duplicate_keys_are_errors():
    with pytest.raises(CompileError) as err:
        load_text("a: 1\nb: 2\na: 3\n", "d.yaml")
    assert err.value.diagnostics[0].code == "E_YAML_DUPLICATE_KEY" and err.value.diagnostics[0].pos.line == 3


def test_overrides_are_validated_and_located(recipes):
    diags = _errors(recipes, "x/r", TINY, ["parallelism.ep=banana"])
    assert [d.pos.file for d in diags] == ["--set parallelism.ep=banana"]


def test_every_shipped_schema_is_a_valid_draft_2020_12_schema():
    import json

    import jsonschema

    from moeforge.compiler.recipe.validate import SCHEMAS

    names = sorted(p.name for p in SCHEMAS.glob("*.json"))
    assert {"recipe.v1.json", "recipe.v2.json", "recipe.v3.json", "platform.v1.json", "model.v1.json", "plan.v1.json",
            "check-report.v1.json", "pytorchjob.json"} <= set(names)
    for name in names:
        schema = json.loads((SCHEMAS / name).read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", name
        jsonschema.Draft202012Validator.check_schema(schema)
