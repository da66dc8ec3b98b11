"""Cold start: a recipe whose rules all fold to constants never imports z3, nor does one whose auto knobs
the pure-Python solver settles (compiler/solver/finite.py); only a recipe that really needs z3 loads it
(issue: instant checks)."""
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# tiny-moe/cpu with every `auto` knob pinned to what the solver chooses for it
PINNED = textwrap.dedent("""\
    schema: moeforge/recipe/v3
    revision: 1
    name: tiny-moe-cpu-pinned
    extends: cpu.yaml
    parallelism: {etp: 1, sp: false, vpp: null}
    precision: {reuse_grad_buf_for_mxfp8_param_ag: false}
    moe:
      flex_backend: deepep
      flex_num_sms: null
      hybridep_ranks_per_nvlink_domain: null
      overlap: {delay_wgrad: false, shared_expert: false}
    cuda_graph: {impl: none, modules: null, te_rng_tracker: false}
    overlap: {tp_comm: false, p2p: false, grad_reduce: false, param_gather: false}
    optimizer: {distributed: false, grad_reduce_in_fp32: true}
    training: {gradient_accumulation_fusion: false}
    kernels: {bias_activation_fusion: false, masked_softmax_fusion: false, bias_dropout_fusion: false,
              apply_rope_fusion: false}
    """)

PROBE = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from moeforge.compiler.driver import load, resolve
    from moeforge.compiler.targets.plan import build
    r = resolve(load(sys.argv[1], sys.argv[3:], root=Path(sys.argv[2])))
    plan = build(r)
    print(json.dumps({"z3": "z3" in sys.modules, "auto": sorted(r.auto), "tc": plan["transformer_config"]}))
    """)


def _probe(recipe: str, root: Path, *sets: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, recipe, str(root), *sets], cwd=ROOT, capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_fully_pinned_recipe_is_checked_without_z3(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    (root / "tiny-moe" / "pinned.yaml").write_text(PINNED)
    pinned = _probe("tiny-moe/pinned", root)
    assert pinned["auto"] == [] and pinned["z3"] is False
    solved = _probe("tiny-moe/cpu", root)
    assert solved["auto"] and solved["z3"] is False  # its auto knobs: settled without z3 (finite_solve)
    assert pinned["tc"] == solved["tc"]
    # a VPP size left open where the rules allow several and none is preferred: which one is z3's choice
    chosen = _probe("qwen3-235b-a22b/h100-bf16", root, "parallelism.vpp=auto")
    assert chosen["z3"] is True and chosen["tc"]["virtual_pipeline_model_parallel_size"] is not None


CHECK = textwrap.dedent("""\
    import json, sys
    from moeforge.compiler.cli import main
    rc = main(["check", "recipes/tiny-moe/cpu.yaml"])
    print(json.dumps({"rc": rc, "jsonschema": "jsonschema" in sys.modules}))
    """)


def _check(cache: Path, **env) -> dict:
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MOEFORGE_CACHE_DIR": str(cache),
                              **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_an_unchanged_recipe_is_not_validated_again(tmp_path):
    """The validity cache: the second cold check of an unchanged recipe never imports jsonschema."""
    cache = tmp_path / "cache"
    assert _check(cache) == {"rc": 0, "jsonschema": True}
    assert any(cache.rglob("*")), "acceptances are remembered"
    assert _check(cache) == {"rc": 0, "jsonschema": False}
    assert _check(cache, MOEFORGE_NO_CACHE="1") == {"rc": 0, "jsonschema": True}


def test_the_cache_never_hides_an_error(tmp_path, monkeypatch):
    from moeforge.compiler.recipe import cache as valid_cache
    from moeforge.compiler.recipe.validate import SCHEMAS, check

    monkeypatch.setenv("MOEFORGE_CACHE_DIR", str(tmp_path))
    valid_cache._directory.cache_clear()

    good, bad = {"schema": "moeforge/model/v1"}, {"schema": "moeforge/model/v1", "nonsense": 1}
    assert valid_cache.key(SCHEMAS / "model.v1.json", good) != valid_cache.key(SCHEMAS / "model.v1.json", bad)
    valid_cache.remember_valid(valid_cache.key(SCHEMAS / "model.v1.json", good))
    assert check(bad, "model.v1.json", lambda path: None), "a refused document is validated every time"
    assert [p.name for p in tmp_path.rglob("valid/*/*")] == [valid_cache.key(SCHEMAS / "model.v1.json", good)]
    valid_cache._directory.cache_clear()


def test_a_parsed_document_read_back_from_the_cache_is_the_same_document(tmp_path, monkeypatch):
    """The parse cache (moeforge.compiler.recipe.load): the same values and positions as PyYAML's parse; a changed file
    or a file that does not parse is never read from it."""
    from moeforge.compiler.recipe import cache as valid_cache
    from moeforge.compiler.diagnostics import CompileError
    from moeforge.compiler.recipe.load import load_text
    from moeforge.compiler.recipe.yaml_nodes import parse

    monkeypatch.setenv("MOEFORGE_CACHE_DIR", str(tmp_path))
    valid_cache._directory.cache_clear()
    try:
        text = (ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text() + "extra: [1, 2.5e-4, null, {a: true}]\n"
        fresh = load_text(text, "r.yaml")
        assert list(tmp_path.rglob("parsed/*/*")), "the parse was stored"
        again = load_text(text, "other.yaml")  # from the cache, under the name it is read by now
        assert again.data == fresh.data == parse(text, "r.yaml").data
        assert {p: (q.file, q.line, q.col) for p, q in again.positions.items()} == \
            {p: ("other.yaml", q.line, q.col) for p, q in fresh.positions.items()}
        changed = load_text(text.replace("seed: 1234", "seed: 1235"), "r.yaml")
        assert changed.data["training"]["seed"] == 1235
        for entry in tmp_path.rglob("parsed/*/*"):
            entry.write_text("[]")  # not an entry of ours: a miss, parsed again
        assert load_text(text, "r.yaml").data == fresh.data
        bad = "a: 1\na: 2\n"
        for _ in range(2):
            with pytest.raises(CompileError):
                load_text(bad, "bad.yaml")
    finally:
        valid_cache._directory.cache_clear()


# What a cold `moeforge check` must never import: the solver for a recipe with nothing left to solve,
# the other subcommands' modules (launch, emit and its templates, the plan), argparse (a plain check is read
# without it), and, on a warm validity cache, jsonschema (and what only it pulls in). Asserted on what
# is imported, never on how long it takes.
NEVER = {"z3", "jinja2", "moeforge.compiler.commands.launch", "moeforge.compiler.targets.emit", "moeforge.compiler.targets.explain", "moeforge.compiler.solver.encoding",
         "moeforge.compiler.solver.conflicts", "argparse", "subprocess",
         "moeforge.compiler.targets.plan"}  # check stops before the plan: moeforge.compiler.driver.compile(..., plan=False)
WARM = NEVER | {"jsonschema", "tempfile", "yaml", "moeforge.compiler.recipe.yaml_nodes"}


def _imported(argv: list[str], cwd: Path, cache: Path) -> set[str]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "moeforge.compiler", *argv], cwd=cwd,
                         capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MOEFORGE_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stdout + out.stderr
    return {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}


def test_a_cold_check_of_a_pinned_recipe_imports_only_what_it_uses(tmp_path):
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    (tmp_path / "recipes" / "tiny-moe" / "pinned.yaml").write_text(PINNED)
    cache = tmp_path / "cache"
    argv = ["check", "recipes/tiny-moe/pinned.yaml"]
    first = _imported(argv, tmp_path, cache)
    assert "moeforge.compiler.driver" in first and "jsonschema" in first  # it did check (and validated: cold cache)
    assert not first & NEVER, sorted(first & NEVER)
    again = _imported(argv, tmp_path, cache)
    assert not again & WARM, sorted(again & WARM)
    solved = _imported(["check", "recipes/tiny-moe/cpu.yaml"], tmp_path, cache)  # auto knobs: the solver runs
    assert "moeforge.compiler.solver.finite" in solved and not solved & NEVER, sorted(solved & NEVER)  # ... without z3


def test_a_check_with_unusual_arguments_still_goes_through_argparse(tmp_path, capsys):
    from moeforge.compiler.cli import main

    assert main(["check", "--format", "yaml", "recipes/tiny-moe/cpu.yaml"]) == 2  # argparse's usage error
    assert "invalid choice" in capsys.readouterr().err
    assert main(["check", "--format=json", "--quiet", str(ROOT / "recipes" / "tiny-moe" / "cpu.yaml")]) == 0
    assert json.loads(capsys.readouterr().out)["errors"] == 0
