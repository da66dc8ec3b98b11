"""Compose a recipe into one tree: extends, platform and model references, overrides.

Precedence, lowest first: the platform document, the model document, each `extends:`
ancestor (farthest first), the recipe itself, then command-line overrides. Every value
keeps the position of the document (or override) that set it, which `explain` shows.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from moeforge.compiler.diagnostics import CompileError, Position, error
from moeforge.compiler.recipe.document import INT_MAX, INT_MIN, Document, out_of_range
from moeforge.compiler.recipe.load import load_file
from moeforge.compiler import project
from moeforge.compiler.project import BUILTIN_PREFIX
from moeforge.compiler.recipe.migrate import MOVED_KEYS, upgrade_document
from moeforge.compiler.resources import BUILTIN_RECIPES

RECIPES = BUILTIN_RECIPES  # the built-in catalogue; the user's recipes/ is moeforge.compiler.project.recipes()
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
    files: dict = field(default_factory=dict)  # "platform"/"model"/"recipe" -> the file that was read

    def pos(self, path) -> Position:
        """Where a key came from: its own position, else its nearest parent's, else the file's first line."""
        path = tuple(path)
        while path:
            if path in self.origins:
                return self.origins[path]
            path = path[:-1]
        return Position(self.file, 1, 1)


def _under(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def display_path(path: Path, root: Path) -> str:
    """A file's path as diagnostics show it: relative to the project (recipes/x/y.yaml), or
    builtin:recipes/... for a file of the built-in catalogue read from outside it."""
    if not _under(path, root) and _under(path, BUILTIN_RECIPES):
        return BUILTIN_PREFIX + str(path.relative_to(BUILTIN_RECIPES.parent))
    try:
        return str(path.relative_to(root.parent))
    except ValueError:
        return str(path)


def _default_root(root: Path | None) -> Path:
    return project.recipes() if root is None else root


def _base_of(real: Path, root: Path) -> Path:
    """The catalogue a resolved file belongs to: the project's recipes/, or the built-in one."""
    top = root.resolve()
    if not _under(real, top) and _under(real, BUILTIN_RECIPES):
        return BUILTIN_RECIPES
    return root


RECIPE_NOT_FOUND_HELP = ("give a recipe file, a directory of recipes, or a recipe id (MODEL/NAME under recipes/, "
                         "or builtin:MODEL/NAME for one of moeforge's, e.g. builtin:tiny-moe/cpu)")


def resolve_recipe(name: str, root: Path | None = None) -> Path:
    """`tiny-moe/cpu`, `recipes/tiny-moe/cpu.yaml`, a path, or `builtin:tiny-moe/cpu` (a recipe of
    the built-in catalogue): the file, inside recipes/ (or inside the built-in catalogue)."""
    root = _default_root(root)
    if name.startswith(BUILTIN_PREFIX):
        rest = name[len(BUILTIN_PREFIX):]
        target = BUILTIN_RECIPES / (rest if rest.endswith((".yaml", ".yml")) else f"{rest}.yaml")
        return _inside(target, BUILTIN_RECIPES, Position(str(name)), "E_RECIPE_NOT_FOUND")
    candidate = Path(name)
    if candidate.suffix not in (".yaml", ".yml"):
        if candidate.is_file() and not (root / f"{name}.yaml").is_file():  # `check README.md`
            raise CompileError([error("E_RECIPE_NOT_FOUND", f"'{name}' is a file but not a recipe (a recipe is a "
                                      ".yaml file)", Position(str(name)),
                                      help="name a recipe file (recipes/MODEL/PLATFORM.yaml) or its id "
                                           "(MODEL/PLATFORM, e.g. qwen3-30b-a3b/h100-bf16)")])
        candidate = root / f"{name}.yaml"
        if not candidate.is_file():
            _only_builtin(name, root)
    elif not candidate.is_absolute() and not candidate.exists():
        if not (root / name).exists():  # neither from here nor under recipes/: name it as it was given
            raise CompileError([error("E_RECIPE_NOT_FOUND", f"no such file: {name}", Position(str(name)),
                                      help=RECIPE_NOT_FOUND_HELP)])
        candidate = root / name
    try:  # a file of the built-in catalogue (what `builtin:ID` resolved to, given again) stays inside it
        base = _base_of(candidate.resolve(), root)
    except (OSError, RuntimeError):
        base = root
    return _inside(candidate, base, Position(str(name)), "E_RECIPE_NOT_FOUND")


def _only_builtin(name: str, root: Path, pos: Position | None = None, code: str = "E_RECIPE_NOT_FOUND",
                  key: str = "") -> None:
    """A bare id that the project lacks and the built-in catalogue has: refused, naming `builtin:ID` (one
    spelling per catalogue, so a project's recipe never silently changes into a built-in one). ``key``: the
    document key that named it (`extends: `), for the fix."""
    if root.resolve() == BUILTIN_RECIPES.resolve() or not (BUILTIN_RECIPES / f"{name}.yaml").is_file():
        return
    raise CompileError([error(code, f"no {display_path(root / name, root)}.yaml in this project; "
                              f"moeforge's built-in catalogue has {name}", pos or Position(str(name)),
                              help=f"write {key}builtin:{name} for the built-in recipe")])


def _inside(path: Path, root: Path, pos: Position, code: str) -> Path:
    try:
        real, top = path.resolve(), root.resolve()
    except (OSError, RuntimeError) as exc:  # 3.11 raises RuntimeError on a symlink loop
        raise CompileError([error(code, f"cannot resolve '{path}': {exc}", pos)]) from None
    if top not in real.parents:
        raise CompileError([error("E_PATH_ESCAPE", f"'{path}' resolves outside recipes/ ({real})", pos,
                                  help="recipes may only reference files inside recipes/ (no .., no symlinks out)")])
    if not real.is_file():
        raise CompileError([error(code, f"no such file: {display_path(path, root)}", pos,
                                  help=RECIPE_NOT_FOUND_HELP if code == "E_RECIPE_NOT_FOUND" else None)])
    return real


def compose(recipe: Path | Document, overrides: list[str] = (), root: Path | None = None) -> Composed:
    """The recipe (a file, or a Document held in memory: its `file` is its name, an id under `root`) with its
    extends chain, platform, model and overrides merged."""
    root = _default_root(root)
    given = recipe if isinstance(recipe, Document) else None
    if given is not None:  # in memory (the planner's candidates): it stands where a file of its name would
        recipe, rid = root.resolve() / f"{given.file}.yaml", given.file
    else:
        try:  # a recipe of the built-in catalogue (resolve_recipe("builtin:...")) is checked against it
            base = _base_of(recipe.resolve(), root)
        except (OSError, RuntimeError):
            base = root
        recipe = _inside(recipe, base, Position(str(recipe)), "E_RECIPE_NOT_FOUND")
        rid = str(recipe.relative_to(_base_of(recipe, root).resolve()).with_suffix(""))
    if not all(ID_PART.fullmatch(part) for part in rid.split("/")):
        raise CompileError([error("E_RECIPE_ID", f"recipe id {rid!r} is not a plain path: each part must be "
                                  "letters, digits, '.', '_' or '-'", Position(ascii(rid)),
                                  help="rename the file; its id becomes a build directory and a job name")])
    chain = _extends_chain(recipe, root, given)      # recipe first, farthest ancestor last
    documents = list(chain)
    data: dict = {}
    origins: dict = {}
    refs = _references(chain)
    files = {"recipe": str(recipe)} if given is None else {}  # an in-memory recipe was read from no file
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
    errors = [e for e in map(_fixed_key, overrides) if e is not None]
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
                                " (1 to 64 letters, digits, '.', '_' and '-'; no paths)"))
            continue
        path, base = _reference_file(key, ref, root)
        try:
            real = _inside(path, base, pos, "E_UNKNOWN_" + key.upper())
            doc = load_file(real, display_path(path, root))
        except CompileError as exc:
            errors.extend(_unknown_help(exc.diagnostics, key, root))
            continue
        files[key] = str(real)
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
    shown = given.file if given is not None else display_path(recipe, root)
    return Composed(rid, shown, data, origins, tuple(documents), files)


def _reference_file(key: str, ref: str, root: Path) -> tuple[Path, Path]:
    """recipes/<key>s/<ref>.yaml of the project when it is there (a link there is followed and
    checked, never skipped), else the built-in catalogue's: (path, the catalogue it is in)."""
    path = root / f"{key}s" / f"{ref}.yaml"
    if os.path.lexists(path) or root.resolve() == BUILTIN_RECIPES:
        return path, root
    builtin = BUILTIN_RECIPES / f"{key}s" / f"{ref}.yaml"
    return (builtin, BUILTIN_RECIPES) if builtin.is_file() else (path, root)


def _unknown_help(diags: list, key: str, root: Path) -> list:
    """'no such file' for a platform/model: say where names are looked up, and which exist."""
    out = []
    for d in diags:
        if d.code == f"E_UNKNOWN_{key.upper()}" and d.help is None:
            names = sorted({p.stem for d_ in (root / f"{key}s", BUILTIN_RECIPES / f"{key}s") if d_.is_dir()
                            for p in d_.glob("*.yaml")})
            d = dataclasses.replace(d, help=f"{key}s are files in recipes/{key}s/ or the built-in catalogue; known: "
                            + (", ".join(names) or "none"))
        out.append(d)
    return out


def _extends_chain(recipe: Path, root: Path, given: Document | None = None) -> list[Document]:
    """The recipe and its ancestors. `extends: builtin:ID` names a recipe of the built-in catalogue;
    an ancestor there resolves its own extends: inside that catalogue. `given`: the recipe's document, in
    memory (at the path `recipe`, which is not read)."""
    chain, seen = [], []
    path, pos = recipe, Position(display_path(recipe, root))
    base = _base_of(recipe, root)
    while path is not None:
        if path in seen:
            cycle = " -> ".join(display_path(p, root) for p in seen + [path])
            raise CompileError([error("E_EXTENDS_CYCLE", f"extends cycle: {cycle}", pos,
                                      help="remove one of the extends: links")])
        seen.append(path)
        doc = given if given is not None and not chain else load_file(path, display_path(path, root))
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
        if parent.startswith(BUILTIN_PREFIX):
            parent, base = parent[len(BUILTIN_PREFIX):], BUILTIN_RECIPES
            target = BUILTIN_RECIPES / (parent if parent.endswith((".yaml", ".yml")) else f"{parent}.yaml")
        else:
            target = (path.parent / parent) if parent.endswith((".yaml", ".yml")) else base / f"{parent}.yaml"
            if not target.is_file() and not parent.endswith((".yaml", ".yml")):
                _only_builtin(parent, base, pos, "E_EXTENDS_NOT_FOUND", "extends: ")
        path = _inside(target, base, pos, "E_EXTENDS_NOT_FOUND")
    return chain


def _references(chain: list[Document]) -> dict:
    refs = {}
    for doc in reversed(chain):
        for key in REFERENCE_KEYS:
            if key in doc.data:
                refs[key] = (doc.data[key], doc.pos((key,)))
    return refs


def _merge(data: dict, origins: dict, layer: dict, positions: dict) -> None:
    """Deep-merge `layer` into `data`: mappings merge, everything else replaces; the origins of what was
    replaced go, the layer's positions there come. Linear in the sizes of the documents (a recipe of 40k
    keys is one pass, not 40k passes over the origins): the replaced paths are collected first, and each
    origin or position is looked up by its prefixes as long as a replaced path."""
    replaced: set = set()
    _merge_values(data, layer, (), replaced)
    if not replaced:
        return

    lengths = sorted({len(p) for p in replaced})

    def under(path: tuple) -> bool:
        for n in lengths:
            if n > len(path):
                return False
            if path[:n] in replaced:
                return True
        return False

    for p in [p for p in origins if under(p)]:
        del origins[p]
    origins.update((p, pos) for p, pos in positions.items() if under(p))


def _merge_values(data: dict, layer: dict, prefix: tuple, replaced: set) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            _merge_values(data[key], value, prefix + (key,), replaced)
            continue
        data[key] = _copy(value)
        replaced.add(prefix + (key,))


def _copy(value: object) -> object:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


FIXED_KEYS = {
    "extends": "the extends chain is read from the files before any --set applies; write `extends:` in the "
               "recipe, or compile the recipe it would extend",
    "schema": "a document's schema version is what the file was written for, not a setting; "
              "`moeforge migrate FILE` rewrites a document for the current one",
}


def _fixed_key(text: str):
    """The error for `--set extends=...` or `--set schema=...` (which no override can change), else None."""
    key = text.split("=", 1)[0].strip().split(".")[0]
    if key not in FIXED_KEYS:
        return None
    return error("E_OVERRIDE", f"{key}: cannot be set with --set", Position(f"--set {text}"), help=FIXED_KEYS[key])


def parse_override(text: str) -> tuple[tuple, object]:
    """`moe.dispatcher=alltoall` -> (("moe", "dispatcher"), "alltoall"); values are YAML scalars."""
    pos = Position(f"--set {text}")
    if "=" not in text:
        raise CompileError([error("E_OVERRIDE", f"override '{text}' is not key.path=value", pos)])
    key, raw = text.split("=", 1)
    parts = tuple(key.strip().split("."))
    if not all(p.isidentifier() for p in parts):
        raise CompileError([error("E_OVERRIDE", f"override key '{key}' is not a dotted name", pos)])
    import yaml  # lazy: PyYAML only for --set values (a recipe file comes from the parse cache when unchanged)

    from moeforge.compiler.recipe.yaml_nodes import YamlLoader  # lazy: PyYAML, as above

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
    values = value if isinstance(value, list) else [value]
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        raise CompileError([error("E_NOT_FINITE", f"override '{text}' is not a finite number", pos)])
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and not INT_MIN <= v <= INT_MAX:
            raise CompileError([out_of_range(str(v), pos)])
    return parts, value


def apply_overrides(data: dict, origins: dict, overrides) -> None:
    """Apply --set overrides in place, recording each as its own origin; all bad overrides reported at once."""
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
