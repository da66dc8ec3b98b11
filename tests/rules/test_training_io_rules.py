"""The training-I/O rules (compiler/rules/training_io.py) inside the recipe compiler: for each rule, a
recipe that breaks it is refused (or warned about) with the rule's id at the offending line, and the fix
the rule names clears it.

Recipes extend the shipped tiny-moe/cpu (megatron-core 0.16.1, CPU) or qwen3-30b-a3b/h100-bf16 (a GPU
platform on 0.19.2) in a copy of recipes/, with the sections as a recipe author writes them.
"""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.rules import BY_ID

ROOT = Path(__file__).resolve().parents[2]
TINY, GPU = "tiny-moe/cpu", "qwen3-30b-a3b/h100-bf16"
# moeforge.runtime.megatron (Megatron-LM's pretrain) on the tiny model: needs megatron-core >= 0.17
MLM = """\
runtime: {entrypoint: megatron-lm}
"""
MLM_SETS = ("platform.software.megatron_core=0.19.2",)
SAVE = "checkpoint: {save: /ckpt, interval: 5}\n"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    out = tmp_path_factory.mktemp("recipes") / "recipes"
    shutil.copytree(ROOT / "recipes", out)
    (out / "t").mkdir()
    return out


def outcome(root: Path, base: str, body: str, sets=()):
    """(error codes, warning codes, diagnostics) of a recipe extending `base` with `body`."""
    name = f"t/r{abs(hash((base, body, sets)))}"
    text = f"schema: moeforge/recipe/v3\nrevision: 1\nextends: {base}\nname: t\n" + textwrap.dedent(body)
    (root / f"{name}.yaml").write_text(text)
    try:
        r = resolve(load(name, list(sets), root))
    except CompileError as exc:
        return {d.code for d in exc.diagnostics if d.is_error}, set(), exc.diagnostics
    return set(), {d.code for d in r.diagnostics}, r.diagnostics


# rule id -> (base recipe, --set overrides, recipe body that breaks it, body with the rule's fix)
CASES = {
    "RUNTIME_MEGATRON_LM_NEEDS_MCORE_0_17": (TINY, (), MLM, "runtime: {entrypoint: moeforge}\n"),
    "DATA_KIND_NEEDS_MEGATRON_LM": (TINY, (), "data: {kind: mock}\n", "data: {kind: synthetic}\n"),
    "DATA_KIND_NEEDS_MOEFORGE_RUNTIME": (TINY, MLM_SETS, MLM + "data: {kind: learnable}\n", MLM + "data: {kind: mock}\n"),
    "DATA_INDEXED_NEEDS_PATHS": (TINY, MLM_SETS, MLM + "data: {kind: indexed}\n",
                                 MLM + "data: {kind: indexed, paths: [/data/corpus_text_document]}\n"),
    "DATA_PATHS_OR_BLEND": (TINY, MLM_SETS,
                            MLM + "data: {kind: indexed, paths: [/d/a], blend: [{weight: 1, path: /d/b}]}\n",
                            MLM + "data: {kind: indexed, blend: [{weight: 1, path: /d/b}]}\n"),
    "DATA_PATHS_NEED_INDEXED": (TINY, MLM_SETS, MLM + "data: {paths: [/d/a]}\n",
                                MLM + "data: {kind: indexed, paths: [/d/a]}\n"),
    "DATA_BLEND_WEIGHTS_POSITIVE": (
        TINY, MLM_SETS, MLM + "data: {kind: indexed, blend: [{weight: 0, path: /d/a}, {weight: 1, path: /d/b}]}\n",
        MLM + "data: {kind: indexed, blend: [{weight: 0.2, path: /d/a}, {weight: 1, path: /d/b}]}\n"),
    "PATH_ENV_VARS_RESOLVED_AT_LAUNCH": (TINY, MLM_SETS, MLM + "data: {kind: indexed, paths: ['${DATA_ROOT}/a']}\n",
                                         MLM + "data: {kind: indexed, paths: [/data/a]}\n"),
    "TOKENIZER_NEEDS_PATH": (TINY, (), "tokenizer: {type: huggingface}\n",
                             "tokenizer: {type: huggingface, path: /models/tokenizer}\n"),
    "TOKENIZER_VOCAB_FITS_MODEL": (TINY, (), "tokenizer: {type: byte}\n", "tokenizer: {type: byte}\n"),
    "CHECKPOINT_INTERVAL_NEEDS_SAVE": (TINY, MLM_SETS, MLM + "checkpoint: {interval: 5}\n", MLM + SAVE),
    "CHECKPOINT_SAVE_NEEDS_INTERVAL": (TINY, MLM_SETS, MLM + "checkpoint: {save: /ckpt}\n", MLM + SAVE),
    "CHECKPOINT_LOAD_AUTO_NEEDS_SAVE": (TINY, MLM_SETS, MLM + "checkpoint: {load: auto}\n",
                                        MLM + "checkpoint: {load: none}\n"),
    "CHECKPOINT_ASYNC_NEEDS_SAVE": (GPU, (), MLM + "data: {kind: mock}\ncheckpoint: {async: true}\n",
                                    MLM + "data: {kind: mock}\ncheckpoint: {async: true, save: /ckpt, interval: 5}\n"),
    "CHECKPOINT_ASYNC_NEEDS_GPU": (TINY, MLM_SETS, MLM + "checkpoint: {save: /ckpt, interval: 5, async: true}\n",
                                   MLM + SAVE),
    "HARNESS_IGNORES_TRAINING_IO": (TINY, (), "logging: {tensorboard: /tb}\n", "logging: {interval: 1}\n"),
    "SCHEDULE_WARMUP_BEFORE_DECAY_END": (TINY, (), "schedule: {warmup: 4}\n", "schedule: {warmup: 0.25}\n"),
    "SCHEDULE_WSD_NEEDS_DECAY_ITERS": (TINY, (), "schedule: {decay: wsd}\n", "schedule: {decay: wsd, wsd_decay_iters: 2}\n"),
    "SCHEDULE_MIN_LR_AT_MOST_LR": (TINY, (), "schedule: {min_lr: 0.01}\n", "schedule: {min_lr: 0.0001}\n"),
    "EVAL_INTERVAL_NEEDS_ITERS": (TINY, MLM_SETS, MLM + "eval: {interval: 2}\n", MLM + "eval: {interval: 2, iters: 1}\n"),
}
# the fix of TOKENIZER_VOCAB_FITS_MODEL is in the model: a vocabulary the byte ids fit
FIX_SETS = {"TOKENIZER_VOCAB_FITS_MODEL": ("model.architecture.vocab_size=384",),
            "RUNTIME_MEGATRON_LM_NEEDS_MCORE_0_17": ()}
# checkpoint.format has one value for now (torch_dist): a recipe cannot break the rule, lint-config can
RECIPE_CANNOT_BREAK = {"CHECKPOINT_ASYNC_NEEDS_TORCH_DIST"}


def test_every_training_io_rule_has_a_recipe_case():
    from moeforge.compiler.rules import training_io

    assert set(CASES) | RECIPE_CANNOT_BREAK == {r.id for r in training_io.RULES}


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_recipe_breaks_the_rule_and_its_fix_clears_it(root, rule_id):
    base, sets, bad, good = CASES[rule_id]
    errors, warnings, diags = outcome(root, base, bad, sets)
    severity = BY_ID[rule_id].severity
    fired = {part for code in (errors if severity == "error" else warnings) for part in code.split("+")}
    assert rule_id in fired, f"{rule_id} did not fire: {[d.render() for d in diags]}"
    d = next(d for d in diags if rule_id in d.code.split("+"))
    # located at the recipe's line; the entry-point rule at the platform's megatron_core (what to change)
    where = ("recipes/platforms/",) if rule_id == "RUNTIME_MEGATRON_LM_NEEDS_MCORE_0_17" else ("recipes/t/", "--set")
    assert d.pos is not None and d.pos.file.startswith(where), d.render()
    errors, warnings, diags = outcome(root, base, good, FIX_SETS.get(rule_id, sets))
    assert not errors, f"the fix of {rule_id} leaves errors: {[d.render() for d in diags]}"
    assert rule_id not in warnings


def test_the_env_var_warning_names_the_variables(root):
    body = MLM + "data: {kind: indexed, paths: ['${DATA_ROOT}/a', '${DATA_ROOT}/b'], cache_dir: '${SCRATCH}/c'}\n"
    _, _, diags = outcome(root, TINY, body, MLM_SETS)
    [d] = [d for d in diags if d.code == "PATH_ENV_VARS_RESOLVED_AT_LAUNCH"]
    assert d.severity == "warning" and "DATA_ROOT, SCRATCH" in d.message and "{" not in d.message


def test_the_harness_default_and_the_megatron_lm_default_data_kind(root):
    """data.kind follows the entry point when unset: synthetic for moeforge.runtime.train, mock for Megatron-LM."""
    assert outcome(root, TINY, "description: the harness\n")[0] == set()
    assert outcome(root, TINY, MLM, MLM_SETS)[0] == set()
    r = resolve(load(TINY, ["runtime.entrypoint=megatron-lm", *MLM_SETS], ROOT / "recipes"))
    assert r.env["data_kind"] == "mock" and r.decisions["data_kind"].source == "default"
    assert resolve(load(TINY, (), ROOT / "recipes")).env["data_kind"] == "synthetic"
