"""The recipe catalogue: platforms, models and tuned recipes validate, resolve and cover.

Every platform/model/recipe document validates against the schema it declares; every
recipe composes (extends, platform, model) into a valid tree and resolves through the
rule catalogue; every model has a recipe on H100 and on GB200 NVL72, Qwen3-30B-A3B has one
on every GPU platform; and the seeds' two measured EP16 alltoall recipes differ only in EP
overlap.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from moeforge.compiler.recipe import validate
from moeforge.compiler.commands.check import recipe_files
from moeforge.compiler.recipe.compose import RECIPES
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.recipe.load import load_file
from moeforge.compiler.driver import load, resolve

PLATFORMS = sorted((RECIPES / "platforms").glob("*.yaml"))
MODELS = sorted((RECIPES / "models").glob("*.yaml"))
SWEEPS = sorted((RECIPES / "sweeps").glob("*.yaml"))
RECIPE_FILES = recipe_files([RECIPES])
GPU_PLATFORMS = ("h100", "h200", "b200", "b300", "gb200-nvl72", "gb300-nvl72")
CPU_ONLY_MODELS = {"tiny-moe"}            # the embedded CPU demo; no GPU recipes expected

# Tuned configurations whose pipeline split Megatron-Bridge makes even with an explicit layout
# (DeepSeek-V3's 61 layers + MTP) or by counting embedding and loss as layers (Qwen3-235B:
# (94 + 2) / 8 = 12 per stage). The recipes say so; the even-split rules must step aside.
UNEVEN_PIPELINES = {
    "qwen3-235b-a22b/h100-bf16", "qwen3-235b-a22b/b200-bf16", "qwen3-235b-a22b/b200-bf16-x256",
    "qwen3-235b-a22b/gb200-nvl72-bf16", "qwen3-235b-a22b/gb200-nvl72-bf16-x256",
    "deepseek-v3/h100-bf16", "deepseek-v3/b200-bf16", "deepseek-v3/gb200-nvl72-bf16",
}

SEED_BASE = "qwen3-30b-a3b/h100-bf16-ep16-alltoall"
SEED_OVERLAP = "qwen3-30b-a3b/h100-bf16-ep16-alltoall-overlap"


def _id(path: Path) -> str:
    return str(path.relative_to(RECIPES).with_suffix(""))


def _schema_diagnostics(path: Path, kind: str):
    doc = load_file(path)
    diags = validate.missing_schema(doc.data, doc.file)
    name = validate.document_schema(doc.data, kind)
    diags += validate.check(doc.data, name, doc.pos)
    return name, diags


@pytest.mark.parametrize("path", PLATFORMS, ids=_id)
def test_platform_validates(path):
    name, diags = _schema_diagnostics(path, "platform")
    assert name == "platform.v1.json"
    assert not diags, "\n".join(d.render() for d in diags)


@pytest.mark.parametrize("path", MODELS, ids=_id)
def test_model_validates(path):
    name, diags = _schema_diagnostics(path, "model")
    assert name == "model.v1.json"
    assert not diags, "\n".join(d.render() for d in diags)
    assert load_file(path).data["name"] == path.stem


@pytest.mark.parametrize("path", RECIPE_FILES, ids=_id)
def test_recipe_document_validates(path):
    name, diags = _schema_diagnostics(path, "recipe")
    assert name == f"recipe.v{validate.KINDS['recipe']}.json"  # the current version (moeforge migrate)
    assert not diags, "\n".join(d.render() for d in diags)


@pytest.mark.parametrize("path", SWEEPS, ids=_id)
def test_sweep_validates(path):
    name, diags = _schema_diagnostics(path, "sweep")
    assert name == f"sweep.v{validate.KINDS['sweep']}.json"
    assert not diags, "\n".join(d.render() for d in diags)
    assert load_file(path).data["name"] == path.stem


@pytest.mark.parametrize("path", PLATFORMS + MODELS + SWEEPS + RECIPE_FILES, ids=_id)
def test_document_names_its_schema_for_the_editor(path):
    first = path.read_text().splitlines()[0]
    kind = {"platforms": "platform.v1", "models": "model.v1", "sweeps": "sweep.v1"}.get(path.parent.name, f"recipe.v{validate.KINDS['recipe']}")
    assert first == f"# yaml-language-server: $schema=../../schemas/{kind}.json"


@pytest.mark.parametrize("path", RECIPE_FILES, ids=_id)
def test_recipe_resolves(path):
    composed = load(path)                      # composes and validates the merged tree
    assert composed.data["model"]["name"] == path.parent.name   # recipes/<model>/<platform>-<precision>.yaml
    resolved = resolve(composed)
    assert not [d for d in resolved.diagnostics if d.is_error]
    env = resolved.env
    assert env["world_size"] == composed.data["resources"]["nodes"] * composed.data["platform"]["gpus_per_node"]


@pytest.mark.parametrize("rid", sorted(UNEVEN_PIPELINES))
def test_uneven_pipelines_say_how_they_split(rid):
    data = load(rid).data
    layers = data["model"]["architecture"]["num_layers"]
    par = data["parallelism"]
    pp, vpp = par["pp"], par.get("vpp") or 1
    assert pp > 1 and (layers % pp or (layers // pp) % vpp)  # really uneven
    assert par.get("pipeline_layout") or (par.get("account_for_embedding") and par.get("account_for_loss"))
    stripped = {k: v for k, v in par.items() if k not in ("pipeline_layout", "account_for_embedding",
                                                          "account_for_loss")}
    codes = set()
    try:
        resolve(load(rid, [f"parallelism.{k}=null" if k == "pipeline_layout" else f"parallelism.{k}=false"
                           for k in par if k not in stripped]))
    except CompileError as exc:
        codes = {d.code for d in exc.diagnostics}
    assert codes & {"LAYOUT_LAYERS_DIVISIBLE_BY_PP", "LAYOUT_STAGE_LAYERS_DIVISIBLE_BY_VPP"}


def _catalogue() -> list[tuple[str, str, str]]:
    out = []
    for path in RECIPE_FILES:
        data = load(path).data
        out.append((_id(path), data["model"]["name"], data["platform"]["name"]))
    return out


def test_every_model_has_a_recipe_on_h100_and_gb200():
    have = {(model, platform) for _, model, platform in _catalogue()}
    models = [p.stem for p in MODELS if p.stem not in CPU_ONLY_MODELS]
    assert len(models) >= 5
    missing = [(m, p) for m in models for p in ("h100", "gb200-nvl72") if (m, p) not in have]
    assert not missing


def test_qwen3_30b_a3b_runs_on_every_gpu_platform():
    platforms = {p.stem for p in PLATFORMS}
    assert set(GPU_PLATFORMS) <= platforms
    have = {platform for _, model, platform in _catalogue() if model == "qwen3-30b-a3b"}
    assert set(GPU_PLATFORMS) <= have
    for platform in GPU_PLATFORMS:  # recipes/<model>/<platform>-<precision>.yaml
        assert (RECIPES / "qwen3-30b-a3b" / f"{platform}-bf16.yaml").is_file()


def test_seed_ep16_alltoall_recipes_differ_only_in_ep_overlap():
    child = load_file(RECIPES / f"{SEED_OVERLAP}.yaml").data
    assert child["extends"] == "h100-bf16-ep16-alltoall.yaml"
    base, over = resolve(load(SEED_BASE)).env, resolve(load(SEED_OVERLAP)).env
    differ = {k for k in base.keys() | over.keys() if base.get(k) != over.get(k)}
    assert differ == {"overlap_moe_expert_parallel_comm"}
    assert base["overlap_moe_expert_parallel_comm"] is False
    assert over["overlap_moe_expert_parallel_comm"] is True
    # the measured shape: H100 x16, EP16, alltoall, BF16, GBS 1024, MBS 1, no CUDA graphs,
    # no fused permutation, no delayed wgrad
    for env in (base, over):
        assert env["gpu_product"] == "H100" and env["world_size"] == 16
        assert env["expert_model_parallel_size"] == 16
        assert env["moe_token_dispatcher_type"] == "alltoall"
        assert env["bf16"] is True
        assert (env["global_batch_size"], env["micro_batch_size"]) == (1024, 1)
        assert env["cuda_graph_impl"] == "none"
        assert env["moe_permute_fusion"] is False
        assert env["delay_wgrad_compute"] is False
