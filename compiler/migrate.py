"""Schema migrations: each a pure function from version N's mapping to version N+1's.

v1 -> v2 follows megatron-core's own renames: moe_enable_deepep became flex + backend,
moe_deepep_num_sms / moe_hybridep_num_sms were folded into moe_flex_dispatcher_num_sms,
and cuda_graph_scope became cuda_graph_modules. The same function rewrites a plain dict
(for compiling) and a ruamel round-trip map (for `moeforge migrate`, comments kept).
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

from .diagnostics import CompileError, Position, error
from .load import Document

CURRENT = {"recipe": 2, "platform": 1, "model": 1}


class MigrationError(ValueError):
    pass


def _rename(mapping, old: str, new: str, value) -> None:
    """Replace key `old` by `new` at the same place (and with its comment, in ruamel maps)."""
    keys = list(mapping.keys())
    index = keys.index(old)
    comment = getattr(mapping, "ca", None) and mapping.ca.items.pop(old, None)
    del mapping[old]
    if new in mapping:
        raise MigrationError(f"both '{old}' and its new name '{new}' are set")
    if hasattr(mapping, "insert"):
        mapping.insert(index, new, value)
        if comment:
            mapping.ca.items[new] = comment
    else:
        items = list(mapping.items())
        items.insert(index, (new, value))
        mapping.clear()
        mapping.update(items)


def recipe_v1_to_v2(data):
    """Pure: returns a migrated copy; the input is left untouched."""
    out = copy.deepcopy(data)
    out["schema"] = "moeforge/recipe/v2"
    moe = out.get("moe")
    if isinstance(moe, dict):
        if "enable_deepep" in moe:
            enabled = moe["enable_deepep"]
            if enabled is True:
                if moe.get("flex_backend") not in (None, "deepep", "auto"):
                    raise MigrationError("enable_deepep: true conflicts with flex_backend: "
                                         f"{moe['flex_backend']} (megatron-core: 'Only one backend is "
                                         "supported for flex token dispatcher.')")
                _rename(moe, "enable_deepep", "dispatcher", "flex")
                if "flex_backend" in moe:
                    moe["flex_backend"] = "deepep"
                else:
                    keys = list(moe.keys())
                    _insert_after(moe, keys[keys.index("dispatcher")], "flex_backend", "deepep")
            else:
                del moe["enable_deepep"]
        sms = {k: moe[k] for k in ("deepep_num_sms", "hybridep_num_sms") if k in moe}
        if sms:
            backend = moe.get("flex_backend")
            chosen = sms.get(f"{backend}_num_sms") if backend in ("deepep", "hybridep") else None
            if chosen is None:
                distinct = set(sms.values())
                if len(distinct) > 1:
                    raise MigrationError("deepep_num_sms and hybridep_num_sms differ and moe.flex_backend does not "
                                         "say which applies; megatron-core folds both into moe_flex_dispatcher_num_sms")
                chosen = distinct.pop()
            first = next(iter(sms))
            _rename(moe, first, "flex_num_sms", chosen)
            for other in sms:
                if other != first:
                    del moe[other]
    graph = out.get("cuda_graph")
    if isinstance(graph, dict) and "scope" in graph:
        _rename(graph, "scope", "modules", graph["scope"])
    return out


def _insert_after(mapping, after: str, key: str, value) -> None:
    index = list(mapping.keys()).index(after) + 1
    if hasattr(mapping, "insert"):
        mapping.insert(index, key, value)
    else:
        items = list(mapping.items())
        items.insert(index, (key, value))
        mapping.clear()
        mapping.update(items)


MIGRATIONS = {("recipe", 1): recipe_v1_to_v2}

# where a v1 key's source position is found after migration (for diagnostics)
MOVED = {("recipe", 1): {("moe", "dispatcher"): ("moe", "enable_deepep"),
                         ("moe", "flex_backend"): ("moe", "enable_deepep"),
                         ("moe", "flex_num_sms"): ("moe", "deepep_num_sms"),
                         ("cuda_graph", "modules"): ("cuda_graph", "scope")}}


def declared_version(data) -> tuple[str, int] | None:
    schema = data.get("schema") if isinstance(data, dict) else None
    match = re.fullmatch(r"moeforge/([a-z]+)/v([0-9]+)", schema, re.ASCII) if isinstance(schema, str) else None
    return (match.group(1), int(match.group(2))) if match else None


def upgrade(data, file: str = "<memory>"):
    """Apply every migration from the declared version up to the current one."""
    version = declared_version(data)
    if version is None:
        return data
    kind, n = version
    while (kind, n) in MIGRATIONS:
        try:
            data = MIGRATIONS[(kind, n)](data)
        except MigrationError as exc:
            raise CompileError([error("E_MIGRATION", f"cannot migrate {kind} v{n} -> v{n + 1}: {exc}",
                                      Position(file, 1, 1))]) from None
        n += 1
    return data


def upgrade_document(doc: Document) -> Document:
    version = declared_version(doc.data)
    if version is None or version[1] >= CURRENT.get(version[0], version[1]):
        return doc
    data = upgrade(doc.data, doc.file)
    positions = dict(doc.positions)
    for new, old in MOVED.get(version, {}).items():
        for path, pos in doc.positions.items():
            if path[: len(old)] == old:
                positions.setdefault(new + path[len(old):], pos)
    return Document(doc.file, data, positions)


def migrate_file(path: Path) -> bool:
    """Rewrite a document in place at the current schema version, comments kept."""
    from ruamel.yaml import YAML  # only `moeforge migrate` needs a round-trip parser

    yaml = YAML()
    yaml.preserve_quotes = True
    text = path.read_text(encoding="utf-8")
    data = yaml.load(text)
    version = declared_version(data)
    if version is None or version[1] >= CURRENT.get(version[0], version[1]):
        return False
    new = upgrade(data, str(path))
    tmp = path.with_name(f".{path.name}.migrate.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        yaml.dump(new, fh)
    tmp.replace(path)
    return True
