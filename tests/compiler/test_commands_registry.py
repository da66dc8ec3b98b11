"""Issue 45: every command is one module of compiler/commands/ registered in commands.COMMANDS; cli.py only
parses the command line and dispatches."""
import ast
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from moeforge.compiler import commands
from moeforge.compiler.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", commands.NAMES)
def test_each_registered_command_is_a_module_with_its_arguments_and_its_run(name):
    module = commands.load(name)
    assert (callable(getattr(module, "arguments", None)) and callable(getattr(module, "run", None))) or \
        (callable(getattr(module, "forward", None)) and isinstance(getattr(module, "REST", None), str)), name
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([name, "--help"])
    assert rc == 0 and out.getvalue().startswith(f"usage: moeforge {name}"), (name, err.getvalue())


def test_the_top_help_lists_every_registered_command_once():
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--help"]) == 0
    listed = out.getvalue().split("\n")[1]
    assert all(listed.count(name) >= 1 for name in commands.NAMES)
    assert len(set(commands.NAMES)) == len(commands.NAMES)


def test_cli_holds_no_command():
    source = (ROOT / "compiler" / "cli.py").read_text()
    assert len(source.splitlines()) < 200
    defined = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
    assert defined <= {"main", "_main", "_dispatch", "parser", "in_main_thread"}, defined
    assert "add_subparsers" in source and source.count("add_argument(") == 3  # --version, --root, a forwarded rest


def test_every_module_of_commands_is_registered_or_a_helper():
    modules = {p.stem for p in (ROOT / "compiler" / "commands").glob("*.py")} - {"__init__"}
    registered = {m for _, m, _ in commands.COMMANDS}
    helpers = {"options", "runtime", "scaffold", "dryrun_report"}  # shared by commands, not commands themselves
    assert modules - registered == helpers
