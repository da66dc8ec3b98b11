"""Compose a recipe into one tree: extends, platform and model references, overrides.

Precedence, lowest first: the platform document, the model document, each `extends:`
ancestor (farthest first), the recipe itself, then command-line overrides. Every value
keeps the position of the document (or override) that set it, which `explain` shows.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .diagnostics import CompileError, Position, error
from .load import Document, YamlLoader, load_file
from .migrate import upgrade_document

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
REFERENCE_KEYS = ("platform", "model")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
ID_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", re.ASCII)


@dataclass(frozen=True)
class Composed:
    recipe_id: str          # path under recipes/ without .yaml, e.g. "tiny-moe/cpu"
    file: str               # the recipe's display path
    data: dict
    origins: dict           # path tuple -> Position of the value that won
    documents: tuple        # every Document read, for migration checks

    def pos(self, path) -> Position:
        path = tuple(path)
        while path:
            if path in self.origins:
                return self.origins[path]
            path = path[:-1]
        return Position(self.file, 1, 1)


def display_path(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root.parent))
    except ValueError:
        return str(path)


def resolve_recipe(name: str, root: Path = RECIPES) -> Path:
    """`tiny-moe/cpu`, `recipes/tiny-moe/cpu.yaml` or a path: the file, inside recipes/."""
    candidate = Path(name)
    if candidate.suffix not in (".yaml", ".yml"):
        candidate = root / f"{name}.yaml"
    elif not candidate.is_absolute() and not candidate.exists():
        candidate = root / name
    return _inside(candidate, root, Position(str(name)), "E_RECIPE_NOT_FOUND")


def _inside(path: Path, root: Path, pos: Position, code: str) -> Path:
    try:
        real, top = path.resolve(), root.resolve()
    except (OSError, RuntimeError) as exc:  # 3.11 raises RuntimeError on a symlink loop
        raise CompileError([error(code, f"cannot resolve '{path}': {exc}", pos)]) from None
    if top not in real.parents:
        raise CompileError([error("E_PATH_ESCAPE", f"'{path}' resolves outside recipes/ ({real})", pos,
                                  help="recipes may only reference files inside recipes/ (no .., no symlinks out)")])
    if not real.is_file():
        raise CompileError([error(code, f"no such file: {display_path(path, root)}", pos)])
    return real


def compose(recipe: Path, overrides: list[str] = (), root: Path = RECIPES) -> Composed:
    recipe = _inside(recipe, root, Position(str(recipe)), "E_RECIPE_NOT_FOUND")
    rid = str(recipe.relative_to(root.resolve()).with_suffix(""))
    if not all(ID_PART.fullmatch(part) for part in rid.split("/")):
        raise CompileError([error("E_RECIPE_ID", f"recipe id {rid!r} is not a plain path: each part must be "
                                  "letters, digits, '.', '_' or '-'", Position(ascii(rid)),
                                  help="rename the file; its id becomes a build directory and a job name")])
    chain = _extends_chain(recipe, root)             # recipe first, farthest ancestor last
    documents = list(chain)
    data: dict = {}
    origins: dict = {}
    refs = _references(chain)
    rest = []
    for text in overrides:  # --set platform=h100 swaps the referenced document itself
        try:
            parts, value = parse_override(text)
        except CompileError:
            parts, value = (), None  # reported with the other overrides below
        if len(parts) == 1 and parts[0] in REFERENCE_KEYS:
            refs[parts[0]] = (value, Position(f"--set {text}"))
        else:
            rest.append(text)
    overrides = rest
    errors = []
    for key in REFERENCE_KEYS:
        ref, pos = refs.get(key, (None, None))
        if ref is None:
            errors.append(error("E_MISSING_REFERENCE", f"the recipe names no {key}",
                                Position(display_path(recipe, root), 1, 1),
                                help=f"add `{key}: <name>` (a file under recipes/{key}s/)"))
            continue
        if not isinstance(ref, str) or not NAME.fullmatch(ref):
            errors.append(error("E_REFERENCE_NAME", f"{key} must be the name of a file in recipes/{key}s/, "
                                f"got {ref!r}", pos, help=f"write e.g. `{key}: {'h100' if key == 'platform' else 'qwen3-30b-a3b'}`"
                                " (letters, digits, '.', '_' and '-'; no paths)"))
            continue
        path = root / f"{key}s" / f"{ref}.yaml"
        try:
            doc = load_file(_inside(path, root, pos, "E_UNKNOWN_" + key.upper()), display_path(path, root))
        except CompileError as exc:
            errors.extend(exc.diagnostics)
            continue
        documents.append(doc)
        _merge(data, origins, {key: doc.data}, {(key,) + p: v for p, v in doc.positions.items()})
    if errors:
        raise CompileError(errors)
    for doc in reversed(chain):
        body = {k: v for k, v in doc.data.items() if k not in REFERENCE_KEYS + ("extends",)}
        _merge(data, origins, body, doc.positions)
    for key in REFERENCE_KEYS:  # keep the reference's own position for explain
        origins[(key, "name")] = refs[key][1]
    apply_overrides(data, origins, overrides)
    return Composed(rid, display_path(recipe, root), data, origins, tuple(documents))


def _extends_chain(recipe: Path, root: Path) -> list[Document]:
    chain, seen = [], []
    path, pos = recipe, Position(display_path(recipe, root))
    while path is not None:
        if path in seen:
            cycle = " -> ".join(display_path(p, root) for p in seen + [path])
            raise CompileError([error("E_EXTENDS_CYCLE", f"extends cycle: {cycle}", pos,
                                      help="remove one of the extends: links")])
        seen.append(path)
        doc = load_file(path, display_path(path, root))
        if not isinstance(doc.data, dict):
            raise CompileError([error("E_NOT_A_MAPPING", "a recipe must be a mapping", doc.pos(()))])
        doc = upgrade_document(doc)
        chain.append(doc)
        parent = doc.data.get("extends")
        if parent is None:
            break
        pos = doc.pos(("extends",))
        if not isinstance(parent, str) or not parent:
            raise CompileError([error("E_EXTENDS_TYPE", "extends: must be a relative path to a recipe", pos)])
        target = (path.parent / parent) if parent.endswith((".yaml", ".yml")) else root / f"{parent}.yaml"
        path = _inside(target, root, pos, "E_EXTENDS_NOT_FOUND")
    return chain


def _references(chain: list[Document]) -> dict:
    refs = {}
    for doc in reversed(chain):
        for key in REFERENCE_KEYS:
            if key in doc.data:
                refs[key] = (doc.data[key], doc.pos((key,)))
    return refs


def _merge(data: dict, origins: dict, layer: dict, positions: dict, prefix: tuple = ()) -> None:
    """Deep-merge `layer` into `data`: mappings merge, everything else replaces."""
    for key, value in layer.items():
        path = prefix + (key,)
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            _merge(data[key], origins, value, positions, path)
            continue
        data[key] = _copy(value)
        for p in list(origins):
            if p[: len(path)] == path:
                del origins[p]
        for p, pos in positions.items():
            if p[: len(path)] == path:
                origins[p] = pos


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def parse_override(text: str) -> tuple[tuple, Any]:
    """`moe.dispatcher=alltoall` -> (("moe", "dispatcher"), "alltoall"); values are YAML scalars."""
    pos = Position(f"--set {text}")
    if "=" not in text:
        raise CompileError([error("E_OVERRIDE", f"override '{text}' is not key.path=value", pos)])
    key, raw = text.split("=", 1)
    parts = tuple(key.strip().split("."))
    if not all(p.isidentifier() for p in parts):
        raise CompileError([error("E_OVERRIDE", f"override key '{key}' is not a dotted name", pos)])
    try:
        value = yaml.load(raw, Loader=YamlLoader) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise CompileError([error("E_OVERRIDE", f"override value is not usable: {exc}"[:200], pos)]) from None
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)):
        raise CompileError([error("E_OVERRIDE", f"override '{text}' must set a scalar or a flat list", pos)])
    if not isinstance(value, (str, int, float, bool, list, type(None))):
        value = raw
    if any(isinstance(v, float) and not math.isfinite(v) for v in (value if isinstance(value, list) else [value])):
        raise CompileError([error("E_NOT_FINITE", f"override '{text}' is not a finite number", pos)])
    return parts, value


def apply_overrides(data: dict, origins: dict, overrides) -> None:
    from .migrate import MOVED_KEYS

    errors = []
    for text in overrides:
        try:
            parts, value = parse_override(text)
        except CompileError as exc:
            errors.extend(exc.diagnostics)
            continue
        parts = MOVED_KEYS.get(parts, parts)  # --set training.lr=... (recipe v2) sets schedule.lr (v3)
        node = data
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
        origins[parts] = Position(f"--set {text}")
    if errors:
        raise CompileError(errors)
