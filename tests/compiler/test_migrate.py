"""v1 -> v2 follows megatron-core's renames, v2 -> v3 moves what v2 said about data and the optimizer into the
training-I/O sections; old recipes migrate in place (comments kept) and still compile to the same plan."""
import json
import shutil
from pathlib import Path

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.recipe.migrate import CURRENT, migrate_file, recipe_v1_to_v2, recipe_v2_to_v3, upgrade
from moeforge.compiler.driver import load, resolve

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
    assert f"schema: moeforge/recipe/v{CURRENT['recipe']}" in text and "modules: [attn, moe_router]" in text
    assert "enable_deepep" not in text and "flex_backend: deepep" in text
    assert migrate_file(path) is False  # already current


def _to_v2(text: str) -> str:
    """Write a current (v3) catalogue recipe the way v2 spelled it: data.kind was training.data, schedule.lr
    was training.lr (both sections follow training: in the catalogue, so their lines rejoin it)."""
    assert "schema: moeforge/recipe/v3" in text
    out = text.replace("schema: moeforge/recipe/v3", "schema: moeforge/recipe/v2").replace("recipe.v3.json",
                                                                                            "recipe.v2.json")
    return out.replace("\ndata:\n  kind:", "\n  data:").replace("\nschedule:\n  lr:", "\n  lr:")


def test_a_v1_recipe_compiles_to_the_same_plan_as_its_migrated_form(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes" / "platforms", root / "platforms")
    shutil.copytree(ROOT / "recipes" / "models", root / "models")
    (root / "t").mkdir()
    v2 = _to_v2((ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text())
    assert "  lr: 0.001" in v2 and "schedule" not in v2
    v1 = v2.replace("schema: moeforge/recipe/v2", "schema: moeforge/recipe/v1") \
           .replace("recipe.v2.json", "recipe.v1.json") + "cuda_graph:\n  scope: []\n"
    (root / "t" / "old.yaml").write_text(v1)
    (root / "t" / "new.yaml").write_text(v1)
    assert migrate_file(root / "t" / "new.yaml")
    old, new = resolve(load("t/old", (), root)), resolve(load("t/new", (), root))
    assert old.env == new.env


def _to_v1(text: str) -> str:
    """Write a current recipe the way v1 spelled it (megatron-core's old knob names)."""
    out = _to_v2(text).replace("schema: moeforge/recipe/v2", "schema: moeforge/recipe/v1").replace(
        "recipe.v2.json", "recipe.v1.json")
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
    from moeforge.compiler.targets.plan import build

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


# ----------------------------------------------------------------------------- v2 -> v3

V2 = """\
# yaml-language-server: $schema=../../schemas/recipe.v2.json
# a v2 recipe
schema: moeforge/recipe/v2
revision: 2
optimizer:
  distributed: true
  weight_decay: 0.1          # AdamW as in the paper
  clip_grad: 1.0
training:
  micro_batch_size: 1
  lr: 0.0003                 # peak LR
  data: learnable            # the harness's learnable task
# before launch
launch:
  time: "00:10:00"
"""


def test_v2_to_v3_is_pure_and_moves_every_key():
    import yaml

    old = yaml.safe_load(V2)
    before = json.dumps(old, sort_keys=True)
    new = recipe_v2_to_v3(old)
    assert json.dumps(old, sort_keys=True) == before  # input untouched
    assert new["schema"] == "moeforge/recipe/v3"
    assert new["training"] == {"micro_batch_size": 1}
    assert new["optimizer"] == {"distributed": True}
    assert new["data"] == {"kind": "learnable"}
    assert new["schedule"] == {"lr": 0.0003, "weight_decay": 0.1, "clip_grad": 1.0}
    assert list(new) == ["schema", "revision", "optimizer", "training", "data", "schedule", "launch"]


def test_v2_to_v3_drops_sections_it_empties_and_refuses_a_key_set_twice():
    new = recipe_v2_to_v3({"schema": "moeforge/recipe/v2", "training": {"data": "synthetic"},
                           "optimizer": {"clip_grad": 0.5}})
    assert "training" not in new and "optimizer" not in new
    assert new["data"] == {"kind": "synthetic"} and new["schedule"] == {"clip_grad": 0.5}
    with pytest.raises(CompileError, match="schedule.lr"):
        upgrade({"schema": "moeforge/recipe/v2", "training": {"lr": 0.1}, "schedule": {"lr": 0.2}})


def test_migrate_v2_in_place_keeps_comments_and_names_the_current_schema(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(V2)
    assert migrate_file(path) is True
    text = path.read_text()
    assert text.splitlines()[0] == "# yaml-language-server: $schema=../../schemas/recipe.v3.json"
    for comment in ("# a v2 recipe", "# AdamW as in the paper", "# peak LR", "# the harness's learnable task",
                    "# before launch"):
        assert comment in text, comment
    assert "data:\n  kind: learnable            # the harness's learnable task\n" in text
    assert "schedule:\n  lr: 0.0003                 # peak LR\n  weight_decay: 0.1" in text
    assert text.index("# before launch") < text.index("launch:")  # the comment stays with what follows it
    assert 'time: "00:10:00"' in text  # quotes kept
    assert migrate_file(path) is False  # already current


def test_moved_keys_keep_their_source_lines_for_diagnostics(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes" / "platforms", root / "platforms")
    shutil.copytree(ROOT / "recipes" / "models", root / "models")
    (root / "t").mkdir()
    text = _to_v2((ROOT / "recipes" / "tiny-moe" / "cpu.yaml").read_text()).replace("  lr: 0.001", "  lr: -1")
    (root / "t" / "bad.yaml").write_text(text)
    with pytest.raises(CompileError) as exc:
        load("t/bad", (), root)
    [d] = exc.value.diagnostics
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l == "  lr: -1")
    assert "schedule.lr" in d.message and d.pos.file == "recipes/t/bad.yaml" and d.pos.line == line


def test_set_overrides_written_for_v2_still_apply():
    r = resolve(load("tiny-moe/cpu", ["training.lr=0.02", "optimizer.weight_decay=0.05"]))
    assert r.env["lr"] == 0.02 and r.env["weight_decay"] == 0.05
    assert str(r.decisions["lr"].where).startswith("--set training.lr")


@pytest.mark.parametrize("recipe", ["tiny-moe/cpu", "qwen3-30b-a3b/h100-bf16-ep16-alltoall"])
def test_catalogue_recipes_written_as_v2_compile_to_the_same_plan(tmp_path, recipe):
    from moeforge.compiler.targets.plan import build

    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    v2 = _to_v2((root / f"{recipe}.yaml").read_text())
    assert "moeforge/recipe/v2" in v2
    (root / f"{recipe}-v2.yaml").write_text(v2)
    (root / f"{recipe}-migrated.yaml").write_text(v2)
    assert migrate_file(root / f"{recipe}-migrated.yaml")
    assert (root / f"{recipe}-migrated.yaml").read_text() == (root / f"{recipe}.yaml").read_text()

    def plan(name):
        p = build(resolve(load(name, (), root)))
        return {k: v for k, v in p.items() if k not in ("recipe", "decisions", "warnings")}

    assert plan(f"{recipe}-v2") == plan(recipe)
