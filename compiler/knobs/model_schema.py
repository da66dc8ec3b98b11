"""The model document's JSON Schema (schemas/model.v1.json), generated from the model rows of the knob table
(compiler/knobs/model.py): `make schemas` writes it beside the recipe's, tests/compiler/test_recipe_schema.py fails
when the checked-in file is not what this module generates.

What a model key accepts is its row's (kind, domain, Form), as for a recipe (recipe_schema.value_schema). What no
row holds is the document's own and is written here: its identity keys, the keys read by the compiler's model
arithmetic but not emitted as one field (activation, gated_linear_unit, ...), the order of keys, and the
cross-key constraint an editor should show (activation swiglu is gated).

    python -m moeforge.compiler.knobs.model_schema [--check]
"""
from __future__ import annotations

import json
import sys

from moeforge.compiler.knobs.model import MODEL_KNOBS
from moeforge.compiler.knobs.recipe_schema import NAME_PATTERN, value_schema, write_or_check
from moeforge.compiler.recipe.validate import KINDS
from moeforge.compiler.resources import SCHEMAS

VERSION = KINDS["model"]
FILE = SCHEMAS / f"model.v{VERSION}.json"
BY_PATH = {k.path: k for k in MODEL_KNOBS}

# The document's own keys (no row holds them), by path under model.
DOCUMENT = {
    "schema": {"const": f"moeforge/model/v{VERSION}"},
    "name": {"type": "string", "pattern": NAME_PATTERN},
    "family": {"type": "string"},
    "description": {"type": "string"},
    "source": {"type": "string"},
    "architecture.max_position_embeddings": {"type": "integer", "minimum": 1},
    "architecture.gated_linear_unit": {
        "type": "boolean",
        "description": "A gated MLP: fc1 produces two halves and the MLP computes act(x_gate) * x_linear. megatron-core "
                       "TransformerConfig.gated_linear_unit (default false); Megatron-LM --swiglu / --quick-geglu. "
                       "activation swiglu implies it."},
    "architecture.activation": {
        "enum": ["gelu", "swiglu", "silu", "squared_relu", "quick_gelu"],
        "description": "The MLP activation: swiglu is SiLU with a gated linear unit; gelu, silu, squared_relu and "
                       "quick_gelu are megatron-core's functions of those names, gated when gated_linear_unit is true. "
                       "megatron-core TransformerConfig.activation_func (default gelu); Megatron-LM --swiglu, "
                       "--quick-geglu, --squared-relu (no flag: GELU)."},
    "architecture.untie_embeddings_and_output_weights": {"type": "boolean"},
    "architecture.linear_attention": {
        "type": ["object", "null"],
        "description": "Free-form summary of a hybrid linear-attention layout, for readers; not emitted. The "
                       "megatron-core keys experimental_attention_variant, linear_attention_freq and linear_* state it."},
    "moe.layer_freq": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "array", "items": {"enum": [0, 1]}}]},
}

# The order an editor and `moeforge new model` list the keys in; a row not listed goes last in its section.
LAYOUT = {
    "architecture": (
        "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
        "vocab_size", "max_position_embeddings", "normalization", "norm_epsilon", "layernorm_zero_centered_gamma",
        "gated_linear_unit", "activation", "glu_linear_offset", "activation_func_clamp_value", "add_bias_linear",
        "add_qkv_bias", "qk_layernorm", "softmax_type", "window_size", "window_attn_skip_freq",
        "attention_output_gate", "position_embedding_type", "rotary_base", "rotary_percent", "rope_scaling",
        "rope_scaling_factor", "yarn_rotary_scaling_factor", "yarn_original_max_position_embeddings",
        "yarn_beta_fast", "yarn_beta_slow", "yarn_mscale", "yarn_mscale_all_dim",
        "yarn_correction_range_round_to_int", "untie_embeddings_and_output_weights", "hidden_dropout",
        "attention_dropout", "init_method_std", "multi_latent_attention", "q_lora_rank", "kv_lora_rank",
        "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rope_type", "rotary_scaling_factor",
        "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
        "linear_attention", "experimental_attention_variant", "linear_attention_freq", "linear_conv_kernel_dim",
        "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads"),
    "moe": (
        "num_experts", "router_topk", "ffn_hidden_size", "shared_expert_intermediate_size", "layer_freq",
        "router_load_balancing_type", "aux_loss_coeff", "router_score_function", "router_pre_softmax",
        "router_enable_expert_bias", "router_bias_update_rate", "router_num_groups", "router_group_topk",
        "router_topk_scaling_factor", "shared_expert_gate"),
}
REQUIRED = {"": ("schema", "name", "architecture", "moe"),
            "architecture": ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"),
            "moe": ("num_experts", "router_topk")}
# activation swiglu is SiLU with a gated linear unit: gated_linear_unit false beside it is a contradiction
SWIGLU_IS_GATED = {
    "if": {"properties": {"activation": {"const": "swiglu"}}, "required": ["activation"]},
    "then": {"properties": {"gated_linear_unit": {
        "const": True,
        "description": "activation swiglu is SiLU with a gated linear unit, so the MLP would be gated whatever "
                       "gated_linear_unit says: drop gated_linear_unit: false (SwiGLU), or set activation: silu for "
                       "a plain SiLU MLP"}}}}


# A row whose document takes any number where megatron-core's field is an int: Hugging Face's rope_theta is a
# float, and a model file has always been free to write it as one.
ANY_NUMBER = {"architecture.rotary_base"}


def _value(path: str) -> dict:
    if path in DOCUMENT:
        return DOCUMENT[path]
    node = value_schema(BY_PATH[f"model.{path}"])
    if path in ANY_NUMBER:
        node = {k: v for k, v in node.items() if k != "minimum"}
        node["type"] = ["number", "null"] if isinstance(node["type"], list) else "number"
    return node


def _section(name: str) -> dict:
    keys = list(LAYOUT[name])
    keys += [k.path.split(".")[-1] for k in MODEL_KNOBS
             if k.path.startswith(f"model.{name}.") and k.path.split(".")[-1] not in keys]
    node = {"type": "object", "additionalProperties": False,
            "properties": {key: _value(f"{name}.{key}") for key in keys}, "required": list(REQUIRED[name])}
    return {**node, **SWIGLU_IS_GATED} if name == "architecture" else node


def schema() -> dict:
    """The model document's JSON Schema, as a dict in the order it is written."""
    properties = {key: DOCUMENT[key] for key in ("schema", "name", "family", "description", "source")}
    properties.update({name: _section(name) for name in LAYOUT})
    properties["mtp_num_layers"] = _value("mtp_num_layers")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://moeforge.dev/schemas/model.v{VERSION}.json", "title": f"moeforge model v{VERSION}",
            "type": "object", "additionalProperties": False, "properties": properties, "required": list(REQUIRED[""])}


def text() -> str:
    """The schema file's exact text, one place for both writing it and `--check`."""
    return json.dumps(schema(), indent=2) + "\n"


def main(argv=None) -> int:
    """Write schemas/model.v1.json (`make schemas`), or with --check exit 1 when it differs from the knob table."""
    return write_or_check(FILE, text(), "the model rows", argv)


if __name__ == "__main__":
    sys.exit(main())
