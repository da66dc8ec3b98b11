"""The user's project: its root, its recipes/ and its build/.

The root is found the way git finds its own: from the current directory upward, the first
directory holding a `moeforge.toml` or a `recipes/` folder (`moeforge --root DIR` says it
instead). Without either, the current directory is the root (its recipes/ may not exist:
then only `builtin:` recipes and the built-in platforms and models are reachable).

Platform and model names resolve in the root's recipes/platforms|models first, then in the
built-in catalogue (compiler/resources.py); a recipe names a built-in one with `builtin:ID`.
In moeforge's own checkout the root is the checkout and the two catalogues are the same.
"""
from __future__ import annotations

import os
from pathlib import Path

from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.resources import KINDS, SCHEMAS

MARKER = "moeforge.toml"
BUILTIN_PREFIX = "builtin:"
# The JSON Schemas of the installed moeforge, copied into a project for editors: a document's
# `# yaml-language-server: $schema=...` line names them by a path relative to itself, which resolves
# offline, in any editor that reads that comment (VS Code's YAML extension, vim/neovim yaml-language-server),
# and always matches the moeforge version that checks the project (`init` writes them; `import` and `new`
# refresh a copy that differs). moeforge's own checkout names its top-level schemas/ instead.
SCHEMA_DIR = ".moeforge/schemas"

_root: Path | None = None


def find_root(start: Path | None = None) -> Path:
    """The nearest directory up from `start` with moeforge.toml or recipes/; else `start` itself (a new project)."""
    here = Path(start or os.getcwd()).absolute()
    for d in (here, *here.parents):
        if (d / MARKER).is_file() or (d / "recipes").is_dir():
            return d
    return here


def set_root(path: str | Path | None) -> Path:
    """Fix the project root for this process (`--root`); None finds it from the current directory."""
    global _root
    _root = Path(path).absolute() if path is not None else find_root()
    return _root


def chosen_root() -> Path | None:
    """The root this process fixed (set_root), None before it did."""
    return _root


def restore_root(previous: Path | None) -> None:
    """Undo set_root: the root chosen_root() gave before it (the CLI restores it after each call of main)."""
    global _root
    _root = previous


def root() -> Path:
    """The project root: the one set_root fixed (--root), else found from the current directory."""
    return _root if _root is not None else find_root()


def recipes() -> Path:
    """The user's recipes/ under the project root (the built-in catalogue is compose.RECIPES)."""
    return root() / "recipes"


def build() -> Path:
    """Where compile writes build/<recipe>/ unless --out says otherwise: build/ under the project root."""
    return root() / "build"


def schema_name(kind: str) -> str:
    """The schema file of a document kind: recipe.v3.json, ...; calibration.v1.json (a kind of its own)."""
    if kind in KINDS:
        return f"{kind}.v{KINDS[kind]}.json"
    found = sorted(SCHEMAS.glob(f"{kind}.v*.json"))
    if not found:
        raise ValueError(f"no schema for documents of kind {kind!r}")
    return found[-1].name


def _own_schemas(top: Path, name: str) -> bool:
    """moeforge's own checkout: its top-level schemas/ is the one this moeforge reads."""
    own = top / "schemas" / name
    return own.is_file() and own.resolve() == (SCHEMAS / name).resolve()


def schema_ref(document: Path, kind: str) -> str:
    """The `$schema` path a document written at `document` names (see SCHEMA_DIR), relative to the document."""
    name = schema_name(kind)
    folder = Path(document).absolute().parent
    top = find_root(folder)
    target = top / "schemas" / name if _own_schemas(top, name) else install_schemas(top) / name
    return os.path.relpath(target, folder)


def schema_shown(kind: str) -> str:
    """The schema of a kind as a message names it, relative to the project root: .moeforge/schemas/NAME in a
    user's project (`init` writes it there), schemas/NAME in moeforge's checkout. Writes nothing."""
    name = schema_name(kind)
    return f"schemas/{name}" if _own_schemas(root(), name) else f"{SCHEMA_DIR}/{name}"


def schema_files() -> dict[str, str]:
    """name -> text of every JSON Schema of this moeforge."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(SCHEMAS.glob("*.json"))}


def install_schemas(top: Path) -> Path:
    """Copy this moeforge's schemas into top/SCHEMA_DIR where missing or different; the folder."""
    dest = top / SCHEMA_DIR
    for name, text in schema_files().items():
        path = dest / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            write_file_atomically(path, text)
    return dest

