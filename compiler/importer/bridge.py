"""`moeforge import` of a Megatron-Bridge override list (Hydra `key=value` lines, as compiler/targets/bridge_overrides.py
writes them and Bridge's scripts take them). Each path is read back through the knob table; the plan fields
bridge_overrides writes under their own names (`model.<field>`, `ddp.<field>`, `optimizer.<field>`) are the
model's activation, MoE layer pattern and embedding tie, or copies and derivations of values read elsewhere.
A Bridge list states only what it overrides, and never the world size: the import takes the fewest nodes the
layout fits, and says so."""
from __future__ import annotations

import yaml

from moeforge.compiler.knobs import table as K
from moeforge.compiler.targets.bridge_overrides import BRIDGE_FIXED, BRIDGE_SECTIONS, dtype_in_override, recipe_variables
from moeforge.compiler.importer.documents import has_path, nodes, put, put_path
from moeforge.compiler.importer.validate_args import why_no_knob
from moeforge.compiler.targets.megatron_args import COPIES, DERIVED, RUNTIME_ONLY

STRUCTURE = ("mixed_precision", "comm_overlap")  # nodes the list rebuilds, not settings
STRUCTURE_FIELDS = ("._target_", "params_dtype", "pipeline_dtype", "autocast_dtype")  # follow precision.dtype
SECTION_OF = {template.split(".")[0]: section for section, template in BRIDGE_SECTIONS.items() if section != "model"}
# plan fields with a Bridge path of their own name that a model document states in its own words
MODEL_WORDS = {"activation_func", "gated_linear_unit", "moe_layer_freq", "share_embeddings_and_output_weights"}
BYTE_EOD = "tokenizer.null_tokenizer_eod_id"  # a NullTokenizer ending documents with K.BYTE_EOD is the byte one


def _value(raw: str):
    raw = recipe_variables(raw)
    try:
        return dtype_in_override(raw) or (yaml.safe_load(raw) if raw else None)
    except yaml.YAMLError:
        return raw


def from_bridge(text: str, platform: dict) -> tuple[dict, dict, list, list]:
    """(recipe body, model body, [(line, why not imported)], decisions)."""
    by_path = {p: k for k in (*K.KNOBS, *K.FACTS) for p in k.bridge_paths}
    fixed = dict(BRIDGE_FIXED)
    recipe, model, bad, decided = {}, {"architecture": {}, "moe": {}}, [], []
    words: dict = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        key, _, raw = s.lstrip("+").partition("=")
        if key in STRUCTURE or key.endswith(STRUCTURE_FIELDS) or fixed.get(key) == raw:
            continue  # the list's own structure, or a value moeforge always writes
        value = _value(raw)
        if key in ("mixed_precision.bf16", "mixed_precision.fp16"):
            if value:
                put(recipe, "precision.dtype", key.rsplit(".", 1)[1])
            continue
        section, _, name = key.partition(".")
        if (section == "model" and name in MODEL_WORDS) or key == BYTE_EOD:
            words[name] = value
            continue
        k = by_path.get(key)
        if k is None:
            owner = COPIES.get((SECTION_OF.get(section, section), name))
            if owner or name in DERIVED:
                continue  # a copy of a value read at its owner's path, or one derived from others
            why = _why_not_read(key, name, value, platform)
            if why:
                bad.append((s, why))
            continue
        if not k.path or k.field in K.COMPUTED:
            bad.append((s, f"moeforge's plan states it, no recipe does: {k.doc or 'derived from other settings'}"))
            continue
        if value is None and (k.default is None or has_path(recipe, model, k.path)):
            continue  # nothing to state, or another path of the same setting
        if k.path.startswith("platform."):  # a platform fact: the recipe names its platform
            fact = platform.get(k.path.split(".", 1)[1])
            if value != fact:
                bad.append((s, f"the platform's {k.path.split('.', 1)[1]} is {fact}"))
            continue
        if k.lm_values and not isinstance(value, (str, dict, list)):
            value = {m: p for p, m in k.lm_values}.get(value, value)
            if value is None:
                continue  # the Megatron spelling of a recipe's unset value (no warm-up: 0 iterations)
        put_path(recipe, model, k.path, k.plan_value(value))
    _model_words(words, model)
    if words.get("null_tokenizer_eod_id") == K.BYTE_EOD and has_path(recipe, model, "tokenizer.type") \
            and recipe["tokenizer"]["type"] is None:
        recipe["tokenizer"]["type"] = "byte"
    recipe.setdefault("precision", {}).setdefault("dtype", "fp32")
    count = nodes(recipe, platform, {}, {}, decided)
    put(recipe, "resources.nodes", count)
    return recipe, model, bad, decided


def _why_not_read(key: str, name: str, value, platform: dict) -> str | None:
    """Why a Bridge path without a knob is not imported (None: it says what a recipe runs anyway)."""
    if key == "model.transformer_impl":
        spec = "transformer_engine" if platform.get("software", {}).get("transformer_engine") else "local"
        return None if value == spec else f"moeforge builds the {spec} layer spec on this platform"
    if key == "optimizer.optimizer":
        return None if value == "adam" else why_no_knob("optimizer")
    if name in RUNTIME_ONLY:
        return None if value is None else f"moeforge's plan states it, no recipe does: {RUNTIME_ONLY[name]}"
    return "no moeforge knob reads this Megatron-Bridge path"


def _model_words(words: dict, model: dict) -> None:
    """The activation, MoE layer pattern and embedding tie as a model document states them."""
    arch = model["architecture"]
    if "activation_func" in words:
        arch.update(K.architecture_activation(words["activation_func"], bool(words.get("gated_linear_unit"))))
    if words.get("moe_layer_freq") is not None:
        model["moe"]["layer_freq"] = words["moe_layer_freq"]
    if words.get("share_embeddings_and_output_weights") is not None:
        arch["untie_embeddings_and_output_weights"] = not words["share_embeddings_and_output_weights"]
