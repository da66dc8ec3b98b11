"""`moeforge`: compile, check, explain, rules, lint-config, plan-layout, calibrate, diagnose, diff, matrix,
migrate, launch, dryrun, init, new, import, data prepare, sweep check|launch, results.

The project root (recipes/, build/) is found from the current directory upward (a moeforge.toml
or a recipes/ folder, compiler/project.py); the global option `--root DIR` names it.

Exit codes: 0 clean, 1 the input has errors (diagnostics printed), 2 usage or internal
error. No command ever shows a traceback for bad input.
"""
from __future__ import annotations

import sys
from pathlib import Path

from moeforge.compiler import __version__, project
from moeforge.compiler.diagnostics import CompileError, Position, error, printable, render_all, shown

# Each command imports what it needs inside its handler (`# lazy:`), so that a cold `moeforge check` loads the
# check's modules only (tests/compiler/test_cold_start.py lists what it must not import).


def in_main_thread() -> bool:
    """True in a real CLI run (threading is imported only when something already did)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.current_thread() is threading.main_thread()


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; `only`: just that subcommand's (a run parses one command, and building every
    subcommand's parser, launch's included, costs a cold start more than the check itself)."""
    import argparse  # lazy: a plain check is read without it (_plain_check)

    p = argparse.ArgumentParser(prog="moeforge", description="Compile MoE training recipes into Megatron launches.")
    p.add_argument("--version", action="version", version=f"moeforge {__version__}")
    p.add_argument("--root", metavar="DIR", help="the project root (default: the nearest directory, from here "
                                                  "upward, with a moeforge.toml or a recipes/ folder)")
    real = p.add_subparsers(dest="command", required=True)

    class _Only:  # add_parser for the wanted command; a throwaway parser for the others
        def add_parser(self, name, **kw):
            return real.add_parser(name, **kw) if only is None or name == only else argparse.ArgumentParser()
    sub = _Only()

    def recipe_cmd(name, help_):
        c = sub.add_parser(name, help=help_)
        c.add_argument("recipe", help="recipe id (tiny-moe/cpu), path under recipes/, or builtin:ID")
        c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a recipe value, e.g. --set parallelism.ep=8 (repeatable)")
        c.add_argument("--strict", action="store_true", help="silent Megatron behaviour is an error")
        c.add_argument("--format", choices=("text", "json", "github"), default="text",
                       help="output: text (default), json, or github (workflow annotations)")
        return c

    def output_opts(c):
        c.add_argument("--quiet", action="store_true", help="print errors only")
        c.add_argument("--advice", action="store_true", help="also print advice (tuning guidance; off by default)")

    c = recipe_cmd("compile", "check, solve and emit build/<recipe>/")
    c.add_argument("--out", default=None, help="build root (default: build/ under the project root)")
    output_opts(c)
    c = recipe_cmd("explain", "print every decision and why")
    c.add_argument("--changed", action="store_true", help="only the values that differ from megatron-core's defaults")
    c.add_argument("--calibration", metavar="FILE|none", help="estimate with this calibration (default: the one "
                                                               "beside the platform, if any; none: fixed constants)")
    c = sub.add_parser("check", help="validate and solve every recipe under PATHS (default: recipes/); "
                                     "a file in recipes/platforms/ or recipes/models/ is checked against its schema")
    c.add_argument("paths", nargs="*", help="recipe files or directories (default: the project's recipes/)")
    c.add_argument("--strict", action="store_true", help="silent Megatron behaviour is an error")
    c.add_argument("--format", choices=("text", "json", "github"), default="text",
                   help="output: text (default), json (schemas/check-report.v1.json), or github (annotations)")
    output_opts(c)
    c = sub.add_parser("rules", help="print the rule catalogue (all, or the rules and preferences named)")
    c.add_argument("ids", nargs="*", metavar="ID", help="rule or preference ids (case-insensitive; a trailing * "
                                                      "matches a prefix, e.g. EP_OVERLAP_*); default: all")
    c.add_argument("--format", choices=("text", "json"), default="text", help="output: text (default) or json")
    c = sub.add_parser("lint-config", help="check a flat Megatron config (YAML/JSON); see moeforge lint-config --help")
    c.add_argument("rest", nargs=argparse.REMAINDER, help="FILE and lint-config's own options")
    c = sub.add_parser("plan-layout", help="rank the layouts for MODEL on N GPUs of a platform; see "
                                           "moeforge plan-layout --help")
    c.add_argument("rest", nargs=argparse.REMAINDER, help="MODEL --platform P --gpus N and plan-layout's own options")
    c = sub.add_parser("calibrate", help="fit a platform's constants to measured runs (report.json, sweeps, "
                                         "Megatron-LM logs); see moeforge calibrate --help")
    c.add_argument("rest", nargs=argparse.REMAINDER, help="RUN... and calibrate's own options")
    c = sub.add_parser("diagnose", help="name a run's dominant wall (memory, communication, host, compute) and "
                                        "the fixes that compile; see moeforge diagnose --help")
    c.add_argument("rest", nargs=argparse.REMAINDER, help="RUN and diagnose's own options")
    c = sub.add_parser("diff", help="what differs between two recipes or two plans, with provenance "
                                    "(exit 1 when they differ, as diff(1) does)")
    c.add_argument("a", help="recipe id or path, build/<recipe> directory, or plan.json")
    c.add_argument("b", help="the other side, the same kinds as A")
    c.add_argument("--format", choices=("text", "json"), default="text", help="output: text (default) or json")
    c = sub.add_parser("matrix", help="recipes x platforms: status, dispatcher, overlap")
    c.add_argument("paths", nargs="*", help="recipe files or directories (default: the project's recipes/)")
    c.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page (with each cell's details)")
    c = sub.add_parser("migrate", help="rewrite documents to the current schema version, comments kept")
    c.add_argument("files", nargs="+", help="recipe, platform or model YAML files")
    c.add_argument("--check", action="store_true",
                   help="change nothing: list the files that would change and exit 1 if there are any")
    c = sub.add_parser("launch", help="compile a recipe (or take a build) and run it: local, slurm, or print",
                       description="Run build/<recipe>/ locally (torchrun.sh), on Slurm (sbatch --wait "
                                   "launch.sbatch) or print the exact commands. A recipe is compiled first.")
    if only in (None, "launch"):
        from moeforge.compiler.commands.launch import add_arguments  # lazy: launch's options only when launch is the command
        add_arguments(c, "build/<recipe> directory (with plan.json), or a recipe id/path to compile first")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="with a recipe: override a recipe value before compiling (repeatable)")
    c.add_argument("--out", default=None, help="with a recipe: build root (default: build/ under the project root)")
    c = sub.add_parser("dryrun", help="build one rank's shard of a plan on the meta device (runtime environment)",
                       description="Run python -m moeforge.runtime.dryrun in this interpreter (it needs torch and "
                                   "megatron-core; the compiler never imports them).")
    c.add_argument("plan", nargs="+", help="plan.json or build/<recipe> directory (several: each in turn)")
    c.add_argument("--rank", default="0", help="global rank, or a comma-separated list; negative counts from "
                                               "the last rank, e.g. 0,-1 (default 0)")
    c.add_argument("--local-spec", action="store_true",
                   help="map what only Transformer Engine/DeepEP/HybridEP/APEX builds onto the local spec (listed)")
    c.add_argument("--out", help="also write the JSON report to this file")
    c.add_argument("--calibration", metavar="FILE|none", help="the memory estimate's calibration (default: the one "
                                                               "beside the platform, if any; none: fixed terms)")
    c = sub.add_parser("init", help="make this directory a moeforge project: moeforge.toml, recipes/, "
                                    "a pre-commit config and a GitHub workflow (never overwrites)")
    c.add_argument("dir", nargs="?", default=None, help="the directory (default: --root, else the current one)")
    c = sub.add_parser("new", help="scaffold a document with every key commented, from the schemas")
    new = c.add_subparsers(dest="what", required=True)
    n = new.add_parser("platform", help="recipes/platforms/NAME.yaml")
    n.add_argument("name", help="the platform's name (its file name)")
    n = new.add_parser("model", help="recipes/models/NAME.yaml (from a Hugging Face config: moeforge import)")
    n.add_argument("name", help="the model's name (its file name)")
    n = new.add_parser("recipe", help="recipes/MODEL/PLATFORM.yaml")
    n.add_argument("model", help="a model name (recipes/models/ or built-in)")
    n.add_argument("platform", help="a platform name (recipes/platforms/ or built-in)")
    n = new.add_parser("sweep", help="recipes/sweeps/NAME.yaml: variants of a recipe")
    n.add_argument("name", help="the sweep's name (lower-case letters, digits and '-')")
    n.add_argument("recipe", help="the base recipe (tiny-moe/cpu, a path under recipes/, or builtin:ID)")
    c = sub.add_parser("sweep", help="variants of one recipe: check every point, launch them as one job array",
                       description="A sweep (recipes/sweeps/NAME.yaml, schemas/sweep.v1.json) is a recipe and the knob values "
                                   "to try. check compiles every point; launch writes build/sweeps/NAME/ and runs them.")
    sweep = c.add_subparsers(dest="sweep_command", required=True)
    s = sweep.add_parser("check", help="compile every point: refused points, collapsed duplicates, estimates")
    s.add_argument("sweep", help="a sweep file, or its name (recipes/sweeps/NAME.yaml)")
    s = sweep.add_parser("launch", help="write one build per point and run the points still to run")
    s.add_argument("sweep", help="a sweep file, or its name (recipes/sweeps/NAME.yaml)")
    s.add_argument("--target", choices=("local", "slurm", "k8s", "print"), default=None,
                   help="local: one point after another; slurm: one job array; k8s: one PyTorchJob per point; "
                        "print: the commands, nothing run (default: the sweep's launch.target, else local)")
    s.add_argument("--resume", action="store_true", help="run only the points (repeats) without a successful result")
    s.add_argument("--out", default=None, help="build root (default: build/ under the project root)")
    s.add_argument("--concurrency", type=int, default=None, help="slurm: array tasks at once (default: the sweep's)")
    s.add_argument("--timeout", type=int, default=None, help="slurm: seconds to follow the array (default: the sweep's)")
    s.add_argument("--no-wait", action="store_true", help="slurm: submit the array and return")
    c = sub.add_parser("results", help="a sweep's results: table, CSV, JSON, plots (schemas/results.v1.json)")
    c.add_argument("dir", help="the sweep's build directory (build/sweeps/NAME) or the sweep's name")
    c.add_argument("--format", choices=("table", "csv", "json"), default="table", help="what to print (default table)")
    c.add_argument("--baseline", metavar="POINT", help="show every point relative to this one (e.g. p00)")
    c.add_argument("--out", metavar="DIR", help="where to write results.{json,csv,png,html} (default: DIR itself)")
    c.add_argument("--no-plot", action="store_true", help="skip results.png and results.html")
    c = sub.add_parser("import", help="a recipe and a model file from a Megatron-LM launch script, command line, "
                                      "args file, functional-test model_config.yaml or Bridge override list; a model "
                                      "file (and with --platform a recipe) from a Hugging Face config.json")
    c.add_argument("source", help="the file to import ('-' reads stdin), or a model directory holding config.json")
    c.add_argument("--platform", help="platform name (default: guessed from the GPU the launch names; a Hugging Face "
                                      "config writes a recipe only with it)")
    c.add_argument("--name", help="recipe and model name (default: from the source, with -imported)")
    c.add_argument("--root", help="recipes root to write under: ROOT/imported/NAME.yaml, ROOT/models/NAME.yaml "
                                  "(default: recipes/)")
    c.add_argument("--force", action="store_true", help="overwrite existing files")
    c = sub.add_parser("data", help="training data tools (run in the runtime environment: make setup)",
                       description="Training data tools. They run in the runtime's Python (megatron-core): "
                                   "`make setup`, then .venv/bin/python -m moeforge.compiler data ...")
    data = c.add_subparsers(dest="data_command", required=True, metavar="{prepare}", help="data command")
    data.add_parser("prepare", add_help=False,  # main() hands its arguments, --help included, to the runtime
                    help="tokenize a JSONL corpus into a Megatron indexed dataset PREFIX.bin/.idx/.json "
                         "(see moeforge data prepare --help)")
    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None and in_main_thread():
        import signal  # lazy: only a real CLI run (main thread) resets SIGPIPE

        if hasattr(signal, "SIGPIPE"):
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a real CLI run: `moeforge rules | head` ends quietly
    argv = list(sys.argv[1:] if argv is None else argv)
    root = None
    while argv and (argv[0] == "--root" or argv[0].startswith("--root=")):  # global: before the command
        if argv[0] == "--root":
            if len(argv) < 2:
                print("moeforge: --root needs a directory", file=sys.stderr)
                return 2
            root, argv = argv[1], argv[2:]
        else:
            root, argv = argv[0].split("=", 1)[1], argv[1:]
    if root is not None and not Path(root).is_dir():
        print(f"moeforge: --root {root}: not a directory", file=sys.stderr)
        return 2
    previous = project.chosen_root()
    project.set_root(root)
    try:
        return _main(argv)
    finally:
        project.restore_root(previous)


def _main(argv: list[str]) -> int:
    try:
        return _dispatch(argv)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a path or a permission the user chose (init DIR, --emit FILE), not a bug in moeforge
        where = f"{exc.filename}: " if exc.filename else ""
        print(printable(f"moeforge: error: {where}{exc.strerror or exc}: choose a path you can write to"),
              file=sys.stderr)
        return 1
    except Exception as exc:  # a bug in moeforge, not in the recipe: say so plainly
        print(printable(f"moeforge: internal error: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return 2


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["lint-config"]:  # its options are its own
        from moeforge.compiler.lint.config_lint import main_lint_config  # lazy: lint-config only
        return main_lint_config(argv[1:])
    if argv[:1] == ["plan-layout"]:  # its options are its own
        from moeforge.compiler.planner.cli import main as plan_layout  # lazy: plan-layout only
        return plan_layout(argv[1:])
    if argv[:1] == ["calibrate"]:  # its options are its own
        from moeforge.compiler.calibrate.cli import main as calibrate  # lazy: calibrate only
        return calibrate(argv[1:])
    if argv[:1] == ["diagnose"]:
        from moeforge.compiler.diagnose.cli import main as diagnose  # lazy: diagnose only
        return diagnose(argv[1:])
    if argv[:2] == ["data", "prepare"]:  # its options (and --help) are moeforge.runtime.data_prepare's
        from moeforge.compiler.commands.runtime import cmd_data_prepare  # lazy: subprocess (cold check)
        return cmd_data_prepare(argv[2:])
    args = _plain_check(argv)
    if args is None:
        command = next((a for a in argv if not a.startswith("-")), None)
        try:
            args = _parser(command if command in COMMANDS else None).parse_args(argv)
        except SystemExit as exc:
            return 0 if exc.code == 0 else 2
    try:
        return COMMANDS[args.command](args)
    except CompileError as exc:
        print(render_all(exc.diagnostics, getattr(args, "format", "text")))
        return 1


_FORMATS = ("text", "json", "github")


def _plain_check(argv: list[str]):
    """The arguments of a plain `check [PATHS] [--strict] [--quiet] [--advice] [--format F]` (what a
    pre-commit hook or an editor runs), read without argparse, whose import and parser building are a
    measurable part of a cold check; anything else (abbreviations, --help, a bad value) returns None
    and goes through argparse, with its messages."""
    if argv[:1] != ["check"]:
        return None
    args = {"command": "check", "paths": [], "strict": False, "quiet": False, "advice": False, "format": "text"}
    rest, i = argv[1:], 0
    while i < len(rest):
        a = rest[i]
        if a in ("--strict", "--quiet", "--advice"):
            args[a[2:]] = True
        elif a == "--format" and i + 1 < len(rest) and rest[i + 1] in _FORMATS:
            args["format"] = rest[i + 1]
            i += 1
        elif a.startswith("--format=") and a[len("--format="):] in _FORMATS:
            args["format"] = a[len("--format="):]
        elif a == "--":
            args["paths"] += rest[i + 1:]
            break
        elif a.startswith("-") and a != "-":
            return None
        else:
            args["paths"].append(a)
        i += 1
    from types import SimpleNamespace  # lazy: only a plain check gets here

    return SimpleNamespace(**args)


def cmd_compile(args) -> int:
    compiled, build_dir, kept = _write_build(args)
    _report_build(compiled, build_dir, kept, args)
    return 0


def _write_build(args):
    """Compile args.recipe and write its build directory (under args.out): (the compiled recipe, the build
    directory as the scripts name it, the build directory's warnings)."""
    from moeforge.compiler import driver  # lazy: compile only
    from moeforge.compiler.targets import emit  # lazy: compile only (jinja2)

    compiled = driver.compile(args.recipe, args.overrides, strict=args.strict)
    # through a symlinked build directory to where it points: the scripts name that place (build_dir)
    out = (Path(args.out or project.build()) / compiled.composed.recipe_id).resolve()
    build_dir = _relative(out)
    try:
        kept = emit.write_atomically(out, emit.render(compiled.plan, compiled.composed.data, build_dir))
    except OSError as exc:
        raise CompileError([error("E_IO", f"cannot write the build to {out}: {exc.strerror or exc}",
                                  help="choose a writable --out directory")]) from None
    return compiled, build_dir, kept


def _report_build(compiled, build_dir: str, kept: list, args) -> None:
    """What compile prints: the warnings (and advice) shown, with those of the build directory (kept: a run's
    results both kept), then a one-line summary of the build."""
    printed = shown(compiled.diagnostics + kept, args.quiet, args.advice)
    if printed:
        print(render_all(printed, args.format))
    if args.format == "text":
        lay = compiled.plan["layout"]
        tc = compiled.plan["transformer_config"]
        print(f"compiled {compiled.composed.recipe_id} -> {build_dir}/  "
              f"({lay['world_size']} ranks: TP{lay['tp']} PP{lay['pp']} EP{lay['ep']} DP{lay['dp']}; "
              f"dispatcher {tc.get('moe_token_dispatcher_type')}; EP overlap "
              f"{'on' if tc.get('overlap_moe_expert_parallel_comm') else 'off'}; delayed wgrad "
              f"{'on' if tc.get('delay_wgrad_compute') else 'off'})")


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(project.root().resolve()))
    except ValueError:
        return str(path.resolve())


def cmd_explain(args) -> int:
    from moeforge.compiler import driver  # lazy: explain only
    from moeforge.compiler.estimate import summary  # lazy: as above
    from moeforge.compiler.estimate.calibration import CalibrationError  # lazy: as above
    from moeforge.compiler.targets.explain import explain  # lazy: as above

    fmt = "json" if args.format == "json" else "text"
    compiled = driver.compile(args.recipe, args.overrides, strict=args.strict)
    try:  # the planner's estimate, with the calibration beside the platform (or the one chosen; "none": none)
        estimated = summary.of_plan(compiled.plan, args.calibration, compiled.composed.files.get("platform"))
    except CalibrationError as exc:
        print(f"moeforge explain: error: {exc}", file=sys.stderr)
        return 1
    out = explain(compiled.resolved, fmt, args.changed, estimated)
    print(out if fmt == "json" else "\n".join(printable(line) for line in out.split("\n")))  # values are documents'
    return 0


def cmd_check(args) -> int:
    from moeforge.compiler.commands.check import check_paths  # lazy: check's own modules load when it runs

    return check_paths(args.paths or [str(project.recipes())], args.strict, args.format, args.quiet, args.advice)


def cmd_rules(args) -> int:
    import fnmatch  # lazy: rules only
    import json  # lazy: as above

    from moeforge.compiler.rules import CATALOGUE, PREFERENCES  # lazy: as above

    rules, prefs = list(CATALOGUE), list(PREFERENCES)
    ids = getattr(args, "ids", None) or []
    if ids:
        known = [x.id for x in rules + prefs]
        missing = [i for i in ids if not any(fnmatch.fnmatchcase(k.upper(), i.upper()) for k in known)]
        if missing:
            import difflib  # lazy: only an unknown rule id needs it

            for i in missing:
                near = difflib.get_close_matches(i.upper(), known, n=3)
                print(f"moeforge rules: no rule or preference {i!r}" + (f"; did you mean {', '.join(near)}?"
                                                                       if near else ""), file=sys.stderr)
            return 2

        def wanted(x) -> bool:
            return any(fnmatch.fnmatchcase(x.id.upper(), i.upper()) for i in ids)
        rules, prefs = [r for r in rules if wanted(r)], [p for p in prefs if wanted(p)]
    if getattr(args, "format", "text") == "json":
        print(json.dumps({"rules": [{"id": r.id, "severity": r.severity, "silent": dict(r.silent) or None,
                                     "lint_only": r.lint_only, "origin": r.origin, "when": repr(r.when),
                                     "require": repr(r.require), "message": r.message,
                                     "megatron_message": r.megatron_message, "source": r.source, "fix": r.fix,
                                     "versions": [list(v) for v in r.versions], "evidence": r.evidence}
                                    for r in rules],
                          "preferences": [{"id": p.id, "weight": p.weight, "prefer": repr(p.prefer),
                                           "when": repr(p.when), "reason": p.reason} for p in prefs]},
                         indent=2, default=str))
        return 0
    for r in rules:
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
    for p in prefs:
        print(f"{p.id}  [preference, weight {p.weight}]\n    prefer {p.prefer!r} when {p.when!r}\n    {p.reason}")
    return 0


def cmd_migrate(args) -> int:
    from moeforge.compiler.bounded import Unreadable  # lazy: migrate only
    from moeforge.compiler.recipe.load import load_file  # lazy: as above
    from moeforge.compiler.recipe.migrate import migrate_file  # lazy: as above

    diags, stale = [], []
    for name in args.files:
        try:
            load_file(Path(name), name)  # the safe loader first: located errors for bad files
            changed = migrate_file(Path(name), write=not args.check)
        except CompileError as exc:
            diags += exc.diagnostics
            continue
        except (OSError, Unreadable) as exc:  # a full disk, a read-only directory: the file is as it was
            diags.append(error("E_IO", f"cannot rewrite it: {getattr(exc, 'strerror', None) or exc} (the file is "
                               "unchanged)", Position(name)))
            continue
        if args.check:
            if changed:
                stale.append(name)
                print(printable(f"{name}: would be migrated"))
        else:
            print(printable(f"{name}: {'migrated' if changed else 'already current'}"))
    if diags:
        raise CompileError(diags)
    if args.check:
        print(f"{len(stale)} of {len(args.files)} file(s) would change" if stale
              else f"{len(args.files)} file(s) already current")
        return 1 if stale else 0
    return 0


def cmd_diff(args) -> int:
    from moeforge.compiler.commands.diff import diff, render  # lazy: diff only

    rows = diff(args.a, args.b)
    print(render(rows, args.a, args.b, args.format))
    return 1 if rows else 0


def cmd_matrix(args) -> int:
    from moeforge.compiler.commands import matrix  # lazy: matrix only

    rows, plats, table = matrix.build(args.paths or None)
    print(matrix.text(rows, plats, table))
    if args.html:
        from moeforge.compiler.files import write_file_atomically  # lazy: only with --html
        write_file_atomically(Path(args.html), matrix.page(rows, plats, table))
    return 0


def cmd_launch(args) -> int:
    """A build directory runs as it is; a recipe is compiled first (into --out), then run."""
    from moeforge.compiler.commands import launch  # lazy: launch only

    build = Path(args.build)
    if not (build / "plan.json").exists() and not build.is_dir():  # a recipe: compiled into --out first
        import argparse  # lazy: as above

        options = argparse.Namespace(recipe=args.build, overrides=args.overrides, strict=False, format="text",
                                     out=args.out, quiet=False, advice=False)
        compiled, build_dir, kept = _write_build(options)
        if not args.needs_venv312:  # that answer is the only output
            _report_build(compiled, build_dir, kept, options)
        args.build = str(Path(args.out or project.build()) / compiled.composed.recipe_id)
    elif args.overrides:
        print(f"moeforge launch: --set applies to a recipe; {build} is already compiled "
              "(compile it again with the overrides)", file=sys.stderr)
        return 2
    return launch.run(args)


def cmd_init(args) -> int:
    from moeforge.compiler.commands.scaffold import init  # lazy: init only

    root = Path(args.dir).absolute() if args.dir else project.root()
    for name in init(root):
        print(f"wrote {name}")
    print(f"moeforge project at {root}: add platforms with `moeforge new platform NAME`, recipes with "
          "`moeforge new recipe MODEL PLATFORM` (or `extends: builtin:<id>`), then `moeforge check`")
    return 0


def cmd_new(args) -> int:
    from moeforge.compiler.commands.scaffold import new_model, new_platform, new_recipe, new_sweep  # lazy: new only

    root = project.root()
    if args.what == "sweep":
        names = new_sweep(root, args.name, args.recipe)
    elif args.what == "recipe":
        names = new_recipe(root, args.model, args.platform)
    else:
        names = (new_platform if args.what == "platform" else new_model)(root, args.name)
    for name in names:
        print(f"wrote {name}")
    return 0


def cmd_dryrun(args) -> int:
    from moeforge.compiler.commands.runtime import cmd_dryrun as run  # lazy: subprocess (cold check)

    return run(args)


def cmd_import(args) -> int:
    from moeforge.compiler.importer.files import main as import_main  # lazy: import only

    return import_main(args)


def cmd_sweep(args) -> int:
    from moeforge.compiler.commands.sweep import cmd_sweep as run  # lazy: sweep only

    return run(args)


def cmd_results(args) -> int:
    from moeforge.compiler.commands.sweep import cmd_results as run  # lazy: results only

    return run(args)


COMMANDS = {"compile": cmd_compile, "explain": cmd_explain, "check": cmd_check, "rules": cmd_rules,
            "migrate": cmd_migrate, "diff": cmd_diff, "matrix": cmd_matrix, "init": cmd_init, "new": cmd_new,
            "import": cmd_import, "launch": cmd_launch, "dryrun": cmd_dryrun, "sweep": cmd_sweep,
            "results": cmd_results}

if __name__ == "__main__":
    sys.exit(main())
