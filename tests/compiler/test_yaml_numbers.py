"""Numbers as people write them: YAML 1.1 reads `3e-4` as a string; recipes, --set and lint-config
read it as a number (quoted, it stays a string)."""
from moeforge.compiler.recipe.compose import parse_override
from moeforge.compiler.lint.flat_config import parse
from moeforge.compiler.recipe.load import load_text
from moeforge.compiler.driver import load, resolve


def test_recipe_values():
    doc = load_text("lr: 3e-4\nbig: 1E5\nneg: -2.5e-3\nquoted: '3e-4'\nint: 12\nplain: 1.0\n", "x.yaml")
    assert doc.data == {"lr": 3e-4, "big": 1e5, "neg": -2.5e-3, "quoted": "3e-4", "int": 12, "plain": 1.0}


def test_set_override_compiles():
    assert parse_override("schedule.lr=3e-4") == (("schedule", "lr"), 3e-4)
    r = resolve(load("tiny-moe/cpu", ["schedule.lr=3e-4"]))
    assert r.env["lr"] == 3e-4


def test_lint_config_input():
    data, _ = parse("lr: 3e-4\nmoe_aux_loss_coeff: 1e-3\n", "config.yaml")
    assert data == {"lr": 3e-4, "moe_aux_loss_coeff": 1e-3}
