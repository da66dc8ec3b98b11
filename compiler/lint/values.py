"""Coercing a configuration's values to the types megatron-core gives them.

Why: a value of the wrong type cannot be judged by any rule, so it is refused with a clear
UnusableInput (exit 2) naming the field, what was expected and what was given; the spellings
megatron-core itself normalises (cuda_graph_scope strings, list-valued moe_layer_freq and
moe_router_load_balancing_type) are normalised here the same way.
"""
from __future__ import annotations

import math
import re

from moeforge.compiler.knobs import table as K
from moeforge.compiler.rules.expr import UNKNOWN
from moeforge.compiler.knobs.versions import version_int

_VERSION_RE = re.compile(r"^\d+(\.\d+){0,3}([.+-]?[A-Za-z0-9.+-]*)?$")


class UnusableInput(Exception):
    """The input cannot be linted (exit 2)."""


def wrong_type(name: str, want: str, value) -> UnusableInput:
    """The one-line UnusableInput for a value of the wrong type: the key, what it must be, what it was."""
    return UnusableInput(f"{name}: expected {want}, got {value!r}")


def coerce(k: K.Knob, value):
    """A knob's value, type-checked (UnusableInput when it has the wrong type)."""
    name = k.field
    if k.kind == "bool":
        if not isinstance(value, bool):
            raise wrong_type(name, "true or false", value)
        return value
    if k.kind in ("int", "opt_int", "version"):
        if value is None and k.kind == "opt_int":
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_type(name, "an integer" + (" or null" if k.kind == "opt_int" else ""), value)
        if value < 0:
            raise wrong_type(name, "a non-negative integer", value)
        return value
    if k.kind == "float":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise wrong_type(name, "a number or null", value)
        return value
    if k.kind == "enum":
        value = k.plan_value(value)  # Megatron's spelling of a value (lr_decay_style WSD) read as the plan's
        if k.field in K.OPEN_ENUMS and isinstance(value, str):
            return value  # a keyword of the domain, or a path (checkpoint.load)
        if value not in k.domain:
            shown = ", ".join("null" if d is None else str(d) for d in k.domain)
            raise wrong_type(name, f"one of {shown}", value)
        return value
    if k.kind == "set":
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise wrong_type(name, "a list of names or null", value)
        bad = [v for v in value if v not in k.domain]
        if bad:
            raise wrong_type(name, f"names among {', '.join(k.domain)}", bad if len(bad) > 1 else bad[0])
        return list(dict.fromkeys(value))
    return value  # str: anything (layout strings or lists)


def read_graph_modules(name: str, value):
    """cuda_graph_modules / cuda_graph_scope as megatron-core normalises them."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",") if v] if value else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise wrong_type(name, "a list of module names, a comma-separated string, or null", value)
    if "full" in value:
        if value != ["full"]:
            raise UnusableInput(f"{name}: full scope cannot be used with other scopes.")
        return []
    return coerce(K.BY_FIELD["cuda_graph_modules"], value)


def read_layer_freq(value):
    """moe_layer_freq as the rules read it: 1 (all MoE) or 2 (some dense); a pattern string is UNKNOWN."""
    if isinstance(value, bool):
        raise wrong_type("moe_layer_freq", "an integer or a list of 0/1", value)
    if isinstance(value, int):
        if value < 1:
            raise wrong_type("moe_layer_freq", "a positive integer or a list of 0/1", value)
        return value
    if isinstance(value, list):
        if not value or any(v not in (0, 1) or isinstance(v, bool) for v in value):
            raise wrong_type("moe_layer_freq", "a list of 0/1", value)
        return 1 if all(v == 1 for v in value) else 2
    if isinstance(value, str):
        return UNKNOWN  # a Megatron-LM pattern string such as "([0]*3+[1]*58)": not evaluated
    raise wrong_type("moe_layer_freq", "an integer or a list of 0/1", value)


def read_load_balancing(value):
    """One balancing type for the rules: sinkhorn if any listed, else the first; refuses names outside the domain."""
    dom = K.BY_FIELD["moe_router_load_balancing_type"].domain
    items = value if isinstance(value, list) else [value]
    if not items or any(v not in dom for v in items):
        raise wrong_type("moe_router_load_balancing_type", f"one of {', '.join(dom)} (or a list of them)", value)
    return "sinkhorn" if "sinkhorn" in items else items[0]


def read_version(key: str, value) -> int:
    """A versions.* entry as version_int compares it (null: 0, unknown); refuses anything not like 2.12.0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise wrong_type(f"versions.{key}", "a version string or null", value)
    text = str(value)
    if not _VERSION_RE.match(text):
        raise wrong_type(f"versions.{key}", "a version such as 2.12.0", value)
    return version_int(text)
