"""Integral values as integers: `tp: 1.0` and `--set training.micro_batch_size=1.0` mean 1.

JSON Schema counts 1.0 as an integer, so the schema (and an editor that runs it) accepts it; layout
arithmetic, plan.json and Megatron's argparse do not (the runtime died in range() on "num_microbatches":
4.0). Normalised rather than refused, since refusing would make check disagree with the schema moeforge
publishes: where the schema admits an integer and not a number, an integral float is that int, past int64
an E_INT_RANGE. Which paths those are is decided while validating (validate.accept, which has the schema
at hand and remembers the answer in the validity cache), so a cold check of an unchanged recipe reads no
schema for it; moeforge.compiler.driver.load applies them to the composed recipe, so check, compile, explain and
diff see one spelling.
"""
from __future__ import annotations

from moeforge.compiler.diagnostics import Diagnostic
from moeforge.compiler.recipe.document import INT_MAX, INT_MIN, out_of_range


def floats(data) -> list[tuple]:
    """The paths of the integral floats in `data` (candidates: most recipes have none, or a 1.0 ratio)."""
    out, todo = [], [((), data)]
    while todo:
        path, item = todo.pop()
        if isinstance(item, float) and item.is_integer():
            out.append(path)
        elif isinstance(item, dict):
            todo.extend((path + (k,), v) for k, v in item.items())
        elif isinstance(item, list):
            todo.extend((path + (i,), v) for i, v in enumerate(item))
    return sorted(out, key=repr)


def wanted(schema: dict, paths: list[tuple]) -> list[tuple]:
    """Of `paths`, those where `schema` admits an integer and not a number."""
    out = []
    for path in paths:
        schemas = [schema]
        for key in path:
            schemas = [c for s in schemas for c in _children(s, key)]
        types = {t for s in schemas for b in _branches(s) for t in _types(b)}
        if "integer" in types and "number" not in types:
            out.append(path)
    return out


def applied(data: dict, paths: list[tuple], pos_of) -> tuple[dict, list[Diagnostic]]:
    """`data` with the float at each path made an int (copied along those paths only), and an error for
    each one past int64."""
    errors = []
    for path in paths:
        node = data = _copied(data, path)
        for key in path[:-1]:
            node = node[key]
        value = node[path[-1]]
        if INT_MIN <= value <= INT_MAX:
            node[path[-1]] = int(value)
        else:
            errors.append(out_of_range(f"{value:.0f}", pos_of(path)))
    return data, errors


def _copied(data, path: tuple):
    """A shallow copy of `data` and of every container on `path` (the composed recipe stays as it was)."""
    top = dict(data) if isinstance(data, dict) else list(data)
    node = top
    for key in path[:-1]:
        child = node[key]
        node[key] = dict(child) if isinstance(child, dict) else list(child)
        node = node[key]
    return top


def _types(schema: dict) -> list:
    t = schema.get("type")
    return t if isinstance(t, list) else [t] if t else []


def _branches(schema) -> list:
    """The schema and every anyOf/oneOf/allOf alternative inside it."""
    out, todo = [], [schema]
    while todo:
        s = todo.pop()
        if isinstance(s, dict):
            out.append(s)
            for key in ("anyOf", "oneOf", "allOf"):
                todo.extend(s.get(key, ()))
    return out


def _children(schema, key) -> list:
    """The subschemas that may describe `key` of a mapping (an int: an item of a list)."""
    out = []
    for s in _branches(schema):
        if isinstance(key, int):
            if isinstance(s.get("items"), dict):
                out.append(s["items"])
        elif key in s.get("properties", {}):
            out.append(s["properties"][key])
        elif isinstance(s.get("additionalProperties"), dict):
            out.append(s["additionalProperties"])
    return out
