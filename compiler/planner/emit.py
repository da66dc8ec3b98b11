"""Writing the winner as a recipe: the very document the rules confirmed, plus the estimate in its
description, written atomically (compiler/targets/emit.py: a temporary file in the same directory, then os.replace)."""
from __future__ import annotations

from pathlib import Path

import yaml

from moeforge.compiler import project
from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.planner.search import GIB, Evaluated, PlannerError
from moeforge.compiler.planner.space import Setting

HEADER = ("# Written by `moeforge plan-layout`: the planner's best layout, checked by the rule catalogue.\n"
          "# The estimate in the description comes from compiler/estimate (memory, step time).\n")


def description(ev: Evaluated, s: Setting) -> str:
    """The emitted recipe's description: the layout and its estimate, so the file says why it was chosen."""
    t = ev.time
    cap = f" of {s.capacity_gb:g}" if s.capacity_gb else ""
    return (f"{s.model} on {s.gpus} x {s.platform}, planned by moeforge plan-layout: {ev.cand.describe()}, "
            f"{ev.cand.dispatcher_text()}, overlap {ev.cand.overlap_text()}, recompute {ev.cand.recompute_text()}. "
            f"Estimate: {ev.mem.total / GIB:.1f} GB{cap} per rank, {t.total_s:.2f} s/step, "
            f"{t.tokens_per_s_per_gpu:.0f} tokens/s/GPU, MFU {t.mfu:.1%}, dominant cost {t.dominant}.")


def recipe_text(ev: Evaluated, s: Setting) -> str:
    """The winner as recipe YAML: the very document the rules confirmed, under the generated-file header."""
    doc = ev.cand.recipe(s, description(ev, s))
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=110)


def may_replace(path: str | Path, force: bool) -> None:
    """Refuse, before the search, to replace a file plan-layout did not write (a user's recipe would be lost);
    an earlier plan is replaced, as re-planning into one file is the habit."""
    path = Path(path)
    if path.is_dir():
        raise PlannerError(f"--emit {path}: is a directory: give a file name (e.g. {path / 'planned.yaml'})")
    if path.exists() and not path.is_file():  # a device or a FIFO (reading one could block): not a recipe
        raise PlannerError(f"--emit {path}: is not a regular file: give a file name (under recipes/ to compile it)")
    if force or not path.exists():
        return
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            ours = f.readline() == HEADER.splitlines(keepends=True)[0]
    except OSError:
        ours = False
    if not ours:
        raise PlannerError(f"--emit {path}: the file exists and plan-layout did not write it: choose another path, "
                           "or pass --force to replace it")


def write(path: str | Path, text: str) -> Path:
    """Write --emit's file atomically; an unwritable path is a PlannerError naming it, not a traceback."""
    path = Path(path)
    try:
        write_file_atomically(path, text)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename and Path(exc.filename) != path else ""
        raise PlannerError(f"--emit {path}: cannot write it ({where}{exc.strerror or exc}): choose a writable "
                           "path, under recipes/ to compile it") from None
    return path


def next_step(path: Path) -> str:
    """How to compile the written recipe: compile reads recipes only from the project's recipes/."""
    recipes = project.recipes().resolve()
    if path.resolve().is_relative_to(recipes):
        return f"compile it: moeforge compile {path}"
    return f"it lies outside {recipes}: move it there to compile it (moeforge compile recipes/NAME.yaml)"
