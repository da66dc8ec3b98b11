"""`moeforge import SOURCE`: a recipe and a model file from a launch or a Hugging Face config (the run is
compiler/importer/files.py's main)."""
from __future__ import annotations

from moeforge.compiler.importer.files import main


def arguments(c) -> None:
    """import's flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("source", help="the file to import ('-' reads stdin), or a model directory holding config.json")
    c.add_argument("--platform", help="platform name (default: guessed from the GPU the launch names; a Hugging Face "
                                      "config writes a recipe only with it)")
    c.add_argument("--name", help="recipe and model name (default: from the source, with -imported)")
    c.add_argument("--root", help="recipes root to write under: ROOT/imported/NAME.yaml, ROOT/models/NAME.yaml "
                                  "(default: recipes/)")
    c.add_argument("--force", action="store_true", help="overwrite existing files")


def run(args) -> int:
    """Run the import (compiler/importer/files.py), which reports bad sources itself with exit 2."""
    return main(args)
