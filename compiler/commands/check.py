"""`moeforge check`: validate every document under the given paths (recipes validated and solved; sweeps,
calibrations, platforms and models by the schema their `schema:` key declares), report all.

Each document is checked by the kind it declares, whatever directory it is in, so the pre-commit hook and
the CI check (which pass any changed file under recipes/) cover sweeps and calibrations too; a sweep is
checked by the same code as `moeforge sweep check` (compiler/sweep/workflow.check).

A diagnostic found in several recipes (its position is in a base recipe they extend, or in a
model or platform they share) is printed once, with the recipes it affects. --quiet prints errors
only; advice is printed only with --advice. The summary counts errors, warnings and advice apart
(every diagnostic once), whatever was printed.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

from moeforge.compiler import bounded, project
from moeforge.compiler.diagnostics import (CompileError, Diagnostic, Position, merge_shared, printable, render_all,
                                           shown, summary)
from moeforge.compiler import driver
from moeforge.compiler.commands.options import output_arguments
from moeforge.compiler.knobs.fields import megatron_core_diagnostics
from moeforge.compiler.recipe import validate
from moeforge.compiler.recipe.compose import RECIPE_NOT_FOUND_HELP, display_path, resolve_recipe
from moeforge.compiler.recipe.load import load_file
from moeforge.compiler.recipe.migrate import old_schema_notes

NON_RECIPE_DIRS = {"platforms", "models", "sweeps"}  # documents of their own kinds, not recipes


def recipe_files(paths) -> list[Path]:
    """The recipes under the paths (platform, model and sweep folders skipped); an id resolves as compile's does."""
    out = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            out += [p for p in sorted(path.rglob("*.yaml"))
                    if not NON_RECIPE_DIRS & set(p.relative_to(path).parts[:-1])
                    and not NON_RECIPE_DIRS & {path.resolve().name}]
        elif not path.exists() and path.suffix not in (".yaml", ".yml"):
            try:  # an id (model/name), resolved as compile resolves it
                out.append(resolve_recipe(str(name)))
            except CompileError:
                out.append(path)
        else:
            out.append(path)
    return out


def recipe_ids(root) -> list[str]:
    """The recipes under a catalogue directory as ids ('model/name', no suffix), sorted: the files
    recipe_files finds there (platform and model documents are not recipes)."""
    root = Path(root)
    return sorted(str(p.relative_to(root).with_suffix("")) for p in recipe_files([root]))


# `schema: moeforge/<kind>/v<N>` at the top level: read from the text, so a recipe is loaded once (by its compile)
SCHEMA_KEY = re.compile(r"^schema:[ \t]*[\"']?moeforge/([a-z]+)/v\d+", re.MULTILINE)
DOCUMENT_KINDS = ("recipe", "sweep", "calibration", "platform", "model")


def document_files(paths) -> list:
    """What `check` checks: every YAML file under a directory (sweeps, platforms, models and calibrations
    included), a file as given, an id resolved as compile resolves it; an id that does not resolve is its
    diagnostics (``(name, [Diagnostic])``), reported at the name."""
    out = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            out += sorted(p for p in path.rglob("*")
                          if p.suffix in (".yaml", ".yml") and (p.is_file() or p.is_symlink()))
        elif not path.exists() and path.suffix not in (".yaml", ".yml"):
            try:  # an id (model/name, builtin:model/name), resolved as compile resolves it
                out.append(resolve_recipe(str(name)))
            except CompileError as exc:
                out.append((str(name), exc.diagnostics))
        else:
            out.append(path)
    return out


def declared_kind(path: Path) -> str:
    """The document kind a file declares by its `schema:` key; else by its directory (recipes/platforms/,
    models/, sweeps/), else a recipe (whose compile says the key is missing)."""
    try:
        match = SCHEMA_KEY.search(bounded.read_text(path, bounded.LIMITS["recipe"]))
    except (bounded.Unreadable, OSError, UnicodeDecodeError):
        match = None  # the recipe loader says what is wrong with the file, at the file
    if match and match.group(1) in DOCUMENT_KINDS:
        return match.group(1)
    parent = path.resolve().parent.name
    return parent[:-1] if parent in NON_RECIPE_DIRS else "recipe"


def check_one(path: Path, strict: bool) -> list[Diagnostic]:
    """One document's diagnostics by its kind; a crash it triggers is an E_INTERNAL at the file, not a traceback."""
    try:
        kind = declared_kind(path)
        if kind == "sweep":
            return check_sweep(path)
        if kind == "calibration":
            return check_calibration(path)
        if kind in ("platform", "model"):  # recipes/platforms/x.yaml, recipes/models/y.yaml
            return check_document(path, kind)
        compiled = driver.compile(path, strict=strict, plan=False)
        return old_schema_notes(compiled.composed.documents) + compiled.diagnostics
    except CompileError as exc:
        return exc.diagnostics
    except (RecursionError, MemoryError, ValueError, OSError, RuntimeError) as exc:
        # a bug in moeforge that this file triggers: said at the file, and the other files are still checked
        return [Diagnostic("error", "E_INTERNAL", f"internal error: {type(exc).__name__}: {exc}"[:300],
                           Position(str(path)), help="this is a moeforge bug: please report it with the file")]


def check_document(path: Path, kind: str) -> list[Diagnostic]:
    """A platform, model or calibration file on its own: its schema (schemas/<kind>.v1.json) and, for a
    platform, a supported megatron-core release."""
    doc = load_file(path, display_path(path.resolve(), project.recipes()))
    diags = validate.missing_schema(doc.data, doc.file)
    if diags or not isinstance(doc.data, dict):
        return diags or [Diagnostic("error", "E_NOT_A_MAPPING", f"a {kind} must be a mapping", doc.pos(()))]
    schema = validate.document_schema(doc.data, kind) if kind in validate.KINDS else _declared_schema(doc, kind)
    if isinstance(schema, list):
        return schema
    diags = validate.check(doc.data, schema, doc.pos)
    if kind == "platform" and not diags:
        diags += megatron_core_diagnostics(doc.data.get("software"), doc.pos(("software", "megatron_core")))
    return diags


def _declared_schema(doc, kind: str):
    """The schema file of a kind outside validate.KINDS (a calibration): the one it declares, or the
    diagnostic at its `schema:` key when this moeforge has no such version."""
    known = project.schema_name(kind)  # calibration.v1.json
    declared = validate.declared_version(doc.data)
    if declared and f"{declared[0]}.v{declared[1]}.json" == known:
        return known
    current = f"moeforge/{kind}/v{known[len(kind) + 2:-len('.json')]}"
    return [Diagnostic("error", "E_SCHEMA_VERSION", f"this moeforge reads {current}, not {doc.data.get('schema')!r}",
                       doc.pos(("schema",)), help=f"write schema: {current}, or upgrade moeforge")]


def check_sweep(path: Path) -> list[Diagnostic]:
    """A sweep, as `moeforge sweep check` checks it: its document (knob paths with a did-you-mean) and its
    recipe are errors; every point is compiled, and a point the rules refuse is a warning at the sweep line
    that set the value, naming the points (sweep launch skips them; a sweep may try what the rules refuse,
    as recipes/sweeps/tiny-overlap.yaml does); a sweep none of whose points can run is an error."""
    from moeforge.compiler.sweep import workflow  # lazy: a check without sweeps does not load the sweep package

    checked = workflow.check(str(path))  # CompileError: the document or its recipe, reported by check_one
    diags = list(checked.sweep.notes)
    refused: dict = {}
    for c in checked.compiled:
        diags += c.warnings
        for d in c.errors:
            refused.setdefault((d.code, d.message, d.pos), (d, []))[1].append(c.point.id)
    for d, ids in refused.values():
        many = len(ids) > 1
        diags.append(replace(d, severity="warning", message=f"{d.message} (point{'s' if many else ''} "
                             f"{', '.join(ids)} refused: sweep launch skips {'them' if many else 'it'})"))
    if not checked.launchable:
        diags.append(Diagnostic("error", "E_SWEEP_NOTHING_TO_RUN", "the rules refuse every point of the sweep",
                                checked.sweep.doc.pos(("name",)) if checked.sweep.doc else Position(str(path)),
                                help="`moeforge sweep check` lists each point's errors; change the axes or `set`"))
    return validate.dedupe(diags)


def check_calibration(path: Path) -> list[Diagnostic]:
    """A calibration document: its schema, located (schemas/calibration.v1.json), then what the estimates
    check when they read it (compiler/estimate/calibration.load: the platform it names, its file name)."""
    from moeforge.compiler.estimate import calibration  # lazy: only a calibration document needs it

    diags = check_document(path, "calibration")
    if diags:
        return diags
    platform = path.name[:-len(calibration.SUFFIX)] if path.name.endswith(calibration.SUFFIX) else None
    try:
        calibration.load(path, platform)
    except calibration.CalibrationError as exc:
        return [Diagnostic("error", "E_CALIBRATION", str(exc).split(": ", 1)[-1],
                           Position(display_path(path.resolve(), project.recipes())),
                           help="rewrite it with `moeforge calibrate`")]
    return []


PARALLEL_FROM = 8  # below this many recipes a worker pool costs more than it saves


def _check_all(files: list[Path], strict: bool) -> list[list[Diagnostic]]:
    """Check recipes, forking workers (which inherit the warm imports) when it pays."""
    workers = min(len(os.sched_getaffinity(0)), 4, len(files) // (PARALLEL_FROM // 2) or 1)
    if len(files) < PARALLEL_FROM or workers < 2:
        return [check_one(f, strict) for f in files]
    import multiprocessing  # lazy: a check of a few recipes (the cold check) runs without a pool

    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.starmap(check_one, [(f, strict) for f in files], chunksize=2)


def check_paths(paths, strict: bool, fmt: str, quiet: bool = False, advice: bool = False) -> int:
    """Check every document named and print the report; exit 1 when any has an error, 0 otherwise."""
    files = document_files(paths)
    results = {}
    for name, diags in [f for f in files if isinstance(f, tuple)]:
        results[name] = diags
    files = [f for f in files if not isinstance(f, tuple)]
    missing = [f for f in files if not f.exists()]
    for path in missing:
        why = "a symbolic link that leads nowhere (a loop, or a missing target)" if path.is_symlink() else \
            "no such file"
        results[str(path)] = [Diagnostic("error", "E_RECIPE_NOT_FOUND", why, Position(str(path)),
                                         help=RECIPE_NOT_FOUND_HELP)]
    present = [f for f in files if f.exists()]
    for path, diags in zip(present, _check_all(present, strict)):
        results[display_path(path.resolve(), project.recipes())] = diags
    files = results  # every document named, found or not
    unique = merge_shared(results)
    counts = summary(unique)
    if fmt == "json":  # per recipe, as schemas/check-report.v1.json has it; the counts are of unique diagnostics
        print(json.dumps({"recipes": len(files), "errors": counts["error"], "warnings": counts["warning"],
                          "advice": counts["advice"],
                          "results": {k: [d.to_json() for d in shown(v, quiet, advice)] for k, v in results.items()}},
                         indent=2))
    else:
        out = shown(unique, quiet, advice)
        if out:
            print(render_all(out, fmt))
        if fmt == "text":
            hidden = "" if advice or quiet or not counts["advice"] else " (shown with --advice)"
            print(printable(f"checked {len(files)} document(s): {counts['error']} error(s), "
                            f"{counts['warning']} warning(s), {counts['advice']} advice{hidden}"))
    return 1 if counts["error"] else 0


_FORMATS = ("text", "json", "github")


def arguments(c) -> None:
    """check's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("paths", nargs="*", help="recipe files or directories (default: the project's recipes/)")
    c.add_argument("--strict", action="store_true", help="silent Megatron behaviour is an error")
    c.add_argument("--format", choices=_FORMATS, default="text",
                   help="output: text (default), json (schemas/check-report.v1.json), or github (annotations)")
    output_arguments(c)


def fast_args(argv: list[str]):
    """The arguments of a plain `check [PATHS] [--strict] [--quiet] [--advice] [--format F]` (what a
    pre-commit hook or an editor runs), read without argparse, whose import and parser building are a
    measurable part of a cold check; anything else (abbreviations, --help, a bad value) returns None
    and goes through argparse, with its messages."""
    args = {"command": "check", "paths": [], "strict": False, "quiet": False, "advice": False, "format": "text"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--strict", "--quiet", "--advice"):
            args[a[2:]] = True
        elif a == "--format" and i + 1 < len(argv) and argv[i + 1] in _FORMATS:
            args["format"] = argv[i + 1]
            i += 1
        elif a.startswith("--format=") and a[len("--format="):] in _FORMATS:
            args["format"] = a[len("--format="):]
        elif a == "--":
            args["paths"] += argv[i + 1:]
            break
        elif a.startswith("-") and a != "-":
            return None
        else:
            args["paths"].append(a)
        i += 1
    from types import SimpleNamespace  # lazy: only a plain check gets here

    return SimpleNamespace(**args)


def run(args) -> int:
    """Check the paths given, or the whole project's recipes/ when none are."""
    return check_paths(args.paths or [str(project.recipes())], args.strict, args.format, args.quiet, args.advice)
