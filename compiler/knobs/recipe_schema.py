"""The recipe's JSON Schema (schemas/recipe.v3.json), generated from the knob table: `make schemas` writes it,
tests/compiler/test_recipe_schema.py fails when the checked-in file is not what this module generates.

What a recipe key accepts is its knob row's: the kind gives the type, the domain the enum, Form (compiler/knobs/
row.py) the bounds, patterns, description and default. What no knob holds is the document's own and is written
here: its identity keys (schema, revision, name, ...), precision.dtype, the launch options the templates read,
the order of sections and keys (what an editor and `moeforge new` list) and each section's description.

    python -m moeforge.compiler.knobs.recipe_schema [--check]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.knobs.row import Knob
from moeforge.compiler.knobs.table import BY_PATH, DEPENDENT_DEFAULTS, KNOBS
from moeforge.compiler.recipe.compose import NAME
from moeforge.compiler.recipe.validate import KINDS
from moeforge.compiler.resources import SCHEMAS

VERSION = KINDS["recipe"]
FILE = SCHEMAS / f"recipe.v{VERSION}.json"


def anchored(regex: str) -> str:
    """A pattern the whole value must match. JSON Schema's `pattern` searches, and python-jsonschema's `$` also
    matches before a final newline (re.search); `$(?!\\n)` is the end of the string in Python and ECMA-262."""
    return f"^{regex}$(?!\\n)"


NAME_PATTERN = anchored(NAME.pattern)  # recipe, platform and model names, as compose resolves them

# The document's own keys (no knob holds them), by path.
DOCUMENT = {
    "schema": {"const": f"moeforge/recipe/v{VERSION}", "description": "document kind and schema version"},
    "revision": {"type": "integer", "minimum": 1, "description": "bump on every change of the recipe"},
    "name": {"type": "string", "pattern": NAME_PATTERN},
    "description": {"type": "string", "maxLength": 2000},
    "extends": {"type": "string", "minLength": 1, "maxLength": 256},
    "platform": {"type": "string", "pattern": NAME_PATTERN},
    "model": {"type": "string", "pattern": NAME_PATTERN},
    "precision.dtype": {"enum": ["bf16", "fp16", "fp32"]},  # compiler/solver/inputs.py DTYPES
    # the launch templates' own options (compiler/targets/emit.py context)
    "launch.partition": {"type": ["string", "null"], "maxLength": 128},
    "launch.account": {"type": ["string", "null"], "maxLength": 128},
    "launch.time": {"type": "string", "pattern": anchored("([0-9]+-)?[0-9]{1,3}:[0-9]{2}:[0-9]{2}")},
    "launch.container_image": {"type": ["string", "null"], "maxLength": 512},
    "launch.container_mounts": {"type": "array", "items": {"type": "string", "maxLength": 1024}},
    "launch.extra_sbatch_args": {"type": "array", "items": {"type": "string", "maxLength": 1024}},
    "launch.master_port": {
        "type": "integer", "minimum": 1024, "maximum": 65535,
        "description": "A fixed rendezvous port. Unset (recommended): torchrun.sh lets torchrun pick a free port at "
                       "launch and launch.sbatch derives one from the Slurm job id, so two runs on one machine never "
                       "collide; MASTER_PORT in the environment overrides either."},
    "launch.k8s_namespace": {"type": "string", "pattern": NAME_PATTERN},
}

# The sections in the order the schema lists them, each with its keys in order: a key is a knob row's last path
# part, a DOCUMENT key's, or a nested section (name, keys, description). A knob row of a section that is not
# listed comes after the listed keys, in table order.
LAYOUT = (
    ("resources", ("nodes",), ""),
    ("parallelism", ("tp", "pp", "cp", "ep", "vpp", "etp", "sp", "pipeline_layout", "first_stage_layers",
                     "last_stage_layers", "account_for_embedding", "account_for_loss", "cp_comm_type"), ""),
    ("precision", ("dtype", "fp8", "fp8_param", "fp4_param", "reuse_grad_buf_for_mxfp8_param_ag", "fp8_recipe", "fp4",
                   "fp4_recipe", "first_last_layers_bf16", "num_layers_at_start_in_bf16",
                   "num_layers_at_end_in_bf16"), ""),
    ("moe", ("dispatcher", "flex_backend", "flex_num_sms", "hybridep_ranks_per_nvlink_domain",
             ("overlap", ("ep_comm", "delay_wgrad", "shared_expert", "dispatch_backward_with_wgrad",
                          "early_attn_memory_release"), ""),
             ("router", ("force_load_balancing", "dtype", "padding_for_quantization"), ""),
             "expert_rank_capacity_factor", "permute_fusion", "grouped_gemm", "pad_expert_input_to_capacity",
             "expert_capacity_factor"), ""),
    ("recompute", ("granularity", "method", "num_layers", "modules", ("offload", ("enabled", "modules"), "")), ""),
    ("cuda_graph", ("impl", "te_rng_tracker", "modules"), ""),
    ("overlap", ("tp_comm", "p2p", "grad_reduce", "param_gather"), ""),
    ("optimizer", ("distributed", "megatron_fsdp", "grad_reduce_in_fp32", "precision_aware", "main_grads_dtype",
                   "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"), ""),
    ("training", ("micro_batch_size", "global_batch_size", "seq_length", "train_iters", "seed",
                  "gradient_accumulation_fusion", "te_op_fuser", "calculate_per_token_loss"), ""),
    ("runtime", ("entrypoint",), "How the plan is run."),
    ("data", ("kind", "paths", "blend", "split", "cache_dir"), "Training data."),
    ("tokenizer", ("type", "path"), "The tokenizer the data was made with."),
    ("checkpoint", ("save", "interval", "load", "keep_last", "async", "format", "scheduler"),
     "Checkpoints (entrypoint megatron-lm)."),
    ("schedule", ("lr", "min_lr", "warmup", "decay", "decay_iters", "wsd_decay_iters", "wsd_decay_style",
                  "weight_decay", "apply_wd_to_qk_layernorm", "clip_grad", "adam_beta1", "adam_beta2", "adam_eps"),
     "Learning rate schedule and optimizer numbers (megatron-core OptimizerConfig, Megatron-LM's scheduler)."),
    ("logging", ("interval", "tensorboard", "wandb"), "Training logs (entrypoint megatron-lm)."),
    ("eval", ("interval", "iters"), "Evaluation on the validation split."),
    ("launch", ("partition", "account", "time", "container_image", "container_mounts", "extra_sbatch_args",
                "master_port", "k8s_namespace", "logs_dir", "signal_margin_s", "exclusive"), ""),
    ("kernels", ("bias_activation_fusion", "masked_softmax_fusion", "bias_dropout_fusion", "apply_rope_fusion",
                 "persist_layer_norm", "attention_softmax_in_fp32", "cross_entropy_loss_fusion",
                 "cross_entropy_fusion_impl", "moe_router_fusion", "attention_backend"),
     "Kernel choices that do not change the math but differ between megatron-core's defaults (off) and "
     "Megatron-LM's (on). auto: on for a GPU platform with Transformer Engine, off otherwise."),
)
TOP = ("schema", "revision", "name", "description", "extends", "platform", "model", "hazards")


def _number(k: Knob, kind: str) -> dict:
    f = k.form
    node: dict = {"type": kind}
    minimum = 1 if f.minimum is None and kind == "integer" and f.exclusive_minimum is None else f.minimum
    for key, value in (("minimum", minimum), ("maximum", f.maximum), ("exclusiveMinimum", f.exclusive_minimum),
                       ("exclusiveMaximum", f.exclusive_maximum)):
        if value is not None:
            node[key] = value
    return node


def _string(k: Knob, nullable: bool) -> dict:
    f = k.form
    node: dict = {"type": ["string", "null"] if nullable else "string"}
    pattern = anchored(f.pattern) if f.pattern else None
    for key, value in (("minLength", f.min_length), ("maxLength", f.max_length), ("pattern", pattern)):
        if value is not None:
            node[key] = value
    return node


def _nullable(k: Knob) -> bool:
    if k.form.nullable is not None:
        return k.form.nullable
    return k.kind == "opt_int" or (k.default is None and k.kind in ("float", "str"))


def _takes_null(node: dict) -> bool:
    """Whether null validates against a generated value's schema."""
    kind = node.get("type")
    return (kind == "null" or (isinstance(kind, list) and "null" in kind) or None in node.get("enum", ())
            or any(_takes_null(alt) for alt in node.get("anyOf", ())))


def _described(node: dict, text: str) -> dict:
    return {**node, "description": text} if text else node


def _shaped(k: Knob) -> dict:
    """The values of a shape of their own (Form.shape)."""
    f = k.form
    if f.shape == "path list":
        return {"type": "array", "minItems": 1, "items": _described(_string(k, False), f.item_description)}
    if f.shape == "blend":
        item = {"type": "object", "additionalProperties": False, "required": ["weight", "path"],
                "properties": {"weight": {"type": "number"},
                               "path": _described(_string(k, False), f.item_description)}}
        return {"type": "array", "minItems": 1, "items": item}
    if f.shape == "iterations or fraction":
        return {"anyOf": [_number(k, "integer"), {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}]}
    if f.shape == "keyword or path":
        return {"anyOf": [{"enum": list(f.values or k.domain)},
                          _described(_string(k, _nullable(k)), f.item_description)]}
    if f.shape == "window":  # [left, right] in tokens, -1 unbounded (model.architecture.window_size)
        return {"anyOf": [{"type": "null"}, {"type": "array", "items": {"type": "integer", "minimum": -1},
                                             "minItems": 2, "maxItems": 2}]}
    if f.shape == "layer pattern":  # every N-th layer, or one 0/1 per layer (window_attn_skip_freq, ...)
        return {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 1},
                          {"type": "array", "items": {"enum": [0, 1]}}]}
    raise ValueError(f"{k.field}: unknown shape {f.shape!r}")


def value_schema(k: Knob) -> dict:
    """The JSON Schema of a knob's value in a recipe: its type from the kind, then Form's constraints, `auto` where
    the solver may decide, its default where the recipe leaving it out means that value, and its description."""
    f = k.form
    values = list(f.values if f.values is not None else k.domain)
    if f.shape:
        node = _shaped(k)
    elif k.kind == "bool":
        node = {"const": values[0]} if len(values) == 1 else \
            {"type": ["boolean", "null"] if f.nullable else "boolean"}
    elif k.kind == "enum":
        node = {"enum": values}
    elif k.kind == "set":
        node = {"anyOf": [{"type": "array", "items": {"enum": values}, "uniqueItems": True}, {"type": "null"}]}
    elif k.kind in ("int", "opt_int"):
        node = _number(k, "integer")
        if _nullable(k):
            node["type"] = ["integer", "null"]
    elif k.kind == "float":
        node = _number(k, "number")
        if _nullable(k):
            node["type"] = ["number", "null"]
    elif k.kind == "str":
        node = _string(k, _nullable(k))
    else:
        raise ValueError(f"{k.field}: no recipe schema for kind {k.kind!r}")
    if k.auto:
        node = {"anyOf": [node, {"const": "auto"}]}
    elif f.default_text is not None:
        node["default"] = f.default_text
    elif k.field not in DEPENDENT_DEFAULTS and (k.default is not None or _takes_null(node)):
        node["default"] = k.default  # left out, it is its default (an auto knob's value is the solver's)
    return _described(node, f.description or k.doc)


def _section(prefix: str, keys: tuple, description: str) -> dict:
    properties = {}
    listed = set()
    for key in keys:
        if isinstance(key, tuple):
            name, inner, text = key
            properties[name] = _section(f"{prefix}{name}.", inner, text)
            listed.add(name)
            continue
        path = prefix + key
        properties[key] = DOCUMENT[path] if path in DOCUMENT else value_schema(BY_PATH[path])
        listed.add(key)
    for k in KNOBS:  # a row of this section the layout does not list yet: after the listed keys
        if k.path and k.path.startswith(prefix) and "." not in k.path[len(prefix):] \
                and k.path[len(prefix):] not in listed:
            properties[k.path[len(prefix):]] = value_schema(k)
    node = {"type": "object", "additionalProperties": False}
    return {**node, **({"description": description} if description else {}), "properties": properties}


def schema() -> dict:
    """The recipe's JSON Schema, as a dict in the order it is written."""
    properties = {key: DOCUMENT[key] if key in DOCUMENT else value_schema(BY_PATH[key]) for key in TOP}
    properties.update({name: _section(f"{name}.", keys, text) for name, keys, text in LAYOUT})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://moeforge.dev/schemas/recipe.v{VERSION}.json", "title": f"moeforge recipe v{VERSION}",
            "type": "object", "additionalProperties": False, "properties": properties,
            "required": ["schema", "revision"]}


def text() -> str:
    """The schema file's exact bytes, generated from the knob table: what --check compares the file with."""
    return json.dumps(schema(), indent=2) + "\n"


def write_or_check(file: Path, wanted: str, source: str, argv=None) -> int:
    """`make schemas` for any generated schema: rewrite `file` atomically, or with --check exit 1 when it lags
    `source` (the rows it is generated from); one behaviour for the recipe and the model schema."""
    args = sys.argv[1:] if argv is None else argv
    if "--check" in args:
        same = file.read_text(encoding="utf-8") == wanted
        print(f"{file}: {'up to date' if same else f'differs from {source}: run make schemas'}")
        return 0 if same else 1
    write_file_atomically(file, wanted)
    print(f"wrote {file}")
    return 0


def main(argv=None) -> int:
    """`make schemas`: rewrite the recipe schema atomically; with --check, exit 1 when it lags the knob table."""
    return write_or_check(FILE, text(), "the knob table", argv)


if __name__ == "__main__":
    sys.exit(main())
