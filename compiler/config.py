"""From a composed recipe to solver input: pins, auto knobs and platform facts.

Recipe paths map to Megatron's field names through the knob table; anything a recipe
leaves out is either `auto` (the solver decides) or Megatron's default (a pin whose
origin says so, so that explanations can name it).
"""
from __future__ import annotations

from .compose import Composed
from .knobs import AUTO, FACTS, KNOBS, gpu_product
from .rules.expr import version_int
from .solve import Pin

_MISSING = object()
DTYPES = {"bf16": (True, False), "fp16": (False, True), "fp32": (False, False)}


def lookup(data: dict, dotted: str):
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def pins_and_auto(c: Composed) -> tuple[dict, set]:
    pins: dict[str, Pin] = {}
    auto: set[str] = set()
    for k in KNOBS:
        if not k.path:
            continue
        value = lookup(c.data, k.path)
        path = tuple(k.path.split("."))
        if value is _MISSING or value == AUTO:
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
    bf16, fp16 = DTYPES.get(dtype if dtype is not _MISSING else "fp32", (False, False))
    pos = c.origins.get(("precision", "dtype"))
    pins["bf16"] = Pin(bf16, pos, "pinned" if pos else "default")
    pins["fp16"] = Pin(fp16, pos, "pinned" if pos else "default")
    freq = lookup(c.data, "model.moe.layer_freq")
    if freq is not _MISSING:  # a per-layer list reads as 1 (all MoE) or 2 (some dense), as lint-config does
        value = (1 if all(freq) else 2) if isinstance(freq, list) else freq
        pins["moe_layer_freq"] = Pin(value, c.pos(("model", "moe", "layer_freq")), "model")
    pins.update(facts(c))
    return pins, auto


def facts(c: Composed) -> dict[str, Pin]:
    out = {}
    for k in FACTS:
        raw = lookup(c.data, k.path)
        pos = c.pos(tuple(k.path.split(".")))
        if raw is _MISSING:
            raw = None
        if k.kind == "version":
            value = version_int(raw) if raw is not None else 0
        elif k.field == "gpu_major":
            value = int(str(raw).split(".")[0]) if raw else 0
        elif k.field == "gpu_product":
            value = gpu_product(raw)
        elif raw is None:
            value = k.default
        else:
            value = raw
        out[k.field] = Pin(value, pos, "fact")
    return out


def concrete(pins: dict, values: dict) -> dict:
    """Every field's final value: pins, then what the solver chose or derived."""
    env = {f: p.value for f, p in pins.items()}
    env.update(values)
    return env
