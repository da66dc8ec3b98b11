"""Options several commands share (a recipe and its overrides, what is printed), spelled once."""
from __future__ import annotations


def recipe_arguments(c) -> None:
    """The recipe, --set, --strict and --format flags, spelled once for every command that compiles a recipe."""
    c.add_argument("recipe", help="recipe id (tiny-moe/cpu), path under recipes/, or builtin:ID")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe value, e.g. --set parallelism.ep=8 (repeatable)")
    c.add_argument("--strict", action="store_true", help="silent Megatron behaviour is an error")
    c.add_argument("--format", choices=("text", "json", "github"), default="text",
                   help="output: text (default), json, or github (workflow annotations)")


def output_arguments(c) -> None:
    """The --quiet and --advice flags, spelled once for every command that prints diagnostics."""
    c.add_argument("--quiet", action="store_true", help="print errors only")
    c.add_argument("--advice", action="store_true", help="also print advice (tuning guidance; off by default)")
