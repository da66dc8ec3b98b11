"""`moeforge`: compile, check, explain, rules, lint-config, migrate, data prepare.

Exit codes: 0 clean, 1 the input has errors (diagnostics printed), 2 usage or internal
error. No command ever shows a traceback for bad input.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from . import __version__
from .diagnostics import CompileError, error, render_all, shown

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moeforge", description="Compile MoE training recipes into Megatron launches.")
    p.add_argument("--version", action="version", version=f"moeforge {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def recipe_cmd(name, help_):
        c = sub.add_parser(name, help=help_)
        c.add_argument("recipe", help="recipe id (tiny-moe/cpu) or path under recipes/")
        c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a recipe value, e.g. --set parallelism.ep=8 (repeatable)")
        c.add_argument("--strict", action="store_true", help="silent Megatron behaviour is an error")
        c.add_argument("--format", choices=("text", "json", "github"), default="text")
        return c

    def output_opts(c):
        c.add_argument("--quiet", action="store_true", help="print errors only")
        c.add_argument("--advice", action="store_true", help="also print advice (tuning guidance; off by default)")

    c = recipe_cmd("compile", "check, solve and emit build/<recipe>/")
    c.add_argument("--out", default=str(ROOT / "build"), help="build root (default: build/)")
    output_opts(c)
    recipe_cmd("explain", "print every decision and why")
    c = sub.add_parser("check", help="validate and solve every recipe under PATHS")
    c.add_argument("paths", nargs="*", default=[str(RECIPES)])
    c.add_argument("--strict", action="store_true")
    c.add_argument("--format", choices=("text", "json", "github"), default="text")
    output_opts(c)
    sub.add_parser("rules", help="print the rule catalogue")
    c = sub.add_parser("lint-config", help="check a flat Megatron config (YAML/JSON)")
    c.add_argument("rest", nargs=argparse.REMAINDER)
    c = sub.add_parser("diff", help="what differs between two recipes or two plans, with provenance "
                                    "(exit 1 when they differ, as diff(1) does)")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--format", choices=("text", "json"), default="text")
    c = sub.add_parser("matrix", help="recipes x platforms: status, dispatcher, overlap")
    c.add_argument("paths", nargs="*", default=[str(RECIPES)])
    c.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    c = sub.add_parser("migrate", help="rewrite documents to the current schema version, comments kept")
    c.add_argument("files", nargs="+")
    c = sub.add_parser("data", help="training data tools (run in the runtime environment: make setup)",
                       description="Training data tools. They run in the runtime's Python (megatron-core): "
                                   "`make setup`, then .venv/bin/python -m compiler data ...")
    data = c.add_subparsers(dest="data_command", required=True, metavar="{prepare}")
    data.add_parser("prepare", add_help=False,  # main() hands its arguments, --help included, to the runtime
                    help="tokenize a JSONL corpus into a Megatron indexed dataset PREFIX.bin/.idx/.json "
                         "(see moeforge data prepare --help)")
    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None and hasattr(signal, "SIGPIPE") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a real CLI run: `moeforge rules | head` ends quietly
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lint-config"]:  # its options are its own
        from .lintconfig import main_lint_config
        return main_lint_config(argv[1:])
    if argv[:2] == ["data", "prepare"]:  # its options (and --help) are runtime.data_prepare's
        return cmd_data_prepare(argv[2:])
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    try:
        return COMMANDS[args.command](args)
    except CompileError as exc:
        print(render_all(exc.diagnostics, getattr(args, "format", "text")))
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug in moeforge, not in the recipe: say so plainly
        print(f"moeforge: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def cmd_compile(args) -> int:
    from . import emit
    from .pipeline import load, resolve
    from .plan import build

    resolved = resolve(load(args.recipe, args.overrides), args.strict)
    plan = build(resolved)
    out = Path(args.out) / resolved.composed.recipe_id
    build_dir = _relative(out)
    try:
        emit.write_atomically(out, emit.render(plan, resolved.composed.data, build_dir))
    except OSError as exc:
        raise CompileError([error("E_IO", f"cannot write the build to {out}: {exc.strerror or exc}",
                                  help="choose a writable --out directory")]) from None
    printed = shown(resolved.diagnostics, args.quiet, args.advice)
    if printed:
        print(render_all(printed, args.format))
    if args.format == "text":
        lay = plan["layout"]
        tc = plan["transformer_config"]
        print(f"compiled {resolved.composed.recipe_id} -> {build_dir}/  "
              f"({lay['world_size']} ranks: TP{lay['tp']} PP{lay['pp']} EP{lay['ep']} DP{lay['dp']}; "
              f"dispatcher {tc.get('moe_token_dispatcher_type')}; EP overlap "
              f"{'on' if tc.get('overlap_moe_expert_parallel_comm') else 'off'}; delayed wgrad "
              f"{'on' if tc.get('delay_wgrad_compute') else 'off'})")
    return 0


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path.resolve())


def cmd_explain(args) -> int:
    from .explain import explain
    from .pipeline import load, resolve

    print(explain(resolve(load(args.recipe, args.overrides), args.strict)))
    return 0


def cmd_check(args) -> int:
    from .check import check_paths

    return check_paths(args.paths, args.strict, args.format, args.quiet, args.advice)


def cmd_rules(args) -> int:
    from .rules import CATALOGUE, PREFERENCES

    for r in CATALOGUE:
        print(f"{r.id}  [{r.severity}{', silent' if r.silent else ''}{', lint-config only' if r.lint_only else ''}; "
              f"{r.origin}]")
        print(f"    when {r.when!r}  require {r.require!r}")
        print(f"    {r.message}")
        if r.megatron_message:
            print(f"    megatron: {r.megatron_message}")
        print(f"    source: {r.source}")
        print(f"    fix: {r.fix}")
        if r.versions:
            print("    versions: " + ", ".join(f"{f} {spec}" for f, spec in r.versions))
    for p in PREFERENCES:
        print(f"{p.id}  [preference, weight {p.weight}]\n    prefer {p.prefer!r} when {p.when!r}\n    {p.reason}")
    return 0


def cmd_migrate(args) -> int:
    from .load import load_file
    from .migrate import migrate_file

    diags = []
    for name in args.files:
        try:
            load_file(Path(name), name)  # the safe loader first: located errors for bad files
            changed = migrate_file(Path(name))
        except CompileError as exc:
            diags += exc.diagnostics
            continue
        print(f"{name}: {'migrated' if changed else 'already current'}")
    if diags:
        raise CompileError(diags)
    return 0


def cmd_diff(args) -> int:
    from .diff import diff, render

    rows = diff(args.a, args.b)
    print(render(rows, args.a, args.b, args.format))
    return 1 if rows else 0


def cmd_matrix(args) -> int:
    from . import matrix

    rows, plats, table = matrix.build(args.paths)
    print(matrix.text(rows, plats, table))
    if args.html:
        from .emit import write_file_atomically
        write_file_atomically(Path(args.html), matrix.page(rows, plats, table))
    return 0


def cmd_data_prepare(rest: list[str]) -> int:
    """Run `python -m runtime.data_prepare REST` in this interpreter, as a subprocess: tokenizing
    needs megatron-core (and torch), which the compiler never imports. Termination signals are
    passed on, so the child removes its temporaries; its exit code is returned (128+N when a
    signal N ended it)."""
    import os
    import subprocess

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["MOEFORGE_DATA_PREPARE_PROG"] = "moeforge data prepare"
    cmd = [sys.executable, "-m", "runtime.data_prepare", *rest]
    child: list[subprocess.Popen] = []

    def forward(signum, frame):
        if child:
            child[0].send_signal(signum)

    handled = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    old = {}
    if threading.current_thread() is threading.main_thread():
        old = {s: signal.signal(s, forward) for s in handled}
    try:
        try:
            child.append(subprocess.Popen(cmd, env=env))
        except (OSError, ValueError) as exc:  # ValueError: an argument with a NUL byte
            print(f"moeforge data prepare: cannot start {sys.executable}: {getattr(exc, 'strerror', None) or exc}",
                  file=sys.stderr)
            return 2
        rc = child[0].wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc


COMMANDS = {"compile": cmd_compile, "explain": cmd_explain, "check": cmd_check, "rules": cmd_rules,
            "migrate": cmd_migrate, "diff": cmd_diff, "matrix": cmd_matrix}

if __name__ == "__main__":
    sys.exit(main())
