"""`moeforge new platform|model|recipe|sweep`: a document with every key commented (compiler/commands/scaffold.py)."""
from __future__ import annotations

from moeforge.compiler import project
from moeforge.compiler.commands.scaffold import new_model, new_platform, new_recipe, new_sweep
from moeforge.compiler.diagnostics import printable


def arguments(c) -> None:
    """new's subcommands (platform, model, recipe, sweep) and their names on its subparser."""
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


def run(args) -> int:
    """Write the new document (refusing to overwrite one) and print its path."""
    root = project.root()
    if args.what == "sweep":
        names = new_sweep(root, args.name, args.recipe)
    elif args.what == "recipe":
        names = new_recipe(root, args.model, args.platform)
    else:
        names = (new_platform if args.what == "platform" else new_model)(root, args.name)
    for name in names:
        print(printable(f"wrote {name}"))
    return 0
