"""`moeforge check`: validate and solve every recipe under the given paths, report all."""
from __future__ import annotations

import json
from pathlib import Path

from .compose import RECIPES, display_path
from .diagnostics import CompileError, Diagnostic, Position, render_all

NON_RECIPE_DIRS = {"platforms", "models"}


def recipe_files(paths) -> list[Path]:
    out = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            out += [p for p in sorted(path.rglob("*.yaml"))
                    if not NON_RECIPE_DIRS & set(p.relative_to(path).parts[:-1])
                    and not NON_RECIPE_DIRS & {path.resolve().name}]
        else:
            out.append(path)
    return out


def check_one(path: Path, strict: bool) -> list[Diagnostic]:
    from .pipeline import load, resolve

    try:
        return resolve(load(path), strict).diagnostics
    except CompileError as exc:
        return exc.diagnostics


def check_paths(paths, strict: bool, fmt: str) -> int:
    files = recipe_files(paths)
    results = {}
    for path in files:
        if not path.exists():
            results[str(path)] = [Diagnostic("error", "E_RECIPE_NOT_FOUND", "no such file", Position(str(path)))]
            continue
        results[display_path(path.resolve(), RECIPES)] = check_one(path, strict)
    diags = [d for ds in results.values() for d in ds]
    errors = sum(d.is_error for d in diags)
    if fmt == "json":
        print(json.dumps({"recipes": len(files), "errors": errors, "warnings": len(diags) - errors,
                          "results": {k: [d.to_json() for d in v] for k, v in results.items()}}, indent=2))
    else:
        if diags:
            print(render_all(diags, fmt))
        if fmt == "text":
            print(f"checked {len(files)} recipe(s): {errors} error(s), {len(diags) - errors} warning(s)/advice")
    return 1 if errors else 0
