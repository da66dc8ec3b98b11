"""`moeforge matrix`: every recipe on every platform, with status and what the solver chose.

Each cell is the recipe compiled with its platform swapped (`--set platform=<p>`) and its node count
scaled to that platform's GPUs per node (the recipe's world size kept, rounded up to whole nodes), so
the table answers "what happens if I take this recipe, at its size, to that machine?".

A failing cell needs only which rules fail, not the minimal pins and fixes of a full explanation
(`moeforge check` gives those), so cells are solved with explain_errors=False; cells run in forked
workers when there are enough of them to pay.
"""
from __future__ import annotations

import html
import multiprocessing
import os
import textwrap
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.commands.check import recipe_files
from moeforge.compiler.diagnostics import CompileError, printable
from moeforge.compiler.files import write_file_atomically
from moeforge.compiler import driver
from moeforge.compiler.recipe.compose import RECIPES, display_path
from moeforge.compiler.recipe.load import load_file

WIDTH = 120  # the text table's widest line
DISPATCHER = {"alltoall": "a2a", "allgather": "ag", "flex/deepep": "dep", "flex/hybridep": "hep"}
PARALLEL_FROM = 12  # cells; fewer run in this process


def platforms(root: Path | None = None) -> list[str]:
    """The project's platforms and the built-in ones."""
    dirs = {(root or project.recipes()) / "platforms", RECIPES / "platforms"}
    return sorted({p.stem for d in dirs for p in d.glob("*.yaml")})


def gpus_per_node() -> dict[str, int]:
    """GPUs per node of every platform; the project's file wins over the built-in one of that name."""
    out = {}
    for directory in (RECIPES / "platforms", project.recipes() / "platforms"):
        for path in sorted(directory.glob("*.yaml")):
            data = load_file(path).data
            gpn = data.get("gpus_per_node") if isinstance(data, dict) else None
            if isinstance(gpn, int) and not isinstance(gpn, bool) and gpn > 0:
                out[path.stem] = gpn
    return out


def world_of(recipe: Path) -> tuple[str, int] | None:
    """(platform name, world size) of the recipe as written; None when it does not load."""
    try:
        data = driver.load(recipe).data  # the recipe as composed: its platform and size before any cell's swap
    except CompileError:
        return None
    platform, nodes = data.get("platform") or {}, (data.get("resources") or {}).get("nodes", 1)
    gpn = platform.get("gpus_per_node")
    if not (isinstance(nodes, int) and isinstance(gpn, int)):
        return None
    return platform.get("name"), nodes * gpn


def scaled_nodes(world: int, gpn: int) -> int:
    """Whole nodes of `gpn` GPUs that hold `world` ranks (rounded up)."""
    return max(1, -(-world // gpn))


def cell(recipe: Path, platform: str, nodes: int | None = None) -> dict:
    """The recipe on `platform` (with `nodes` nodes when given): status, choices, warnings, errors."""
    overrides = [f"platform={platform}"] + ([f"resources.nodes={nodes}"] if nodes is not None else [])
    try:
        r = driver.compile(recipe, overrides, explain_errors=False, plan=False).resolved
    except CompileError as exc:
        errors = [d for d in exc.diagnostics if d.is_error]
        return {"status": "error", "nodes": nodes, "errors": [d.code for d in errors],
                "messages": [d.message for d in errors]}
    env = r.env
    disp = env["moe_token_dispatcher_type"]
    if disp == "flex":
        disp += f"/{env['moe_flex_dispatcher_backend']}"
    return {"status": "ok", "nodes": env["num_nodes"], "world": env["world_size"], "dispatcher": disp,
            "ep_overlap": env["overlap_moe_expert_parallel_comm"], "delay_wgrad": env["delay_wgrad_compute"],
            "warnings": len(r.diagnostics), "warning_codes": [d.code for d in r.diagnostics]}


def _cell_job(job: tuple) -> dict:
    return cell(*job)


def build(paths=None) -> tuple[list[str], list[str], dict]:
    """Compile every recipe on every platform, nodes scaled to keep the world size: rows, columns and cells."""
    files = recipe_files(paths or [str(project.recipes())])
    plats = platforms()
    gpn = gpus_per_node()
    rows = [_row_name(f) for f in files]
    jobs = []
    for f in files:
        own = world_of(f)
        for p in plats:
            nodes = None
            if own is not None and own[0] != p and p in gpn:
                nodes = scaled_nodes(own[1], gpn[p])
            jobs.append((f, p, nodes))
    cells = _run(jobs)
    table = {(row, p): c for (row, p), c in zip(((r, p) for r in rows for p in plats), cells)}
    return rows, plats, table


def _row_name(f: Path) -> str:
    """The recipe id (tiny-moe/cpu) for a recipe of the project, else its display path."""
    try:
        real, top = f.resolve(), project.recipes().resolve()
    except (OSError, RuntimeError):  # a symlink loop (3.11 raises RuntimeError): named as found, its cells say why
        real, top = f.absolute(), project.recipes().absolute()
    try:
        return str(real.relative_to(top).with_suffix(""))
    except ValueError:
        return display_path(real, project.recipes())


def _run(jobs: list[tuple]) -> list[dict]:
    """Every cell, in order: forked workers (which inherit the warm imports) when there are enough cells."""
    workers = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1, 8)
    if len(jobs) < PARALLEL_FROM or workers < 2:
        return [_cell_job(j) for j in jobs]
    from moeforge.compiler.solver import encoding  # noqa: F401  # lazy: z3, imported before the fork so workers start warm

    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:  # no fork on this platform
        return [_cell_job(j) for j in jobs]
    with ctx.Pool(workers) as pool:
        return pool.map(_cell_job, jobs, chunksize=1)


def _codes(rows, plats, table) -> dict[str, str]:
    """Error code -> its short reference (E1, E2, ...) in order of first appearance."""
    out: dict[str, str] = {}
    for r in rows:
        for p in plats:
            for code in table[(r, p)].get("errors", ()):
                out.setdefault(code, f"E{len(out) + 1}")
    return out


def _label(c: dict, refs: dict | None = None) -> str:
    """A short cell: dispatcher, O (EP overlap) / W (delayed wgrad) or '-', '!' with warnings; errors by E-number."""
    if c["status"] != "ok":
        if refs is None:
            return "ERROR " + ",".join(c["errors"][:2])
        first = refs[c["errors"][0]] if c["errors"] else "E?"
        return "ERR " + first + (f"+{len(c['errors']) - 1}" if len(c["errors"]) > 1 else "")
    flags = ("O" if c["ep_overlap"] else "-") + ("W" if c["delay_wgrad"] else "-")
    return f"{DISPATCHER.get(c['dispatcher'], c['dispatcher'])} {flags}{'!' if c['warnings'] else ''}"


def _fit(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def text(rows, plats, table) -> str:
    """The matrix for a terminal, fitted to WIDTH columns, with a legend for the cell codes."""
    refs = _codes(rows, plats, table)
    cols = [max([len(p)] + [len(_label(table[(r, p)], refs)) for r in rows]) for p in plats]
    room = WIDTH - sum(w + 2 for w in cols)
    width = min(max([len(r) for r in rows] + [6]), max(room, 12))
    lines = [_fit("recipe", width).ljust(width) + "  " + "  ".join(p.ljust(w) for p, w in zip(plats, cols))]
    for r in rows:
        lines.append(_fit(r, width).ljust(width) + "  "
                     + "  ".join(_label(table[(r, p)], refs).ljust(w) for p, w in zip(plats, cols)))
    lines = [line.rstrip() for line in lines]
    legend = ["", "each cell: the recipe with --set platform=<column>, nodes scaled to the platform's GPUs per node "
              "(world size kept)",
              "dispatcher: a2a alltoall, ag allgather, dep flex/DeepEP, hep flex/HybridEP; "
              "O EP overlap on, W delayed wgrad on, - off;",
              "! warnings or advice; ERR En(+k): fails rule En (and k more); details per cell: --html FILE"]
    legend += [f"{ref} {code}" for code, ref in refs.items()]
    return "\n".join(lines + [_wrap(line) for line in legend])


def _wrap(line: str) -> str:
    if len(line) <= WIDTH:
        return line
    return "\n".join(textwrap.wrap(line, WIDTH, subsequent_indent="   ", break_on_hyphens=False,
                                   break_long_words=True))


def _details(c: dict) -> str:
    nodes = f"nodes {c['nodes']}" if c.get("nodes") is not None else "nodes as the recipe says"
    if c["status"] != "ok":
        return nodes + "; " + "; ".join(f"{code}: {msg}" for code, msg in zip(c["errors"], c.get("messages", ())))
    return (f"{nodes} ({c['world']} ranks); dispatcher {c['dispatcher']}; EP overlap "
            f"{'on' if c['ep_overlap'] else 'off'}; delayed wgrad {'on' if c['delay_wgrad'] else 'off'}"
            + (f"; {c['warnings']} warning(s)/advice: {', '.join(c['warning_codes'])}" if c["warnings"] else ""))


def page(rows, plats, table) -> str:
    """The matrix as a self-contained HTML page (every value escaped), with each cell's details."""
    head = "".join(f"<th>{html.escape(p)}</th>" for p in plats)
    body = []
    for r in rows:
        cells = []
        for p in plats:
            c = table[(r, p)]
            cls = "ok" if c["status"] == "ok" else "err"
            cells.append(f'<td class="{cls}"><b>{html.escape(_label(c))}</b>'
                         f'<div class="d">{html.escape(_details(c))}</div></td>')
        body.append(f"<tr><th>{html.escape(r)}</th>{''.join(cells)}</tr>")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>moeforge matrix</title><style>"
            "body{font:13px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}td.ok{background:#e8f5e9}"
            "td.err{background:#ffebee}.d{font-size:11px;color:#444;max-width:22em}</style></head><body>"
            "<h1>moeforge: recipes x platforms</h1><p>Each cell: the recipe with <code>--set platform=&lt;column&gt;"
            "</code>, nodes scaled to the platform's GPUs per node (world size kept).</p>"
            f"<table><tr><th>recipe</th>{head}</tr>{''.join(body)}</table></body></html>\n")


def arguments(c) -> None:
    """matrix's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("paths", nargs="*", help="recipe files or directories (default: the project's recipes/)")
    c.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page (with each cell's details)")


def run(args) -> int:
    """Print the matrix, and with --html write the page atomically."""
    rows, plats, table = build(args.paths or None)
    print("\n".join(map(printable, text(rows, plats, table).split("\n"))))  # recipe and platform names
    if args.html:
        write_file_atomically(Path(args.html), page(rows, plats, table))
    return 0
