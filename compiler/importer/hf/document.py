"""`moeforge import config.json` (or a model directory holding one): the model document, every value with the
config.json key it came from as its comment, and, given --platform, a recipe that trains it; otherwise what to
run next. compiler/importer/hf/reader.py reads the keys."""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from moeforge.compiler import project
from moeforge.compiler.importer.hf import config_file as C
from moeforge.compiler.knobs import table as K
from moeforge.compiler.importer.hf.reader import read
from moeforge.compiler.launch_reader.kinds import hf_config_path
from moeforge.compiler.launch_reader.text import ImportError_, platform_docs, read_source
from moeforge.compiler.recipe.compose import NAME
from moeforge.compiler.resources import SCHEMAS
from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.diagnostics import printable, yaml_comment as comment

COMMENT_COLUMN = 34


@dataclass
class HfImport:
    name: str
    family: str
    model: dict                       # the model document
    sources: dict                     # dotted path -> where its value came from
    notes: list = field(default_factory=list)
    unread: dict = field(default_factory=dict)
    origin: str = ""                  # "model_type X (Architecture)"
    recipe: dict | None = None
    platform: str | None = None


def import_config(text: str, source: str, name: str | None = None, platform: str | None = None,
                  root: Path | None = None) -> HfImport:
    """The model document (and with a platform, the recipe) a config.json's text makes; ImportError_ otherwise."""
    data = C.load(text)
    C.check_identity(data)
    lm, prefix, notes = C.language_model(data)
    fam, how = C.family(lm, prefix)
    notes += how + C.quantization(lm, prefix)
    got = read(lm, fam, prefix, data if prefix else None)
    base = name or default_name(source, lm)
    if not NAME.fullmatch(base):
        raise ImportError_(f"--name {base!r}: a model name is 1 to 64 letters, digits, '.', '_' and '-', starting "
                           "with a letter or digit")
    arch = (lm.get("architectures") or data.get("architectures") or [fam.architectures[0]])[0]
    origin = f"model_type {lm.get('model_type') or data.get('model_type')} ({arch})"
    model = {"schema": "moeforge/model/v1", "name": base, "family": fam.name,
             "description": f"Imported by moeforge import from {Path(source).name}: Hugging Face {origin}."}
    ident = data.get("_name_or_path")
    if ident:
        model["source"] = str(ident)
    for path, (value, _) in _ordered(got.fields):
        section, _, key = path.rpartition(".")
        (model.setdefault(section, {}) if section else model)[key] = value
    policy = (f"router dtype {fam.router_dtype[0]} (moe.router.dtype in the recipe): " if fam.router_dtype[0]
              else "router dtype: the training dtype: ") + fam.router_dtype[1]
    imp = HfImport(base, fam.name, model, {p: s for p, (_, s) in got.fields.items()}, notes + got.notes + [policy],
                   got.unread, origin)
    if platform is not None:
        root = project.recipes() if root is None else root
        platforms = platform_docs(root)
        if platform not in platforms:
            raise ImportError_(f"--platform {platform}: no such platform (one of {', '.join(platforms)})")
        stated = lm.get("torch_dtype") or lm.get("dtype") or data.get("torch_dtype") or data.get("dtype")
        dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(str(stated))
        if dtype is None:
            dtype = "bf16"
            imp.notes.append((f"torch_dtype {json.dumps(stated)}: not a training dtype" if stated else
                              "no torch_dtype") + "; the recipe trains in bf16 (precision.dtype)")
        imp.recipe = {"schema": "moeforge/recipe/v3", "revision": 1, "name": base, "platform": platform,
                      "model": base, "precision": {"dtype": dtype}}
        if fam.router_dtype[0] is not None:  # the family's policy (families.py), said in the model document too
            imp.recipe["moe"] = {"router": {"dtype": fam.router_dtype[0]}}
        positions = model.get("architecture", {}).get("max_position_embeddings")
        seq = K.BY_PATH["training.seq_length"].default
        if positions is not None and positions < seq:  # Megatron-LM refuses seq_length > max_position_embeddings
            imp.recipe["training"] = {"seq_length": positions}
            imp.notes.append(f"training.seq_length {positions}: the model's max_position_embeddings (moeforge's "
                             f"default {seq} is longer, and Megatron-LM refuses a sequence longer than the positions)")
        imp.platform = platform
    return imp


def default_name(source: str, data: dict) -> str:
    """The model directory's name (a config.json is named after the directory it sits in), else the file's stem,
    else the model_type: lower case, other characters as '-'."""
    path = hf_config_path(source) or Path(source)
    if source == "-":
        stem = str(data.get("_name_or_path") or "").rstrip("/").rsplit("/", 1)[-1] or str(data.get("model_type"))
    elif path.name == "config.json":
        stem = path.resolve().parent.name
    else:
        stem = path.stem
    stem = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.")
    return stem[:64] or re.sub(r"[^a-z0-9._-]+", "-", str(data.get("model_type", "model")).lower())


def _ordered(fields: dict) -> list:
    """The fields in the model schema's order (what `moeforge new model` and the catalogue documents show)."""
    schema = json.loads((SCHEMAS / "model.v1.json").read_text(encoding="utf-8"))["properties"]
    order = {}
    for top, node in schema.items():
        order[top] = len(order)
        for key in node.get("properties", {}):
            order[f"{top}.{key}"] = len(order)
    unknown = sorted(p for p in fields if p not in order)
    if unknown:  # a reader writing a field the schema does not have is moeforge's bug
        raise AssertionError(f"model fields outside schemas/model.v1.json: {unknown}")
    return sorted(fields.items(), key=lambda item: order[item[0]])


def _scalar(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...").removesuffix(
        "...").strip()


def render_model(imp: HfImport, source: str, path: Path) -> str:
    """The model document as YAML, each value commented with its config.json key; must read back unchanged."""
    lines = [comment(f"yaml-language-server: $schema={project.schema_ref(path, 'model')}"),
             comment(f"Imported by `moeforge import` from {source}: Hugging Face {imp.origin}, read as {imp.family}."),
             "# Each value's comment names the config.json key it came from (or the modelling code that fixes it)."]
    lines += [comment(f"note: {n}") for n in imp.notes]
    if imp.unread:
        lines.append(comment(f"Not read ({len(imp.unread)}): " + ", ".join(f"{k}={json.dumps(v)[:60]}"
                                                                          for k, v in sorted(imp.unread.items()))))
    for key, value in imp.model.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            for sub, v in value.items():
                lines.append(_line(f"  {sub}: {_scalar(v)}", imp.sources.get(f"{key}.{sub}")))
        else:
            lines.append(_line(f"{key}: {_scalar(value)}", imp.sources.get(key)))
    text = "\n".join(lines) + "\n"
    if yaml.safe_load(text) != imp.model:  # the comments never change a value
        raise AssertionError(f"the rendered model document of {source} does not read back as written")
    return text


def _line(text: str, source: str | None) -> str:
    return f"{text.ljust(COMMENT_COLUMN - 1)} {comment(source)}" if source else text


def render_recipe(imp: HfImport, source: str, path: Path) -> str:
    """A starter recipe for the imported model, its header saying what is left to megatron-core and the solver."""
    head = [comment(f"yaml-language-server: $schema={project.schema_ref(path, 'recipe')}"),
            comment(f"The model imported by `moeforge import` from {source}, on {imp.platform}. What is not stated here is"),
            "# megatron-core's default or the solver's choice: one node, no model parallelism. precision.dtype is",
            "# config.json's torch_dtype; the router's dtype is the family's policy (the model document says why).",
            f"# next: moeforge plan-layout {imp.name} --platform {imp.platform} --gpus N  (a layout that fits N GPUs;",
            "#       --emit FILE writes it as a recipe), or set resources.nodes and parallelism here."]
    return "\n".join(head) + "\n" + yaml.safe_dump(imp.recipe, sort_keys=False, default_flow_style=None, width=100)


def write(imp: HfImport, root: Path, source: str, force: bool = False) -> list[Path]:
    """Write the model document (and its recipe, when one is made); refuses to overwrite any without --force."""
    model_path, recipe_path = root / "models" / f"{imp.name}.yaml", root / "imported" / f"{imp.name}.yaml"
    files = {model_path: render_model(imp, source, model_path)}
    if imp.recipe is not None:
        files[recipe_path] = render_recipe(imp, source, recipe_path)
    for path in files:
        if path.exists() and not force:
            raise ImportError_(f"{path} exists (pass --force to overwrite, or --name NAME)")
    for path, text in files.items():
        write_file_atomically(path, text)
    return list(files)


def main(args, text: str | None = None) -> int:
    """`moeforge import` of a Hugging Face config (`text`: the source's, when the dispatch has read it already): one
    line and exit 2 on anything it cannot read."""
    source = args.source
    path = hf_config_path(source)
    shown = str(path) if path else source
    if text is None:
        text, why = read_source(str(path) if path else source)
        if why:
            print(printable(why), file=sys.stderr)
            return 2
    root = Path(args.root) if args.root else project.recipes()
    try:
        imp = import_config(text, source, args.name, args.platform, root)
        written = write(imp, root, shown, args.force)
    except ImportError_ as exc:
        where = f"{shown}:{exc.location}" if isinstance(exc, C.BadJson) else shown
        print(printable(f"{where}: error: {exc}"), file=sys.stderr)
        return 2
    out = [f"{shown}: Hugging Face {imp.origin}, read as {imp.family}"] + [f"wrote {p}" for p in written]
    out += [f"note: {note}" for note in imp.notes]
    if imp.unread:
        out.append(f"not read: {', '.join(sorted(imp.unread))} (no model document field; listed in the file)")
    if imp.recipe is not None:
        rid = f"imported/{imp.name}"
        out.append(f"next: moeforge compile {rid}" + ("" if root.resolve() == project.recipes().resolve()
                                                      else f"  (recipes root {root})")
                   + f"; moeforge plan-layout {imp.name} --platform {imp.platform} --gpus N for a layout")
    else:  # the model file now exists: writing the recipe beside it rewrites it (--force), with the same content
        again = f" --name {imp.name}" if args.name else ""
        out.append(f"next: moeforge plan-layout {imp.name} --platform PLATFORM --gpus N (a layout for N GPUs), or "
                   f"moeforge import {source}{again} --platform PLATFORM --force to write a recipe beside the model")
    for line in out:  # names and keys from config.json: escaped for a terminal and a CI log
        print(printable(line))
    return 0
