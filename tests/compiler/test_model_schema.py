"""schemas/model.v1.json is generated from the model rows of the knob table (compiler/knobs/model_schema.py,
`make schemas`): the checked-in file is what the generator writes, every row has its key, and the catalogue's
models are accepted while documents that break a row's constraint are refused."""
import copy
import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from moeforge.compiler.knobs import model_schema as MS
from moeforge.compiler.knobs.model import MODEL_KNOBS

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "recipes" / "models").glob("*.yaml"))


def test_the_checked_in_schema_is_the_generated_one():
    assert (ROOT / "schemas" / "model.v1.json").read_text() == MS.text(), "run make schemas"
    assert MS.main(["--check"]) == 0


def test_every_model_row_has_its_key_and_no_key_is_a_stray():
    properties = MS.schema()["properties"]
    for k in MODEL_KNOBS:
        node = properties
        for part in k.path.split(".")[1:-1]:
            node = node[part]["properties"]
        assert k.path.split(".")[-1] in node, k.path
    rows = {k.path.removeprefix("model.") for k in MODEL_KNOBS}
    listed = {f"{s}.{key}" for s, keys in MS.LAYOUT.items() for key in keys}
    assert listed - rows <= set(MS.DOCUMENT), sorted(listed - rows - set(MS.DOCUMENT))
    assert not rows & set(MS.DOCUMENT), "a key is a row and the document's own: one home"


@pytest.fixture(scope="module")
def validator():
    return Draft202012Validator(MS.schema())


def test_the_catalogue_models_are_accepted(validator):
    assert MODELS
    for path in MODELS:
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == [], path.name


# (section, key, value): what each must refuse (the hand-written schema's constraints, kept)
BAD = [("architecture", "num_layers", 0), ("architecture", "num_layers", None), ("architecture", "ffn_hidden_size", None),
       ("architecture", "norm_epsilon", 0), ("architecture", "norm_epsilon", 0.2), ("architecture", "hidden_dropout", 1.5),
       ("architecture", "rotary_percent", 0), ("architecture", "window_size", [1, 2, 3]),
       ("architecture", "window_size", [-2, 0]), ("architecture", "window_attn_skip_freq", [0, 2]),
       ("architecture", "rope_type", None), ("architecture", "experimental_attention_variant", "mamba"),
       ("architecture", "yarn_rotary_scaling_factor", 0.5), ("architecture", "activation", "relu"),
       ("architecture", "no_such_key", 1), ("moe", "num_experts", None), ("moe", "aux_loss_coeff", -0.1),
       ("moe", "layer_freq", [2]), ("moe", "router_score_function", "tanh")]
GOOD = [("architecture", "rotary_base", 1e6), ("architecture", "rope_scaling", None),
        ("architecture", "window_size", None), ("architecture", "window_size", [127, 0]),
        ("architecture", "linear_attention_freq", [1, 1, 0]), ("architecture", "experimental_attention_variant", None),
        ("moe", "layer_freq", 1), ("moe", "shared_expert_intermediate_size", None)]


@pytest.mark.parametrize("section, key, value, ok", [(*b, False) for b in BAD] + [(*g, True) for g in GOOD])
def test_a_row_constraint_is_kept(validator, section, key, value, ok):
    doc = copy.deepcopy(yaml.safe_load(MODELS[0].read_text()))
    doc[section][key] = value
    assert validator.is_valid(doc) is ok


def test_swiglu_with_an_ungated_mlp_is_refused(validator):
    doc = copy.deepcopy(yaml.safe_load(MODELS[0].read_text()))
    doc["architecture"].update(activation="swiglu", gated_linear_unit=False)
    assert not validator.is_valid(doc)
    doc["architecture"]["gated_linear_unit"] = True
    assert validator.is_valid(doc)
