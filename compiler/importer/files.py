"""`moeforge import`'s output: the imported recipe and model documents written into a project's recipes/ (with
what was not imported as comments), and the command itself. compiler/importer/launch.py reads the launch."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from moeforge.compiler import driver
from moeforge.compiler import project
from moeforge.compiler.diagnostics import CompileError, printable, yaml_comment as comment
from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.importer import hf
from moeforge.compiler.importer.launch import Imported, import_text
from moeforge.compiler.launch_reader import kinds
from moeforge.compiler.launch_reader.text import ImportError_, read_source


def render(imp: Imported, doc: dict, kind: str, source: str, path: Path) -> str:
    """The document with its header: every comment line goes through `comment`, so no text from the launch can
    end a comment and start YAML (a flag value with a newline once wrote `checkpoint: {save: ...}` into a recipe)."""
    head = [f"yaml-language-server: $schema={project.schema_ref(path, kind)}",
            f"Imported by `moeforge import` from {source} ({imp.kind}).",
            ]
    if kind == "recipe":
        head.append(f"platform {imp.platform}: {imp.platform_reason}")
        head += [f"note: {d}" for d in imp.notes]
        if imp.unmapped:
            head.append(f"Not imported ({len(imp.unmapped)}):")
            head += [f"  {text}  -- {why}" for text, why in imp.unmapped]
    head = [comment(h) for h in head]
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    return "\n".join(head) + "\n" + body


def write(imp: Imported, root: Path, source: str, force: bool = False) -> tuple[Path, Path]:
    """Write the model then the recipe atomically; refuses to overwrite either without --force."""
    recipe_path = root / "imported" / f"{imp.recipe['name']}.yaml"
    model_path = root / "models" / f"{imp.model['name']}.yaml"
    for p in (recipe_path, model_path):
        if p.exists() and not force:
            raise ImportError_(f"{p} exists (pass --force to overwrite, or --name NAME)")
    write_file_atomically(model_path, render(imp, imp.model, "model", source, model_path))
    write_file_atomically(recipe_path, render(imp, imp.recipe, "recipe", source, recipe_path))
    return recipe_path, model_path


def compile_verdict(recipe_path: Path, root: Path) -> list[str]:
    """What `moeforge compile` says of the recipe just written: [] when it compiles, else its errors' first
    lines (an import never leaves a recipe its own compile refuses without saying so)."""
    try:
        driver.compile(recipe_path, (), root)
    except CompileError as exc:
        return [d.render().splitlines()[0] for d in exc.diagnostics if d.is_error] or ["refused"]
    return []


def main(args) -> int:
    """Entry for `moeforge import`: routes a config.json to the HF importer, writes the files, exits 2 on bad input."""
    source = args.source
    if hf.config_path(source) is not None:  # a model directory
        return hf.main(args)
    text, why = read_source(source)
    if why:
        print(printable(why), file=sys.stderr)
        return 2
    if kinds.detect(text, source) == "hf-config":  # compiler/launch_reader/kinds.py: one table of input kinds
        return hf.main(args, text)
    root = Path(args.root) if args.root else project.recipes()
    try:
        imp = import_text(text, source, args.platform, root, args.name)
        recipe_path, model_path = write(imp, root, Path(source).name, args.force)
    except ImportError_ as exc:
        print(printable(f"{source}: error: {exc}"), file=sys.stderr)
        return 2
    refused = compile_verdict(recipe_path, root)
    if refused:  # said in the recipe itself too, where the next reader looks
        imp.notes.append(f"moeforge compile refuses this recipe as imported: {refused[0]}")
        write(imp, root, Path(source).name, force=True)
    out = [f"{source}: {imp.kind}, platform {imp.platform} ({imp.platform_reason})",
           f"wrote {recipe_path}", f"wrote {model_path}"]
    out += [f"note: {d}" for d in imp.notes]
    out += [f"not imported: {text_}  ({why})" for text_, why in imp.unmapped]
    rid = recipe_path.resolve().relative_to(root.resolve()).with_suffix("")
    elsewhere = "" if root.resolve() == project.recipes().resolve() else f"  (recipes root {root})"
    if refused:  # the files are written (for editing), but the import did not produce a recipe that compiles
        out.append(f"compile: refused ({len(refused)} error(s)); first: {refused[0]}")
        out.append(f"next: edit {recipe_path} (or {model_path}), then moeforge compile {rid}{elsewhere}")
    else:
        out += ["compile: ok", f"next: moeforge compile {rid}{elsewhere}"]
    for line in out:  # every line holds text from the launch: escaped for a terminal and a CI log
        print(printable(line))
    return 1 if refused else 0
