"""`moeforge matrix`: every recipe on every platform, with status and what the solver chose.

Each cell is the recipe compiled with its platform swapped (`--set platform=<p>`), so the
table answers "what happens if I take this recipe to that machine?".
"""
from __future__ import annotations

import html
from pathlib import Path

from .check import recipe_files
from . import project
from .compose import RECIPES, display_path
from .diagnostics import CompileError


def platforms(root: Path | None = None) -> list[str]:
    """The project's platforms and the built-in ones."""
    dirs = {(root or project.recipes()) / "platforms", RECIPES / "platforms"}
    return sorted({p.stem for d in dirs for p in d.glob("*.yaml")})


def cell(recipe: Path, platform: str) -> dict:
    from .pipeline import load, resolve

    try:
        r = resolve(load(recipe, [f"platform={platform}"]))
    except CompileError as exc:
        errors = [d.code for d in exc.diagnostics if d.is_error]
        return {"status": "error", "errors": errors}
    env = r.env
    disp = env["moe_token_dispatcher_type"]
    if disp == "flex":
        disp += f"/{env['moe_flex_dispatcher_backend']}"
    return {"status": "ok", "dispatcher": disp, "ep_overlap": env["overlap_moe_expert_parallel_comm"],
            "delay_wgrad": env["delay_wgrad_compute"], "warnings": len(r.diagnostics)}


def build(paths=None) -> tuple[list[str], list[str], dict]:
    files = recipe_files(paths or [str(project.recipes())])
    plats = platforms()
    rows = [display_path(f.resolve(), project.recipes()) for f in files]
    table = {(row, p): cell(f, p) for row, f in zip(rows, files) for p in plats}
    return rows, plats, table


def _label(c: dict) -> str:
    if c["status"] != "ok":
        return "ERROR " + ",".join(c["errors"][:2])
    return f"{c['dispatcher']} ovl={'on' if c['ep_overlap'] else 'off'} dwg={'on' if c['delay_wgrad'] else 'off'}"


def text(rows, plats, table) -> str:
    width = max(len(r) for r in rows) if rows else 6
    cols = [max([len(p)] + [len(_label(table[(r, p)])) for r in rows]) for p in plats]
    lines = ["recipe".ljust(width) + "  " + "  ".join(p.ljust(w) for p, w in zip(plats, cols))]
    for r in rows:
        lines.append(r.ljust(width) + "  " + "  ".join(_label(table[(r, p)]).ljust(w) for p, w in zip(plats, cols)))
    return "\n".join(lines)


def page(rows, plats, table) -> str:
    head = "".join(f"<th>{html.escape(p)}</th>" for p in plats)
    body = []
    for r in rows:
        cells = []
        for p in plats:
            c = table[(r, p)]
            cls = "ok" if c["status"] == "ok" else "err"
            cells.append(f'<td class="{cls}">{html.escape(_label(c))}</td>')
        body.append(f"<tr><th>{html.escape(r)}</th>{''.join(cells)}</tr>")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>moeforge matrix</title><style>"
            "body{font:13px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}td.ok{background:#e8f5e9}"
            "td.err{background:#ffebee}</style></head><body><h1>moeforge: recipes x platforms</h1>"
            f"<table><tr><th>recipe</th>{head}</tr>{''.join(body)}</table></body></html>\n")
