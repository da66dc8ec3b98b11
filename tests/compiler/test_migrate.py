"""v1 -> v2 follows megatron-core's renames; old recipes migrate in place and still compile."""
import json
import shutil
from pathlib import Path

import pytest

from compiler.diagnostics import CompileError
from compiler.migrate import migrate_file, recipe_v1_to_v2, upgrade
from compiler.pipeline import load, resolve

ROOT = Path(__file__).resolve().parents[2]

V1 = """\
# an old recipe
schema: moeforge/recipe/v1   # the old version
revision: 3
moe:
  enable_deepep: true        # became flex + deepep
  deepep_num_sms: 24         # folded into flex_num_sms
  overlap:
    ep_comm: true
cuda_graph:
  impl: transformer_engine
  scope: [attn, moe_router]  # became modules
"""


def test_v1_to_v2_is_pure_and_renames_every_old_knob():
    import yaml

    old = yaml.safe_load(V1)
    before = json.dumps(old, sort_keys=True)
    new = recipe_v1_to_v2(old)
    assert json.dumps(old, sort_keys=True) == before  # input untouched
    assert new["schema"] == "moeforge/recipe/v2"
    assert new["moe"] == {"dispatcher": "flex", "flex_backend": "deepep", "flex_num_sms": 24,
                          "overlap": {"ep_comm": True}}
    assert new["cuda_graph"] == {"impl": "transformer_engine", "modules": ["attn", "moe_router"]}


def test_sm_counts_follow_the_backend_and_conflicts_are_refused():
    new = recipe_v1_to_v2({"schema": "moeforge/recipe/v1", "moe": {"dispatcher": "flex", "flex_backend": "hybridep",
                                                                  "deepep_num_sms": 20, "hybridep_num_sms": 32}})
    assert new["moe"]["flex_num_sms"] == 32 and "hybridep_num_sms" not in new["moe"]
    with pytest.raises(CompileError):
        upgrade({"schema": "moeforge/recipe/v1", "moe": {"deepep_num_sms": 20, "hybridep_num_sms": 32}})


def test_migrate_rewrites_in_place_keeping_comments(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(V1)
    assert migrate_file(path) is True
    text = path.read_text()
    assert "# an old recipe" in text and "# became modules" in text and "# the old version" in text
    assert "schema: moeforge/recipe/v2" in text and "modules: [attn, moe_router]" in text
    assert "enable_deepep" not in text and "flex_backend: deepep" in text
    assert migrate_file(path) is False  # already current


def test_a_v1_recipe_compiles_to_the_same_plan_as_its_migrated_form(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes" / "platforms", root / "platforms")
    shutil.copytree(ROOT / "recipes" / "models", root / "models")
    (root / "t").mkdir()
    v2 = (ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text()
    v1 = v2.replace("schema: moeforge/recipe/v2", "schema: moeforge/recipe/v1") \
           .replace("recipe.v2.json", "recipe.v1.json") + "cuda_graph:\n  scope: []\n"
    (root / "t" / "old.yaml").write_text(v1)
    (root / "t" / "new.yaml").write_text(v1)
    assert migrate_file(root / "t" / "new.yaml")
    old, new = resolve(load("t/old", (), root)), resolve(load("t/new", (), root))
    assert old.env == new.env


def _to_v1(text: str) -> str:
    """Write a current recipe the way v1 spelled it (megatron-core's old knob names)."""
    out = text.replace("schema: moeforge/recipe/v2", "schema: moeforge/recipe/v1").replace("recipe.v2.json",
                                                                                            "recipe.v1.json")
    out = out.replace("  dispatcher: flex", "  enable_deepep: true").replace("  flex_backend: deepep\n", "") \
        if "flex_backend: deepep" in out else out
    out = out.replace("  flex_num_sms:", "  hybridep_num_sms:")
    lines, in_graph = [], False
    for line in out.splitlines():
        if not line.startswith(" "):
            in_graph = line.startswith("cuda_graph:")
        if in_graph and line.startswith("  modules:"):
            line = line.replace("  modules:", "  scope:", 1)
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("recipe", ["qwen3-30b-a3b/h100-bf16", "qwen3-next-80b-a3b/b200-bf16"])
def test_catalogue_recipes_written_with_v1_names_compile_to_the_same_plan(tmp_path, recipe):
    from compiler.plan import build

    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    v1 = _to_v1((root / f"{recipe}.yaml").read_text())
    assert "moeforge/recipe/v1" in v1 and ("enable_deepep" in v1 or "hybridep_num_sms" in v1) and "scope:" in v1
    (root / f"{recipe}-v1.yaml").write_text(v1)
    (root / f"{recipe}-migrated.yaml").write_text(v1)
    assert migrate_file(root / f"{recipe}-migrated.yaml")

    def plan(name):
        p = build(resolve(load(name, (), root)))
        return {k: v for k, v in p.items() if k not in ("recipe", "decisions", "warnings")}, \
            {d["field"]: d["value"] for d in p["decisions"]}

    current = plan(recipe)
    assert plan(f"{recipe}-v1") == current
    assert plan(f"{recipe}-migrated") == current
