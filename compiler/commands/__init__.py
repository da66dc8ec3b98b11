"""The CLI's commands, one module each, and the one registry (COMMANDS) that compiler/cli.py reads.

Adding a command is one module here and one line in COMMANDS. A module is one of two kinds:
- parsed by moeforge (most): `arguments(parser)` adds its arguments to its subparser (prog "moeforge NAME";
  an optional DESCRIPTION is the parser's description), `run(args) -> int` runs it; a CompileError it raises is
  printed as located diagnostics, exit 1. `fast_args(argv)` (optional) reads a common command line without
  argparse (a cold `check`), None for anything else.
- with options of its own: `REST` (the help of the arguments it is handed) and `forward(argv) -> int`, which
  gets everything after the command's name, --help included, and parses it with its own parser.

May import anything in compiler/ below it (compiler.LAYERS), never moeforge.compiler.cli. Command modules load
only when their command runs (a cold check loads check.py alone).
"""
from __future__ import annotations

from importlib import import_module

# (the command's name, its module in this package, the line `moeforge --help` shows), in --help's order
COMMANDS = (
    ("compile", "compile", "check, solve and emit build/<recipe>/"),
    ("explain", "explain", "print every decision and why"),
    ("check", "check", "validate and solve every recipe under PATHS (default: recipes/); "
                       "a file in recipes/platforms/ or recipes/models/ is checked against its schema"),
    ("rules", "rules", "print the rule catalogue (all, or the rules and preferences named)"),
    ("hazards", "hazards", "the field hazards a recipe meets (NaN, hang, crash, wrong result) by software "
                           "version, or the whole catalogue"),
    ("lint-config", "lint_config", "check a flat Megatron config (YAML/JSON); see moeforge lint-config --help"),
    ("plan-layout", "plan_layout", "rank the layouts for MODEL on N GPUs of a platform; see "
                                   "moeforge plan-layout --help"),
    ("calibrate", "calibrate", "fit a platform's constants to measured runs (report.json, sweeps, "
                               "Megatron-LM logs); see moeforge calibrate --help"),
    ("diagnose", "diagnose", "name a run's dominant wall (memory, communication, host, compute) and "
                             "the fixes that compile; see moeforge diagnose --help"),
    ("diff", "diff", "what differs between two recipes or two plans, with provenance "
                     "(exit 1 when they differ, as diff(1) does)"),
    ("matrix", "matrix", "recipes x platforms: status, dispatcher, overlap"),
    ("migrate", "migrate", "rewrite documents to the current schema version, comments kept"),
    ("launch", "launch", "compile a recipe (or take a build) and run it: local, slurm, or print"),
    ("dryrun", "dryrun", "build one rank's shard of a plan on the meta device (runtime environment)"),
    ("init", "init", "make this directory a moeforge project: moeforge.toml, recipes/, "
                     "a pre-commit config and a GitHub workflow (never overwrites)"),
    ("new", "new", "scaffold a document with every key commented, from the schemas"),
    ("sweep", "sweep", "variants of one recipe: check every point, launch them as one job array"),
    ("results", "results", "a sweep's results: table, CSV, JSON, plots (schemas/results.v1.json)"),
    ("import", "import_", "a recipe and a model file from a Megatron-LM launch script, command line, "
                          "args file, functional-test model_config.yaml or Bridge override list; a model "
                          "file (and with --platform a recipe) from a Hugging Face config.json"),
    ("data", "data", "training data tools (run in the runtime environment: make setup)"),
)

NAMES = tuple(name for name, _, _ in COMMANDS)


def load(name: str):
    """The module of command `name` (imported now: each command's modules load only when it runs)."""
    module = next(m for n, m, _ in COMMANDS if n == name)
    return import_module(f"{__name__}.{module}")
