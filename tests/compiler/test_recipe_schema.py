"""schemas/recipe.v3.json is generated from the knob table (compiler/knobs/recipe_schema.py, `make schemas`):
the checked-in file is exactly what the generator writes, every recipe path of the table is in it, and what
it states of a knob (type, enum, default, description) is the knob row's."""
import json

import jsonschema
import pytest

from moeforge.compiler.knobs import recipe_schema as RS
from moeforge.compiler.knobs import table as K


def test_the_checked_in_schema_is_the_generated_one():
    assert RS.FILE.read_text(encoding="utf-8") == RS.text(), "run `make schemas` and commit schemas/recipe.v3.json"


def test_the_generated_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(RS.schema())


def _leaves(node, prefix=()):
    for key, sub in node.get("properties", {}).items():
        if sub.get("type") == "object" and "properties" in sub:
            yield from _leaves(sub, prefix + (key,))
        else:
            yield ".".join(prefix + (key,)), sub


def test_every_recipe_path_of_the_table_is_in_the_schema_once():
    paths = [p for p, _ in _leaves(RS.schema())]
    knobs = {k.path for k in K.KNOBS if k.path and not k.path.startswith("model.")}
    assert len(paths) == len(set(paths))
    assert knobs <= set(paths) and set(paths) - knobs == set(RS.DOCUMENT)


def _accepts(node: dict, value) -> bool:
    return jsonschema.Draft202012Validator(node).is_valid(value)


@pytest.mark.parametrize("path", sorted(k.path for k in K.KNOBS if k.path and not k.path.startswith("model.")))
def test_what_the_schema_says_of_a_knob_is_its_row(path):
    k = K.BY_PATH[path]
    node = dict(_leaves(RS.schema()))[path]
    assert node.get("description") == (k.form.description or k.doc or None)
    if k.kind != "str":  # a string knob takes any string, "auto" too
        assert _accepts(node, "auto") == (k.auto or k.field in K.OPEN_ENUMS or "auto" in k.domain)
    if "default" in node:
        assert node["default"] == (k.form.default_text or k.default)
    if k.kind == "enum":
        assert all(_accepts(node, v) for v in (k.form.values or k.domain))
        assert not _accepts(node, "not-a-value") or k.field in K.OPEN_ENUMS


def test_a_row_that_the_layout_does_not_list_still_gets_its_key(monkeypatch):
    """A knob added to the table (a row edit) appears in the schema without touching the layout."""
    extra = K.Knob("lr_test_knob", "schedule.test_knob", "int", 3, form=K.Form(description="a new knob"))
    monkeypatch.setattr(RS, "KNOBS", K.KNOBS + (extra,))
    monkeypatch.setitem(RS.BY_PATH, extra.path, extra)
    schedule = RS.schema()["properties"]["schedule"]["properties"]
    assert list(schedule)[-1] == "test_knob"
    assert schedule["test_knob"] == {"type": "integer", "minimum": 1, "default": 3, "description": "a new knob"}
    assert json.loads(RS.FILE.read_text())["properties"]["schedule"]["properties"].keys() < schedule.keys()
