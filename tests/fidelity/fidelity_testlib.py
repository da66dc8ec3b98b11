"""Fidelity tests: Megatron's own code judges every compiled recipe (see tests/fidelity/*_judge.py).

Why a subprocess: the judges need Python 3.12, megatron-core 0.19.2 (with megatron/training) and
megatron-bridge, which live in .venv312 (`make setup312`), not in the test suite's .venv. Each
judge runs once for all recipes (importing megatron takes seconds) and answers in JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VENV312 = Path(os.environ.get("MOEFORGE_VENV312", ROOT / ".venv312"))  # override: where else it was built
PY312 = VENV312 / "bin" / "python"
READY = (VENV312 / ".installed").exists() and PY312.exists()
SKIP_REASON = (".venv312 is not built (needs Python 3.12: `make setup312`); "
               "Megatron-LM / Megatron-Bridge fidelity not checked")



def lm_differs() -> set[str]:
    """Warnings that Megatron-LM launches something else than the plan (a model its flags cannot state: the
    *_NOT_IN_MEGATRON_LM warnings): a compile that has one is not put to Megatron-LM."""
    from moeforge.compiler.rules import BY_ID

    return {r for r, rule in BY_ID.items() if rule.origin == "megatron-lm" and rule.severity == "warning"
            and not rule.silent}

def catalogue() -> list[str]:
    """Every catalogue recipe id (moeforge.compiler.commands.check.recipe_files on recipes/)."""
    from moeforge.compiler.commands.check import recipe_files

    return [str(p.relative_to(ROOT / "recipes").with_suffix("")) for p in recipe_files([ROOT / "recipes"])]


def platform_mcore(recipe_id: str) -> str:
    """The megatron-core version of the recipe's platform (after composition)."""
    from moeforge.compiler.driver import load

    data = load(ROOT / "recipes" / f"{recipe_id}.yaml").data
    platform = data.get("platform") if isinstance(data.get("platform"), dict) else {}
    return str(platform.get("software", {}).get("megatron_core", ""))


def compile_all(ids: list[str], out: Path, overrides: dict[str, list[str]] | None = None,
                root: Path = ROOT) -> dict[str, Path]:
    """Compile each recipe of the project at ``root`` into out/<id>/ with the compiler's CLI (what users run),
    with the given --set overrides per recipe id."""
    dirs = {}
    for rid in ids:
        sets = [a for o in (overrides or {}).get(rid, []) for a in ("--set", o)]
        subprocess.run([sys.executable, "-m", "moeforge.compiler", "--root", str(root), "compile", rid, "--out", str(out),
                        *sets],
                       cwd=ROOT, check=True, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        dirs[rid] = out / rid
    return dirs


def run_judge(script: str, dirs: list[Path], timeout: int = 900) -> dict[str, dict]:
    """Run a judge in .venv312 once for all build dirs; {recipe id: verdict}."""
    return {v["recipe"]: v for v in run_judge_dirs(script, dirs, timeout).values()}


def run_judge_dirs(script: str, dirs: list[Path], timeout: int = 900) -> dict[str, dict]:
    """Run a judge in .venv312 once for all build dirs; {build dir: verdict} (one recipe may be compiled
    several ways)."""
    proc = subprocess.run([str(PY312), str(HERE / script), "--json", *map(str, dirs)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"})
    try:
        verdicts = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"{script} produced no verdict (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return {v["build_dir"]: v for v in verdicts}


# Real training, judged by both front-ends: the tiny model on Megatron-LM's loop (megatron-core 0.19.2), an
# indexed dataset, the byte tokenizer in a 384-row vocab, checkpoints every 6 of 12 iterations (resumed with
# load: auto, 2 kept), a cosine schedule with warmup, evaluation and per-step logs.
TRAINING_RECIPE = "tiny-moe/cpu"
TRAINING_SETS = ["runtime.entrypoint=megatron-lm", "platform.software.megatron_core=0.19.2",
                 "model.architecture.vocab_size=384", "data.kind=indexed", 'data.paths=["/d/corpus_text_document"]',
                 "data.split=98,1,1", "tokenizer.type=byte", "checkpoint.save=/ck", "checkpoint.interval=6",
                 "checkpoint.keep_last=2", "training.train_iters=12", "schedule.decay=cosine", "schedule.warmup=2",
                 "schedule.min_lr=1e-5", "eval.interval=6", "eval.iters=2", "logging.interval=1"]


def training_case(out: Path) -> Path:
    """Compile TRAINING_RECIPE with TRAINING_SETS into out/<recipe> (the build dir)."""
    return compile_all([TRAINING_RECIPE], out, {TRAINING_RECIPE: TRAINING_SETS})[TRAINING_RECIPE]


# Uneven pipelines no catalogue recipe uses (stage sizes, with VPP too, and accounting), as recorded with
# megatron-core's own layer counts by tests/data/gen_layout_param_counts.py: {name: {"recipe", "sets", ...}}.
UNEVEN = json.loads((ROOT / "tests" / "data" / "layout_param_counts.json").read_text())["variants"]


def uneven_cases(out: Path) -> dict[str, Path]:
    """Compile each UNEVEN variant into out/<i>/<recipe> (the build dirs), by name."""
    return {name: compile_all([v["recipe"]], out / str(i), {v["recipe"]: v["sets"]})[v["recipe"]]
            for i, (name, v) in enumerate(sorted(UNEVEN.items()))}


# Models outside the catalogue, in a user's project (its own recipes/models, the built-in platforms): Mixtral-8x7B
# (GQA, no Megatron-Bridge recipe: Bridge's plain GPT recipe) and DeepSeek-V2-Lite (MLA without a query LoRA:
# an MLA provider's recipe, as bridge.overrides says).
OUTSIDE = HERE / "outside_catalogue"
# two real models and two minimal documents (megatron-core defaults everywhere else; an MLA one built by Bridge
# from DeepSeek-V3's recipe)
OUTSIDE_RECIPES = ["mixtral-8x7b/h100-bf16", "deepseek-v2-lite/h100-bf16", "minimal-moe/h100-bf16",
                   "minimal-mla-moe/h100-bf16"]


def outside_cases(out: Path) -> dict[str, Path]:
    """Compile OUTSIDE_RECIPES of the OUTSIDE project into out/<recipe> (the build dirs), by recipe id."""
    return compile_all(OUTSIDE_RECIPES, out, root=OUTSIDE)


def assert_verdict(v: dict) -> None:
    assert v["accepted"], f"{v['judge']} refuses {v['recipe']}: {v['error']}"
    bad = [d for d in v["diffs"] if not d.get("exception")]
    assert not bad, f"{v['recipe']}: {len(bad)} field(s) differ from the plan:\n" + "\n".join(
        f"  {d['field']}: plan={d['plan']!r} {v['judge']}={d['megatron']!r}"
        + ("" if d.get("stated_in_plan", True) else "  (not stated in plan)") for d in bad)
