"""From a composed recipe to solver input: pins, auto knobs and platform facts.

Recipe paths map to Megatron's field names through the knob table; anything a recipe
leaves out is either `auto` (the solver decides) or Megatron's default (a pin whose
origin says so, so that explanations can name it).
"""
from __future__ import annotations

import re

from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs import pipeline_layout
from moeforge.compiler.recipe.compose import Composed
from moeforge.compiler.knobs.table import AUTO, FACTS, KNOBS, gpu_product
from moeforge.compiler.knobs.layer_pattern import fits_layers, last_layer_linear_attention, last_layer_moe, list_entries
from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.solver.values import Pin

MISSING = object()  # lookup's answer for a path the data does not have
DTYPES = {"bf16": (True, False), "fp16": (False, True), "fp32": (False, False)}


def lookup(data: dict, dotted: str):
    """A value by the knob table's dotted path; MISSING (not None, since null is a value) where the data has none."""
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def pins_and_auto(c: Composed) -> tuple[dict, set]:
    """Split a recipe into pins (value, position and origin, which explanations cite) and the auto knobs to solve."""
    pins: dict[str, Pin] = {}
    auto: set[str] = set()
    dependent = []
    for k in KNOBS:
        if not k.path:
            continue
        value = lookup(c.data, k.path)
        path = tuple(k.path.split("."))
        if value is MISSING and k.field in K.DEPENDENT_DEFAULTS:
            dependent.append(k)  # its default depends on other values: below
            continue
        if value is MISSING or (value == AUTO and k.field not in K.OPEN_ENUMS):  # checkpoint.load: auto is a value
            if k.auto:
                auto.add(k.field)
            else:
                pins[k.field] = Pin(k.default, c.pos(path), "default")  # nearest enclosing section
            continue
        origin = "model" if path[0] == "model" else "pinned"
        pos = c.origins.get(path) or c.pos(path)
        if pos.file.startswith("--set"):
            origin = "override"
        pins[k.field] = Pin(value, pos, origin)
    dtype = lookup(c.data, "precision.dtype")
    bf16, fp16 = DTYPES.get(dtype if dtype is not MISSING else "fp32", (False, False))
    pos = c.origins.get(("precision", "dtype"))
    pins["bf16"] = Pin(bf16, pos, "pinned" if pos else "default")
    pins["fp16"] = Pin(fp16, pos, "pinned" if pos else "default")
    freq = lookup(c.data, "model.moe.layer_freq")
    if freq is not MISSING:  # a per-layer list reads as 1 (all MoE) or 2 (some dense), as lint-config does
        value = (1 if all(freq) else 2) if isinstance(freq, list) else freq
        pins["moe_layer_freq"] = Pin(value, c.pos(("model", "moe", "layer_freq")), "model")
    pins["last_layer_moe"] = Pin(last_layer_moe(1 if freq in (MISSING, None) else freq, pins["num_layers"].value),
                                 c.pos(("model", "moe", "layer_freq")), "fact")
    for name, value in (("moe_layer_freq_entries", list_entries(freq)),
                        ("moe_layer_freq_fits", fits_layers(freq, pins["num_layers"].value))):
        pins[name] = Pin(value, c.pos(("model", "moe", "layer_freq")), "fact")
    platform = facts(c)
    _warmup(pins)
    values = {**{f: p.value for f, p in platform.items()}, **{f: p.value for f, p in pins.items()}}
    for k in dependent:
        pins[k.field] = Pin(K.DEPENDENT_DEFAULTS[k.field](values, recipe_name(c)), c.pos(tuple(k.path.split("."))),
                            "default")
    pins.update(derived_pins(pins))
    pins.update(platform)
    pins.update(derived_facts(pins))
    vpp_from_layout(pins, auto)
    return pins, auto


def vpp_from_layout(pins: dict, auto: set) -> None:
    """Megatron takes VPP from an explicit pipeline layout when none is given; so does the plan, so that
    the runtime, the estimates and the VPP rules see the chunks Megatron builds (and a fix is verified on
    them: compiler/solver/conflicts.py)."""
    vpp = pins.get("virtual_pipeline_model_parallel_size")
    implied = pipeline_layout.implied_vpp(pins["pipeline_layout_stages"].value,
                                          pins["pipeline_model_parallel_size"].value)
    if implied and (vpp is None or vpp.value is None):
        auto.discard("virtual_pipeline_model_parallel_size")
        pins["virtual_pipeline_model_parallel_size"] = Pin(implied, pins["pipeline_layout_stages"].pos, "derived")


def recipe_name(c: Composed) -> str:
    """The run's name (its `name`, else the id with / as -): DEPENDENT_DEFAULTS receive it beside the values."""
    return c.data.get("name") or c.recipe_id.replace("/", "-")


def _warmup(pins: dict) -> None:
    """schedule.warmup: an integer is iterations (lr_warmup_iters), a number in (0, 1) a fraction of the
    decay (lr_warmup_fraction; lr_warmup_iters is then None, as Megatron-LM wants only one of them)."""
    pin = pins.get("lr_warmup_iters")
    fraction = None
    if pin is not None and isinstance(pin.value, float):
        if pin.value.is_integer():
            pins["lr_warmup_iters"] = Pin(int(pin.value), pin.pos, pin.origin)
        else:
            fraction = pin.value
            pins["lr_warmup_iters"] = Pin(None, pin.pos, pin.origin)
    origin = pin.origin if pin is not None and fraction is not None else "default"
    pins["lr_warmup_fraction"] = Pin(fraction, pin.pos if pin is not None else None, origin)


def derived_pins(pins: dict) -> dict[str, Pin]:
    """Knobs the training-I/O values imply (knobs.COMPUTED): the tokenizer's known vocab and end-of-document
    id, and the Megatron-LM companions of checkpointing (persistent worker for async saves, the exit
    signal handler when a checkpoint directory is set, the scheduler switch of checkpoint.scheduler)."""
    tok = pins["tokenizer_kind"].value
    save = pins["save"].value is not None
    vocab = {None: pins["vocab_size"].value, "byte": K.BYTE_VOCAB}.get(tok)
    values = {"tokenizer_vocab_size": vocab, "null_tokenizer_eod_id": K.BYTE_EOD if tok == "byte" else None,
              "use_persistent_ckpt_worker": pins["async_save"].value is True, "exit_signal_handler": save,
              "exit_signal": K.EXIT_SIGNAL if save else K.BY_FIELD["exit_signal"].default,
              **{switch: pins["resume_scheduler"].value == value for value, switch in K.RESUME_SCHEDULERS.items()
                 if switch}}
    # "derived" (explained by the knob's doc) where the value is not the knob's own default
    return {f: Pin(v, None, "default" if v == K.BY_FIELD[f].default else "derived") for f, v in values.items()}


ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", re.ASCII)


def path_strings(value) -> list[str]:
    """The paths in a path-valued knob's value (a string, a list of them, or data.blend's entries)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [p for v in value for p in path_strings(v.get("path") if isinstance(v, dict) else v)]
    return []


def env_vars(values) -> list[str]:
    """The ${VAR} names in these values, in order of first use."""
    out: list[str] = []
    for value in values:
        for path in path_strings(value):
            out += [m for m in ENV_VAR.findall(path) if m not in out]
    return out


def aux_loss_coeff_zero(coeff) -> bool:
    """No auxiliary loss: a coefficient of 0, or a list of them (megatron-core 0.19 takes one per balancing type)."""
    values = coeff if isinstance(coeff, list) else [coeff]
    return all(not isinstance(v, (int, float)) or v == 0 for v in values)


# megatron-core's DSAIndexer sizes (None by default, which it cannot build with): a flat config may state them
DSA_INDEXER_SIZES = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")


def flat_config_facts(env: dict, data: dict) -> dict:
    """derived_facts' twin for a flat Megatron config (lint-config): the facts its own values decide, and APEX as
    facts() defaults it (None: unknown)."""
    layers, te = env.get("num_layers"), env.get("transformer_engine")
    return {"last_layer_moe": last_layer_moe(data.get("moe_layer_freq", 1), layers if isinstance(layers, int) else None),
            "aux_loss_coeff_zero": aux_loss_coeff_zero(env.get("moe_aux_loss_coeff")),
            "dsa_indexer_stated": all(data.get(k) is not None for k in DSA_INDEXER_SIZES),
            "moe_layer_freq_entries": list_entries(data.get("moe_layer_freq")),
            "moe_layer_freq_fits": fits_layers(data.get("moe_layer_freq"), layers),
            "linear_attention_freq_entries": list_entries(env.get("linear_attention_freq")),
            "linear_attention_freq_fits": fits_layers(env.get("linear_attention_freq"), layers),
            "last_layer_linear_attention": last_layer_linear_attention(
                env.get("experimental_attention_variant"), env.get("linear_attention_freq"),
                layers if isinstance(layers, int) else None),
            "apex_installed": te > 0 if isinstance(te, int) else None}


def derived_facts(pins: dict) -> dict[str, Pin]:
    """Facts of the recipe's own values that rules read (knobs.FACTS without a path)."""
    used = [(f, env_vars([pins[f].value])) for f in K.PATH_FIELDS if f in pins]
    names = [n for _, found in used for n in found]
    first = next((f for f, found in used if found), None)
    blend = pins["data_blend"].value if "data_blend" in pins else None
    weights = [e.get("weight") for e in blend if isinstance(e, dict)] if isinstance(blend, list) else []
    lr, min_lr = pins["lr"].value, pins["min_lr"].value
    layout = pins["pipeline_model_parallel_layout"]
    return {
        **{name: Pin(value, layout.pos, "fact") for name, value in pipeline_layout.facts(layout.value).items()},
        "path_env_vars": Pin(", ".join(dict.fromkeys(names)) or None, pins[first].pos if first else None, "fact"),
        "data_blend_weights_positive": Pin(all(isinstance(w, (int, float)) and w > 0 for w in weights),
                                           pins["data_blend"].pos if "data_blend" in pins else None, "fact"),
        "min_lr_at_most_lr": Pin(not (isinstance(lr, (int, float)) and isinstance(min_lr, (int, float))
                                      and min_lr > lr), pins["min_lr"].pos, "fact"),
        "dsa_indexer_stated": Pin(False, None, "fact"),  # the model schema has no fields for them
        "aux_loss_coeff_zero": Pin(aux_loss_coeff_zero(pins["moe_aux_loss_coeff"].value),
                                   pins["moe_aux_loss_coeff"].pos, "fact"),
        "linear_attention_freq_entries": Pin(list_entries(pins["linear_attention_freq"].value),
                                             pins["linear_attention_freq"].pos, "fact"),
        "linear_attention_freq_fits": Pin(fits_layers(pins["linear_attention_freq"].value, pins["num_layers"].value),
                                          pins["linear_attention_freq"].pos, "fact"),
        "last_layer_linear_attention": Pin(last_layer_linear_attention(
            pins["experimental_attention_variant"].value, pins["linear_attention_freq"].value,
            pins["num_layers"].value), pins["linear_attention_freq"].pos, "fact"),
    }


def _model_document(c: Composed) -> dict | None:
    """The model document as its file says it (recipes and --set change the composed copy only)."""
    for doc in c.documents:
        if isinstance(doc.data, dict) and str(doc.data.get("schema", "")).startswith("moeforge/model/"):
            return doc.data
    return None


def facts(c: Composed) -> dict[str, Pin]:
    """The platform facts a recipe states, pinned at their positions: versions as ints, the GPU's major and product."""
    out = {}
    for k in FACTS:
        if k.path is None:
            continue  # facts of the recipe's own values: derived_facts
        raw = lookup(c.data, k.path)
        pos = c.pos(tuple(k.path.split(".")))
        if raw is MISSING:
            raw = None
        if k.kind == "version":
            value = version_int(raw) if raw is not None else 0
        elif k.field == "gpu_major":
            value = int(str(raw).split(".")[0]) if raw else 0
        elif k.field == "gpu_product":
            value = gpu_product(raw)
        elif k.field == "model_document_mla":
            arch = (_model_document(c) or {}).get("architecture")
            value = bool(isinstance(arch, dict) and arch.get("multi_latent_attention") is True)
        elif k.field in ("activation_func", "gated_linear_unit"):
            arch = lookup(c.data, "model.architecture")
            activation = K.mlp_activation(arch) if isinstance(arch, dict) else None
            value = k.default if activation is None else activation[k.field == "gated_linear_unit"]
        elif k.field == "apex_installed" and raw is None:  # NGC PyTorch containers ship APEX beside TE
            value = lookup(c.data, "platform.software.transformer_engine") not in (None, MISSING)
            pos = c.pos(("platform", "software", "transformer_engine"))
        elif raw is None:
            value = k.default
        else:
            value = raw
        # the model document's facts are shown with the recipe's values (the platform's are not)
        out[k.field] = Pin(value, pos, "model" if k.path.startswith("model.") else "fact")
    return out


def concrete(pins: dict, values: dict) -> dict:
    """Every field's final value: pins, then what the solver chose or derived."""
    env = {f: p.value for f, p in pins.items()}
    env.update(values)
    return env
