"""`moeforge init` and `moeforge new platform|model|recipe|sweep`: a project of one's own, and documents to fill in.

The documents are generated from the JSON Schemas (each key's description, allowed values and
default; for recipe knobs without a description, the knob table's note and megatron-core default),
so a key added to a schema shows up here without anyone editing a list. Nothing existing is ever
overwritten: a file that is already there is named and the command stops before writing anything.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from moeforge.compiler.knobs import table as K
from moeforge.compiler.diagnostics import CompileError, Position, error
from moeforge.compiler.project import MARKER, SCHEMA_DIR, schema_files, schema_ref
from moeforge.compiler.resources import SCHEMAS
from moeforge.compiler.recipe.compose import NAME, resolve_recipe
from moeforge.compiler.recipe.validate import KINDS

WIDTH = 100

MOEFORGE_TOML = """\
# moeforge project: `moeforge` finds this directory as the project root from any directory below it
# (as git finds its root); `moeforge --root DIR` names another. Recipes live in recipes/:
#   recipes/platforms/NAME.yaml   machines (moeforge new platform NAME)
#   recipes/models/NAME.yaml      model architectures
#   recipes/<model>/<name>.yaml   training recipes (moeforge new recipe MODEL PLATFORM)
# Platform and model names resolve here first, then in moeforge's built-in catalogue;
# `extends: builtin:qwen3-30b-a3b/h100-bf16` starts from a built-in recipe. Builds go to build/.
# .moeforge/schemas/ holds this moeforge's JSON Schemas: each document's first line
# (`# yaml-language-server: $schema=...`) names them, so editors complete and check recipes offline.
[moeforge]
version = 1
"""

PRE_COMMIT = """\
# moeforge check on the documents a commit changes under recipes/ (pre-commit install, once per clone):
# recipes, sweeps, platforms, models and calibrations, each checked by its `schema:` key.
repos:
  - repo: local
    hooks:
      - id: moeforge-check
        name: moeforge check (recipes, sweeps, calibrations, platforms, models)
        entry: moeforge check
        language: system
        files: ^recipes/.*\\.ya?ml$
        pass_filenames: true
"""

WORKFLOW = """\
# moeforge check on every document a pull request changes under recipes/ (recipes, sweeps, calibrations,
# platforms, models): each diagnostic becomes an annotation on the line that caused it; errors fail the job.
name: moeforge
on:
  pull_request:
    paths: ["recipes/**", "moeforge.toml"]
  push:
    branches: [main]
jobs:
  check:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install the compiler only (no torch, no megatron)
        run: pip install moeforge
      - name: Check the changed documents (all of them on a push)
        run: |
          if [ "$GITHUB_EVENT_NAME" = pull_request ]; then
            files=$(git diff --name-only --diff-filter=d "origin/$GITHUB_BASE_REF"...HEAD -- 'recipes/*.yaml' 'recipes/*.yml')
            [ -z "$files" ] || moeforge check --format github $files
          else
            moeforge check --format github
          fi
"""

GITIGNORE = """\
# moeforge's outputs: what compile, sweep launch and results write (build/<recipe>/, build/sweeps/NAME/),
# and the lock file a compile holds beside the build directory it replaces (.<name>.lock)
build/
.*.lock
"""

README = {
    "platforms": "Platforms: one file per machine (moeforge new platform NAME); a name here wins over the built-in one.\n",
    "models": "Models: one file per architecture (schema moeforge/model/v1); a name here wins over the built-in one.\n",
}


def _refuse_existing(paths: list[Path], root: Path) -> None:
    there = [p for p in paths if p.exists() or p.is_symlink()]
    if there:
        names = ", ".join(_rel(p, root) for p in there)
        raise CompileError([error("E_EXISTS", f"refusing to overwrite: {names}", Position(names),
                                  help="remove or rename them first; nothing was written")])


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _write(files: dict[Path, str], root: Path) -> list[str]:
    _refuse_existing(list(files), root)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:  # "x": never replaces a file made meanwhile
            f.write(text)
    return [_rel(p, root) for p in files]


def init(root: Path) -> list[str]:
    """The project's files: marker, schemas, READMEs, .gitignore, pre-commit and CI; refuses to overwrite any."""
    files = {root / MARKER: MOEFORGE_TOML,
             **{root / SCHEMA_DIR / name: text for name, text in schema_files().items()},
             root / "recipes" / "platforms" / "README.md": README["platforms"],
             root / "recipes" / "models" / "README.md": README["models"],
             root / ".gitignore": GITIGNORE,
             root / ".pre-commit-config.yaml": PRE_COMMIT,
             root / ".github" / "workflows" / "moeforge.yml": WORKFLOW}
    return _write(files, root)


# ----------------------------------------------------------------------------- documents from schemas

def _schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"{kind}.v{KINDS[kind]}.json").read_text(encoding="utf-8"))


def _resolve(node: dict, schema: dict) -> dict:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target = schema
        for part in ref[2:].split("/"):
            target = target[part]
        return {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _object_branch(node: dict, schema: dict) -> dict | None:
    node = _resolve(node, schema)
    if "properties" in node:
        return node
    for alt in node.get("anyOf", []) + node.get("oneOf", []):
        alt = _resolve(alt, schema)
        if "properties" in alt:
            return alt
    return None


def _allowed(node: dict, schema: dict) -> str:
    node = _resolve(node, schema)
    if "enum" in node:
        return " | ".join(_yaml(v) for v in node["enum"])
    if "const" in node:
        return _yaml(node["const"])
    alts = node.get("anyOf", []) + node.get("oneOf", [])
    if alts:
        return " | ".join(a for a in (_allowed(x, schema) for x in alts) if a)
    t = node.get("type")
    return " | ".join(t) if isinstance(t, list) else (t or "")


def _yaml(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        plain = value and value.strip() == value and not any(c in value for c in ":#{}[],&*!|>'\"%@`") \
            and value.lower() not in ("null", "true", "false", "yes", "no", "on", "off", "auto") \
            and not value[0].isdigit() and not value.startswith("-")
        return value if plain or value == "auto" else json.dumps(value)
    return json.dumps(value)


def _note(path: str, node: dict, schema: dict) -> tuple[str, object, bool]:
    """(description, default, has a default) of the key at `path`: the schema's, else the knob table's."""
    node = _resolve(node, schema)
    text = node.get("description", "")
    if "default" in node:
        return text, node["default"], True
    knob = K.BY_PATH.get(path)
    if knob is not None:
        return text or (knob.doc or ""), knob.default, True
    return text, None, False


def _wrap(text: str, indent: str) -> list[str]:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(indent) + 2 + len(line) + 1 + len(w) > WIDTH:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    if line:
        lines.append(line)
    return [f"{indent}# {x}" for x in lines]


def _lines(node: dict, schema: dict, values: dict, prefix: str, depth: int, commented: bool) -> list[str]:
    """Every property of `node`: a value from `values` is written, the rest commented out with its
    description, allowed values and default."""
    out = []
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        desc, default, has_default = _note(path, sub, schema)
        allowed = _allowed(sub, schema)
        obj = _object_branch(sub, schema)
        info = desc
        if allowed and not (obj and allowed == "object"):
            info = f"{info} [{allowed}]" if info else f"[{allowed}]"
        here = key in values
        indent = ("# " if commented or not here else "") + "  " * depth
        out += _wrap(info, indent) if info else []
        if obj is not None and (not here or isinstance(values.get(key), dict)) \
                and not (here and values[key] is None):
            inner = values.get(key, {}) if here else {}
            off = commented or not here
            out.append(f"{indent}{key}:")
            out += _lines(obj, schema, inner, path + ".", depth + 1, off)
            continue
        if here:
            out.append(f"{indent}{key}: {_yaml(values[key])}")
        else:
            shown = _yaml(default) if has_default else ""
            out.append(f"{indent}{key}: {shown}".rstrip())
    return out


def document(kind: str, values: dict, header: list[str], path: Path) -> str:
    """The commented document of `kind` to be written at `path` (its $schema line is relative to it)."""
    schema = _schema(kind)
    lines = [f"# yaml-language-server: $schema={schema_ref(path, kind)}", *header,
             "# Every key the schema allows, with its description, [allowed values] and default: uncomment",
             "# (remove the leading '# ') and edit what you need.",
             *_lines(schema, schema, values, "", 0, False)]
    return "\n".join(lines) + "\n"


def platform_values(name: str) -> dict:
    """The required keys of a platform, from the schema's defaults (a CPU machine), named `name`."""
    schema = _schema("platform")
    values = {}
    for key in schema.get("required", []):
        sub = _resolve(schema["properties"][key], schema)
        if key == "name":
            values[key] = name
        elif key == "software":
            soft = _object_branch(sub, schema)
            values[key] = {k: v["default"] for k, v in soft["properties"].items() if "default" in v}
        elif "default" in sub:
            values[key] = sub["default"]
    return values


def new_platform(root: Path, name: str) -> list[str]:
    """recipes/platforms/NAME.yaml with every key commented from the schema; refuses to overwrite it."""
    _check_name(name, "platform")
    path = root / "recipes" / "platforms" / f"{name}.yaml"
    text = document("platform", platform_values(name),
                    [f"# Platform {name}: the machine recipes run on (moeforge check {_rel(path, root)})."], path)
    return _write({path: text}, root)


def new_recipe(root: Path, model: str, platform: str) -> list[str]:
    """recipes/MODEL/PLATFORM.yaml naming both, every other key commented; refuses to overwrite it."""
    _check_name(model, "model")
    _check_name(platform, "platform")
    path = root / "recipes" / model / f"{platform}.yaml"
    values = {"schema": f"moeforge/recipe/v{KINDS['recipe']}", "revision": 1, "name": f"{model}-{platform}",
              "platform": platform, "model": model}
    text = document("recipe", values,
                    [f"# Recipe {model} on {platform}: moeforge check {_rel(path, root)}, then moeforge compile "
                     f"{model}/{platform}.",
                     "# A knob left out is megatron-core's default; `auto` leaves it to the solver."], path)
    return _write({path: text}, root)


def model_values(name: str) -> dict:
    """A model's required keys, each null until the user states it (a check names each one still null)."""
    schema = _schema("model")
    values = {"schema": schema["properties"]["schema"]["const"], "name": name}
    for key in schema.get("required", []):
        node = _object_branch(schema["properties"][key], schema)
        if node is not None:
            values[key] = {k: None for k in node.get("required", [])}
    return values


def new_model(root: Path, name: str) -> list[str]:
    """recipes/models/NAME.yaml, the required keys null to fill in; refuses to overwrite it."""
    _check_name(name, "model")
    path = root / "recipes" / "models" / f"{name}.yaml"
    text = document("model", model_values(name),
                    [f"# Model {name}: state the required keys (null below), then moeforge check {_rel(path, root)};",
                     f"# a recipe names it as `model: {name}`. From a Hugging Face config.json,",
                     f"# `moeforge import config.json --name {name}` writes it with each value's source."], path)
    return _write({path: text}, root)


def _check_name(name: str, what: str) -> None:
    if not NAME.fullmatch(name):
        raise CompileError([error("E_REFERENCE_NAME", f"{what} name {name!r} is not a plain name",
                                  Position(name), help="1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit")])


def new_sweep(root: Path, name: str, recipe: str) -> list[str]:
    """recipes/sweeps/NAME.yaml: the base recipe, an example axis, every other key commented from the schema."""

    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,39}", name, re.ASCII):
        raise CompileError([error("E_REFERENCE_NAME", f"sweep name {name!r} is not a plain name", Position(name),
                                  help="1 to 40 lower-case letters, digits and '-', starting with a letter or digit")])
    resolve_recipe(recipe)  # a located error when there is no such recipe
    schema = _schema("sweep")
    path = root / "recipes" / "sweeps" / f"{name}.yaml"
    props = schema["properties"]

    def about(key: str) -> list[str]:
        allowed = _allowed(props[key], schema)
        text = props[key].get("description", "") + (f" [{allowed}]" if allowed and allowed != "object" else "")
        return _wrap(text, "")

    lines = [f"# yaml-language-server: $schema={schema_ref(path, 'sweep')}",
             f"# Sweep {name}: moeforge sweep check {_rel(path, root)}, then moeforge sweep launch {name}, then",
             f"# moeforge results build/sweeps/{name}. Knob paths are the recipe's, as --set takes them.",
             *about("schema"), f"schema: moeforge/sweep/v{KINDS['sweep']}",
             *about("name"), f"name: {name}",
             *about("description"), "# description: what this sweep asks",
             *about("recipe"), f"recipe: {_yaml(recipe)}",
             *about("set"), "set:", "  training.train_iters: 20",
             *about("axes"), "axes:", "  training.micro_batch_size: [1, 2]", "  # moe.overlap.ep_comm: [true, false]",
             *about("points"), "# points:", "#   - {training.micro_batch_size: 4, recompute.granularity: selective}",
             *about("repeats"), "repeats: 1", *about("warmup_steps"), "warmup_steps: 1",
             *about("launch"), "launch:"]
    for key, sub in props["launch"]["properties"].items():
        lines += ["  " + x for x in _wrap(f"{sub.get('description', '')} [{_allowed(sub, schema)}]", "")]
        lines.append(f"  {key}: {_yaml(sub['default'])}")
    return _write({path: "\n".join(lines) + "\n"}, root)
