"""`moeforge`: the command line's entry point, its global options (--root, --version) and its exit codes.

The commands (compile, check, explain, rules, lint-config, plan-layout, calibrate, diagnose, diff, matrix,
migrate, launch, dryrun, init, new, import, data prepare, sweep check|launch, results) are modules of
compiler/commands/, registered in its COMMANDS; this module only parses the command line and dispatches.

The project root (recipes/, build/) is found from the current directory upward (a moeforge.toml
or a recipes/ folder, compiler/project.py); the global option `--root DIR` names it.

Exit codes: 0 clean, 1 the input has errors (diagnostics printed), 2 usage or internal
error. No command ever shows a traceback for bad input.
"""
from __future__ import annotations

import sys
from pathlib import Path

from moeforge.compiler import __version__, commands, project
from moeforge.compiler.diagnostics import CompileError, printable, render_all

# A command's module loads only when it runs (commands.load), so that a cold `moeforge check` loads the
# check's modules only (tests/compiler/test_cold_start.py lists what it must not import).

ALL = "*"  # parser(ALL): every command's arguments (the help test walks them)


def in_main_thread() -> bool:
    """True in a real CLI run (threading is imported only when something already did)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.current_thread() is threading.main_thread()


def parser(only: str | None = ALL):
    """The argument parser; `only`: just that command's arguments (a run parses one command, and loading every
    command's module costs a cold start more than the check itself); None: the commands' names alone."""
    import argparse  # lazy: a plain check is read without it (commands/check.py fast_args)

    p = argparse.ArgumentParser(prog="moeforge", description="Compile MoE training recipes into Megatron launches.")
    p.add_argument("--version", action="version", version=f"moeforge {__version__}")
    p.add_argument("--root", metavar="DIR", help="the project root (default: the nearest directory, from here "
                                                  "upward, with a moeforge.toml or a recipes/ folder)")
    sub = p.add_subparsers(dest="command", required=True)
    for name, _, help_ in commands.COMMANDS:
        if only not in (None, ALL, name):  # a run parses one command: the others are not offered
            continue
        c = sub.add_parser(name, help=help_)
        if only is not None:
            module = commands.load(name)
            c.description = getattr(module, "DESCRIPTION", None)
            if hasattr(module, "forward"):  # its options are its own: what follows its name is handed on
                c.add_argument("rest", nargs=argparse.REMAINDER, help=module.REST)
            else:
                module.arguments(c)
    return p


def main(argv: list[str] | None = None) -> int:
    """Dispatch argv to a command after the global --root; returns the exit code (0 ok, 1 found problems, 2 bad use)."""
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
        print(printable(f"moeforge: --root {root}: not a directory"), file=sys.stderr)
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
    module = commands.load(argv[0]) if argv[:1] and argv[0] in commands.NAMES else None
    if hasattr(module, "forward"):  # its options (and --help) are its own
        return module.forward(argv[1:])
    args = module.fast_args(argv[1:]) if hasattr(module, "fast_args") else None
    if args is None:
        command = next((a for a in argv if not a.startswith("-")), None)
        try:
            args = parser(command if command in commands.NAMES else None).parse_args(argv)
        except SystemExit as exc:
            return 0 if exc.code == 0 else 2
        module = commands.load(args.command)
    try:
        return module.forward(args.rest) if hasattr(module, "forward") else module.run(args)
    except CompileError as exc:
        print(render_all(exc.diagnostics, getattr(args, "format", "text")))
        return 1


if __name__ == "__main__":
    sys.exit(main())
