"""Bugs the fuzz / property suite found, one minimal reproducer each (regression tests).

Every bug here was found by tests/fuzz and fixed in compiler/ while the suite was written; the
reproducers stay as plain regression tests (BUG-9 lives in test_fuzz_build.py, BUG-13 .. BUG-16
in tests/hostile). For a new bug: add its reproducer here marked `xfail(strict=True, raises=...)`
with the next number, and a narrow recogniser in fuzzlib.known_bug so that the property tests do
not stop at it again and again; when it is fixed, strict xfail fails: remove both.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import fuzzlib
from moeforge.compiler.diagnostics import CompileError

TINY = fuzzlib.RECIPE_TEXT["tiny-moe/cpu"]


@pytest.fixture
def root(tmp_path) -> Path:
    """A private copy of recipes/ that a test may edit."""
    root = tmp_path / "recipes"
    shutil.copytree(fuzzlib.RECIPES, root)
    return root


def resolve_in(root: Path, rid: str, overrides=()):
    from moeforge.compiler.driver import load, resolve

    return resolve(load(rid, list(overrides), root))


def compile_outcome(root: Path, rid: str, overrides, out: Path):
    return fuzzlib.isolated(fuzzlib.compile_in, str(root), rid, list(overrides), str(out), timeout=60)


def located_compile_error(outcome) -> list[dict]:
    assert outcome.status == "compile_error", f"{outcome.status}: {outcome.error}\n{outcome.traceback}"
    fuzzlib.diagnostics_are_located(outcome.diagnostics)
    return outcome.diagnostics


def cli(argv):
    outcome = fuzzlib.isolated(fuzzlib.cli, list(argv), timeout=60)
    return outcome, fuzzlib.cli_is_clean(outcome)


# ----------------------------------------------------------------------------- BUG-1

def test_bug1_unicode_digit_in_platform_version(root, tmp_path):
    """platform software.torch: "2.1²" passes the schema (a plain string) and crashes the solver:
    ValueError: invalid literal for int() with base 10: '1²' (compiler/rules/expr.py version_int).
    Expected: a located diagnostic (E_SCHEMA at platforms/cpu.yaml, software.torch)."""
    cpu = root / "platforms" / "cpu.yaml"
    cpu.write_text(cpu.read_text().replace('torch: "2.13.0"', 'torch: "2.1²"'))
    located_compile_error(compile_outcome(root, "tiny-moe/cpu", [], tmp_path / "build"))


def test_bug1_unicode_digit_in_schema_version(root, tmp_path):
    """schema: moeforge/recipe/v² -> ValueError in compiler/recipe/migrate.py declared_version (internal
    error). Expected: E_SCHEMA_VERSION at line 1."""
    (root / "tiny-moe" / "sup.yaml").write_text(TINY.replace("moeforge/recipe/v3", "moeforge/recipe/v²"))
    located_compile_error(compile_outcome(root, "tiny-moe/sup", [], tmp_path / "build"))


# ----------------------------------------------------------------------------- BUG-2

def test_bug2_platform_name_with_a_path_is_an_internal_error(root, tmp_path):
    """--set platform=../models/tiny-moe loads recipes/models/tiny-moe.yaml *as the platform* (it
    resolves inside recipes/, and is validated as a model because it sits in models/). With the
    layout made consistent the compile crashes in emit: TypeError: 'NoneType' object is not
    subscriptable (plan["platform"]["software"] is None). Expected: E_SCHEMA / E_UNKNOWN_PLATFORM
    at `--set platform=../models/tiny-moe`: a platform is a name under recipes/platforms/."""
    sets = ["platform=../models/tiny-moe", "training.global_batch_size=16", "moe.overlap.ep_comm=false"]
    [d] = located_compile_error(compile_outcome(root, "tiny-moe/cpu", sets, tmp_path / "build"))
    assert d["pos"]["file"] == "--set platform=../models/tiny-moe"


def test_bug2_recipe_used_as_platform(root):
    """`platform: ../tiny-moe/cpu` passes: the schema pattern of `platform` is checked against the
    referenced document's own name, not against the reference. Expected: an error at line 8."""
    (root / "tiny-moe" / "p.yaml").write_text(TINY.replace("platform: cpu", "platform: ../tiny-moe/cpu"))
    with pytest.raises(CompileError) as err:
        resolve_in(root, "tiny-moe/p", ["training.global_batch_size=16", "moe.overlap.ep_comm=false"])
    assert any(d.pos and d.pos.line == 8 for d in err.value.diagnostics), err.value


# ----------------------------------------------------------------------------- BUG-4

def test_bug4_model_override_with_wrong_type(root, tmp_path):
    """--set model.architecture.num_layers=abc: load() validates each document and the merged
    recipe part, but not the merged platform/model parts, so the string reaches the rules:
    TypeError: not all arguments converted during string formatting ('abc' % pp in
    compiler/rules/expr.py evaluate). Expected: E_SCHEMA at `--set model.architecture.num_layers=abc`."""
    located_compile_error(compile_outcome(root, "tiny-moe/cpu", ["model.architecture.num_layers=abc"],
                                          tmp_path / "build"))


def test_bug4_platform_override_is_not_validated(root, tmp_path):
    """--set platform.device=tpu compiles, and the plan says device "tpu" (the schema allows cpu
    and cuda). Expected: E_SCHEMA at `--set platform.device=tpu`."""
    located_compile_error(compile_outcome(root, "tiny-moe/cpu", ["platform.device=tpu"], tmp_path / "build"))


# ----------------------------------------------------------------------------- BUG-5, 6, 7, 11: CLI

@pytest.mark.parametrize("content", ['{"a": 1}\n', "garbage\n", None], ids=["not-a-plan", "not-json", "empty-dir"])
def test_bug5_diff_on_something_that_is_not_a_plan(tmp_path, content):
    """moeforge diff X.json tiny-moe/cpu: KeyError 'decisions' / JSONDecodeError /
    FileNotFoundError (a directory without plan.json) -> 'moeforge: internal error'. Expected: a
    located error (exit 1) or a usage error (exit 2) that names the file."""
    if content is None:
        target = tmp_path / "empty"
        target.mkdir()
    else:
        target = tmp_path / "x.json"
        target.write_text(content)
    cli(["diff", str(target), "tiny-moe/cpu"])


@pytest.mark.parametrize("content", [b"a: [\n", b"schema: moeforge/recipe/v1\nx: \xff\n", None],
                         ids=["bad-yaml", "not-utf8", "missing"])
def test_bug6_migrate_on_bad_files(tmp_path, content):
    """moeforge migrate F: ruamel's ParserError, UnicodeDecodeError or FileNotFoundError escape
    as 'moeforge: internal error'. Expected: F:line:col: error[E_YAML_SYNTAX/E_YAML_ENCODING/E_IO]."""
    path = tmp_path / "r.yaml"
    if content is not None:
        path.write_bytes(content)
    cli(["migrate", str(path)])


def test_bug7_compile_out_below_a_file(tmp_path):
    """moeforge compile tiny-moe/cpu --out FILE/x -> 'internal error: NotADirectoryError'.
    Expected: a plain 'cannot write ...' error (exit 1 or 2), as for any other unwritable path."""
    (tmp_path / "file").write_text("")
    cli(["compile", "tiny-moe/cpu", "--out", str(tmp_path / "file" / "x")])


def test_bug11_matrix_outside_recipes(tmp_path):
    """moeforge matrix /tmp/x.yaml -> 'internal error: ValueError: ... is not in the subpath of
    .../recipes' (compiler/commands/matrix.py build: relative_to). Expected: E_PATH_ESCAPE or E_RECIPE_NOT_FOUND
    (exit 1), like check."""
    cli(["matrix", str(tmp_path / "x.yaml")])


# ----------------------------------------------------------------------------- BUG-8: solver time

def test_bug8_solver_terminates_on_large_prime_node_count(root):
    """tiny-moe/cpu --set resources.nodes=65537 (GBS 8 cannot be divided): the explanation
    (_explain -> _violation -> _fix: z3.Optimize over nonlinear integer divisibility, no timeout)
    does not finish in minutes. Realistic too: qwen3-235b-a22b/gb200-nvl72-bf16-x256 with
    --set parallelism.ep=1 took 33 s here. Expected: a diagnostic within seconds (a z3 timeout /
    resource limit per query, fixes omitted when unknown)."""
    outcome = fuzzlib.run(fuzzlib.load_only, str(root), "tiny-moe/cpu", ["resources.nodes=65537"], timeout=10)
    assert outcome is not None, "still running after 10 s"
    located_compile_error(outcome)


# ----------------------------------------------------------------------------- BUG-12: NaN

@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_bug12_non_finite_learning_rate(root, tmp_path, value):
    """--set training.lr=.nan compiles: NaN > 0 is False, so jsonschema's exclusiveMinimum check
    (instance <= 0) passes it; plan.json then holds `"lr": NaN` (not JSON: strict parsers and
    jq reject the file) and megatron-lm.args `--lr nan`. Expected: E_SCHEMA at
    `--set training.lr=.nan` (the same for every number in recipes, platforms and models)."""
    outcome = compile_outcome(root, "tiny-moe/cpu", [f"training.lr={value}"], tmp_path / "build")
    if outcome.status == "ok":
        fuzzlib.strict_json(outcome.value["files"]["plan.json"])
    located_compile_error(outcome)


# ----------------------------------------------------------------------------- BUG-17: no location

def test_bug17_conflict_with_an_unset_default_is_located(root, tmp_path):
    """EP overlap and delayed wgrad pinned on, parallelism.ep left out (Megatron's default, 1):
    the solver reports `error[EP_OVERLAP_NEEDS_EP]` with pos None and a single note,
    `parallelism.ep = 1` (no position: it is a default). The pins that take part,
    moe.overlap.ep_comm (line 11) and moe.overlap.delay_wgrad, are neither the anchor nor in the
    notes, because _pin_core keeps only parallelism.ep (relaxing ep_comm alone does not help while
    delay_wgrad=true needs it). (Found by mutating qwen3-235b-a22b/h100-bf16: delete parallelism.ep.)
    Expected: located at a pin of the recipe (ep_comm's line, or the file when only defaults
    remain), listing the pinned values involved."""
    (root / "tiny-moe" / "noep.yaml").write_text(
        "schema: moeforge/recipe/v2\nrevision: 1\nname: t\nplatform: h100\nmodel: qwen3-30b-a3b\n"
        "resources: {nodes: 1}\nparallelism: {tp: 1, pp: 1, cp: 1}\nprecision: {dtype: bf16}\n"
        "moe:\n  dispatcher: alltoall\n  overlap: {ep_comm: true, delay_wgrad: true}\n"
        "training: {micro_batch_size: 1, global_batch_size: 64, seq_length: 4096}\n")
    [d] = located_compile_error(compile_outcome(root, "tiny-moe/noep", [], tmp_path / "build"))
    assert d["pos"]["file"] == "recipes/tiny-moe/noep.yaml"


def test_bug17_layer_divisibility_after_a_model_swap_is_located(root, tmp_path):
    """moeforge explain qwen3-next-80b-a3b/gb200-nvl72-bf16 --set model=deepseek-v3 (61 layers on
    PP 2): `error[LAYOUT_LAYERS_DIVISIBLE_BY_PP]` has no location. Its notes are num_layers = 61
    (located in models/deepseek-v3.yaml) and five unset defaults (pipeline_layout, ...);
    solve._violation anchors at the first *user* pin (origin not fact/model), an unset default
    without a position, instead of a located one. parallelism.pp = 2 and the --set model override
    are not mentioned. Expected: a location (the recipe's pp line, the override, or the model's
    num_layers). The recipe has since gained Megatron-Bridge's explicit layout (48 t's), which a 61-layer
    model cannot run either: that error is located at the layout."""
    rid = "qwen3-next-80b-a3b/gb200-nvl72-bf16"
    sets = ["model=deepseek-v3", "parallelism.pipeline_layout=null"]
    diags = located_compile_error(compile_outcome(root, rid, sets, tmp_path / "build"))
    assert any(d["code"] == "LAYOUT_LAYERS_DIVISIBLE_BY_PP" for d in diags)
    diags = located_compile_error(compile_outcome(root, rid, ["model=deepseek-v3"], tmp_path / "build2"))
    [d] = [d for d in diags if d["code"] == "LAYOUT_PIPELINE_LAYOUT_LAYERS"]
    assert d["pos"]["file"] == f"recipes/{rid}.yaml" and "48" in str(d) and "61" in str(d)


def test_bug18_suggested_stage_layers_are_possible(root, tmp_path):
    """moeforge explain qwen3-30b-a3b/h100-bf16 --set parallelism.pp=5 (48 layers):
    `help: ... set parallelism.first_stage_layers to one of 6925, 38422, 106712, 166413, 1048576,
    or set parallelism.last_stage_layers to one of ...` - values no 48-layer model can take
    (the solver's domain goes up to MAX_INT = 2**20 and nothing bounds a stage by num_layers).
    Expected: values between 1 and num_layers that satisfy the rule (here e.g. 8 or 28), or none."""
    import re

    outcome = compile_outcome(root, "qwen3-30b-a3b/h100-bf16", ["parallelism.pp=5"], tmp_path / "build")
    [d] = [d for d in located_compile_error(outcome) if d["code"] == "LAYOUT_LAYERS_DIVISIBLE_BY_PP"]
    for knob in ("first_stage_layers", "last_stage_layers"):
        m = re.search(rf"parallelism\.{knob} to (?:one of )?([0-9, ]+)", d["text"])
        if m:
            values = [int(v) for v in m.group(1).replace(" ", "").split(",") if v]
            assert all(1 <= v <= 48 for v in values), f"{knob}: {values}"


def test_reproducers_use_current_contracts(root, tmp_path):
    """Sanity: the reproducers' happy path compiles (so an xfail above is the bug, not the setup)."""
    outcome = compile_outcome(root, "tiny-moe/cpu", [], tmp_path / "build")
    assert outcome.status == "ok", outcome.error or outcome.diagnostics
    json.loads(outcome.value["files"]["plan.json"])
