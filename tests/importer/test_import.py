"""moeforge import: catalogue round trip through megatron-lm.args, and hand-written launch scripts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeforge.compiler.targets import emit
from moeforge.compiler.importer import files as import_files, launch as importer
from moeforge.compiler.commands.check import recipe_ids
from moeforge.compiler.cli import main
from moeforge.compiler.recipe.compose import RECIPES
from moeforge.compiler.lint.config_lint import lint_text
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.targets.plan import build

DATA = Path(__file__).resolve().parent.parent / "data" / "import"
SECTIONS = ("transformer_config", "model", "training", "optimizer", "ddp_config")
# Fields that cannot round-trip through megatron-lm.args, each with its reason: none.
CANNOT_ROUND_TRIP: dict[str, str] = {}
CATALOGUE = recipe_ids(RECIPES)


def _compile(path, root):
    resolved = resolve(load(path, (), root))
    return build(resolved), resolved


def _diff(a: dict, b: dict) -> list[str]:
    out = []
    for s in SECTIONS:
        for k in sorted(set(a[s]) | set(b[s])):
            if k in CANNOT_ROUND_TRIP:
                continue
            if a[s].get(k, "<absent>") != b[s].get(k, "<absent>"):
                out.append(f"{s}.{k}: {a[s].get(k, '<absent>')!r} != {b[s].get(k, '<absent>')!r}")
    return out


@pytest.mark.parametrize("rid", CATALOGUE)
def test_catalogue_round_trip(rid, root, tmp_path):
    """compile -> megatron-lm.args -> import (--platform = the recipe's) -> compile: the same plan sections."""
    rc = main(["compile", rid, "--out", str(tmp_path)])
    assert rc == 0
    args = tmp_path / rid / "megatron-lm.args"
    plan = json.loads((tmp_path / rid / "plan.json").read_text())
    imp = importer.import_text(args.read_text(), str(args), plan["platform"]["name"], root)
    assert imp.unmapped == []
    recipe_path, _ = import_files.write(imp, root, "megatron-lm.args", force=True)
    plan2, _ = _compile(recipe_path, root)
    assert _diff(plan, plan2) == []


# A Bridge override list carries neither the world size (the launcher's) nor max_position_embeddings: Bridge's
# GPTModelProvider builds GPTModel with model.seq_length as max_sequence_length, and so does the import.
NOT_IN_BRIDGE_LISTS = {"max_sequence_length"}


@pytest.mark.parametrize("rid", CATALOGUE)
def test_catalogue_round_trip_through_bridge_overrides(rid, root, tmp_path):
    """compile -> bridge.overrides -> import -> compile: the same plan sections, but for NOT_IN_BRIDGE_LISTS; what
    is not imported is what moeforge's plan states itself."""
    assert main(["compile", rid, "--out", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / rid / "plan.json").read_text())
    source = tmp_path / rid / "bridge.overrides"
    imp = importer.import_text(source.read_text(), str(source), plan["platform"]["name"], root)
    assert [(t, why) for t, why in imp.unmapped if not why.startswith("moeforge's plan states it")] == []
    imp.recipe["resources"]["nodes"] = plan["layout"]["nnodes"]  # the launcher's, not the list's
    recipe_path, _ = import_files.write(imp, root, "bridge.overrides", force=True)
    plan2, _ = _compile(recipe_path, root)
    assert [d for d in _diff(plan, plan2) if d.split(":")[0].split(".")[-1] not in NOT_IN_BRIDGE_LISTS] == []


SCRIPTS = {
    "qwen3_30b_a3b_h100.sh": ("h100", {"--log-throughput"}),
    "deepseek_mla_b200.sh": ("b200", {"--distributed-timeout-minutes 60"}),
    "small_gpt_moe_h100.sh": ("h100", {"--vocab-file ${GPT2_DIR}/gpt2-vocab.json",
                                       "--merge-file ${GPT2_DIR}/gpt2-merges.txt", "--use-mcore-models"}),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_launch_script_imports_compiles_and_lints(script, root, capsys):
    platform, unmapped = SCRIPTS[script]
    source = DATA / script
    rc = main(["import", str(source), "--root", str(root), "--force"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"platform {platform} (a comment on line 2 names {platform.upper()} (no command or variable does" in out
    name = f"{source.stem}-imported"
    recipe_path = root / "imported" / f"{name}.yaml"
    text = recipe_path.read_text()
    for flag in unmapped:  # listed, printed and written as comments: never dropped silently
        assert f"not imported: {flag}" in out
        assert f"#   {flag}  -- " in text
    plan, resolved = _compile(recipe_path, root)
    assert plan["platform"]["name"] == platform
    # lint-config reads the same script directly, and the compiled plan's args, without errors
    findings = lint_text(source.read_text(), str(source))
    assert [f for f in findings if f.severity == "error"] == []
    args = emit.render(plan, resolved.composed.data, "b")["megatron-lm.args"]
    assert [f for f in lint_text(args, "megatron-lm.args") if f.severity == "error"] == []


def test_qwen3_script_values(root):
    imp = importer.import_text((DATA / "qwen3_30b_a3b_h100.sh").read_text(), "q.sh", None, root)
    r, m = imp.recipe, imp.model
    assert r["resources"]["nodes"] == 2 and r["parallelism"]["ep"] == 16
    assert r["data"] == {"kind": "indexed", "blend": [{"weight": 0.7, "path": "${DATA_ROOT}/web_text_document"},
                                                      {"weight": 0.3, "path": "${DATA_ROOT}/code_text_document"}],
                         "split": "99,1,0"}
    assert r["checkpoint"]["save"] == "${CKPT_ROOT}/qwen3-30b-a3b" and "load" not in r["checkpoint"]
    assert r["tokenizer"] == {"type": "huggingface", "path": "Qwen/Qwen3-30B-A3B"}
    assert r["schedule"]["decay"] == "cosine" and r["schedule"]["warmup"] == 2000
    assert r["eval"] == {"interval": 1000, "iters": 10}
    assert m["architecture"]["num_query_groups"] == 4 and m["moe"]["num_experts"] == 128
    assert m["architecture"]["activation"] == "swiglu"


def test_deepseek_script_values(root):
    imp = importer.import_text((DATA / "deepseek_mla_b200.sh").read_text(), "d.sh", None, root)
    r, arch = imp.recipe, imp.model["architecture"]
    assert r["resources"]["nodes"] == 4 and r["parallelism"]["pp"] == 2
    assert imp.model["moe"]["layer_freq"] == [0] + [1] * 15
    assert arch["multi_latent_attention"] and arch["rotary_scaling_factor"] == 40 and "yarn_mscale" not in arch
    assert r["schedule"]["decay"] == "wsd" and r["schedule"]["warmup"] == 0.01
    assert r["checkpoint"]["async"] is True and r["checkpoint"]["load"] == "none"
    assert r["recompute"]["modules"] == ["mla_up_proj", "moe_act"]


def test_other_inputs(root, tmp_path):
    ft = "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 64\n" \
         "  --num-attention-heads: 4\n  --vocab-size: 128\n  --num-experts: 4\n  --seq-length: 32\n" \
         "  --micro-batch-size: 2\n  --global-batch-size: 8\n  --train-iters: 4\n  --bf16: true\n" \
         "  --no-gradient-accumulation-fusion: true\n  --moe-layer-freq: ([0]*1+[1]*1)\n  --made-up-flag: 3\n"
    imp = importer.import_text(ft, "model_config.yaml", "h100", root)
    assert imp.kind == "functional-test"
    assert imp.model["moe"]["layer_freq"] == [0, 1]
    assert imp.recipe["training"]["gradient_accumulation_fusion"] is False
    assert ("--made-up-flag 3", "not an argument of Megatron-LM 0.19.2") in imp.unmapped
    cmd = "torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 " \
          "--vocab-size 128 --num-experts 4 --distributed-backend gloo --seq-length 32"
    imp = importer.import_text(cmd, "cmd.txt", None, root)
    assert imp.platform == "cpu" and imp.kind == "launch"   # of the CPU platforms, the one of 2 ranks per node
    imp = importer.import_text(cmd.replace("--nproc_per_node 2", "--nnodes 2 --nproc_per_node 1"), "cmd.txt", None, root)
    assert imp.platform == "cpu-cluster"
    bridge = "model.tensor_model_parallel_size=2\n++model.num_moe_experts=8\nmodel.num_layers=4\n" \
             "train.global_batch_size=64\nmixed_precision.bf16=true\nmodel.nonsense=1\n"
    imp = importer.import_text(bridge, "bridge.overrides", "h100", root)
    assert imp.kind == "bridge" and imp.recipe["parallelism"]["tp"] == 2
    assert imp.model["moe"]["num_experts"] == 8 and imp.recipe["precision"]["dtype"] == "bf16"
    assert [t for t, _ in imp.unmapped] == ["model.nonsense=1"]


def test_platform_must_be_named_when_unclear(root, tmp_path, capsys):
    src = tmp_path / "launch.sh"
    src.write_text("python pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                   "--vocab-size 128 --num-experts 4\n")
    assert main(["import", str(src), "--root", str(root)]) == 2
    assert "pass --platform NAME" in capsys.readouterr().err
    assert main(["import", str(src), "--root", str(root), "--platform", "h100", "--name", "x1"]) == 0
    assert main(["import", str(src), "--root", str(root), "--platform", "h100", "--name", "x1"]) == 2
    assert "exists" in capsys.readouterr().err


def test_dense_model_is_refused(root):
    with pytest.raises(importer.ImportError_, match="no --num-experts"):
        importer.import_text("--num-layers 2\n--hidden-size 64\n", "a.args", "h100", root)


def test_import_writes_into_the_project_it_runs_in(tmp_path, monkeypatch, capsys):
    """In a user's project (`moeforge init`, no platform files of its own) `moeforge import` writes under that
    project's recipes/, never into moeforge's own catalogue, reads the built-in platforms as compile does, and the
    recipe it writes compiles there."""
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    before = sorted(p.name for p in (RECIPES / "models").iterdir())
    assert main(["import", str(DATA / "qwen3_30b_a3b_h100.sh")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path}/recipes/imported/qwen3_30b_a3b_h100-imported.yaml" in out
    assert "next: moeforge compile imported/qwen3_30b_a3b_h100-imported\n" in out
    assert sorted(p.name for p in (RECIPES / "models").iterdir()) == before
    assert not (RECIPES / "imported").exists()
    assert main(["compile", "imported/qwen3_30b_a3b_h100-imported", "--quiet"]) == 0
    plan = json.loads((tmp_path / "build/imported/qwen3_30b_a3b_h100-imported/plan.json").read_text())
    assert plan["platform"]["name"] == "h100" and plan["layout"]["ep"] == 16


def test_arguments_the_plan_states_itself_are_dropped_with_that_reason(root):
    """Megatron-LM arguments no recipe sets because the plan fixes them (the NaN check) are reported with what the
    plan does instead, not as launch-only; the precision-aware optimizer is a recipe setting, imported."""
    cmd = ("torchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128 "
           "--num-experts 4 --seq-length 32 --bf16 --use-distributed-optimizer --use-precision-aware-optimizer "
           "--exp-avg-dtype bf16 --main-grads-dtype bf16 --no-check-for-nan-in-loss-and-grad "
           "--apply-wd-to-qk-layernorm --log-throughput --fine-grained-offloading-max-inflight-offloads 2")
    imp = importer.import_text(cmd, "cmd.txt", "h100", root)
    why = dict(imp.unmapped)
    assert why["--no-check-for-nan-in-loss-and-grad"].startswith("moeforge's plan states it")
    assert why["--log-throughput"] == "a Megatron-LM argument moeforge has no knob for (launch-only)"
    # a field only lint-config reads: no recipe sets it, and the plan does not either
    assert why["--fine-grained-offloading-max-inflight-offloads 2"].startswith("no recipe setting (a recipe runs "
                                                                               "megatron-core's default None)")
    opt = imp.recipe["optimizer"]
    assert (opt["precision_aware"], opt["exp_avg_dtype"], opt["main_grads_dtype"]) == (True, "bfloat16", "bfloat16")
    # BF16 main grads: Megatron-LM's validate_args leaves the BF16 gradient reduce in BF16 (no FP32 accumulation)
    assert opt["grad_reduce_in_fp32"] is False
    assert imp.recipe["schedule"]["apply_wd_to_qk_layernorm"] is True   # a recipe setting: imported


SMALL = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 64 --num-attention-heads 4 "
         "--vocab-size 128 --num-experts 8 --seq-length 32 --global-batch-size 64 --bf16 ")


def test_deprecated_arguments_are_read_as_validate_args_rewrites_them(root):
    """validate_args turns --recompute-activations into selective recompute, --enable-cuda-graph and
    --external-cuda-graph into a CUDA-graph implementation, --cuda-graph-scope into --cuda-graph-modules (and turns
    TE's RNG tracker on for the graphs); it refuses --batch-size, --warmup, --model-parallel-size and
    --checkpoint-activations. The import runs what the launch runs, or says Megatron-LM refuses it."""
    imp = importer.import_text(SMALL + "--recompute-activations --enable-cuda-graph --cuda-graph-scope attn "
                               "--batch-size 4 --checkpoint-activations", "cmd.txt", "h100", root)
    assert imp.recipe["recompute"]["granularity"] == "selective"
    graphs = imp.recipe["cuda_graph"]
    assert (graphs["impl"], graphs["modules"], graphs["te_rng_tracker"]) == ("local", ["attn"], True)
    imp = importer.import_text(SMALL + "--external-cuda-graph", "cmd.txt", "h100", root)
    assert (imp.recipe["cuda_graph"]["impl"], imp.recipe["cuda_graph"]["te_rng_tracker"]) == ("transformer_engine", True)
    why = dict(importer.import_text(SMALL + "--batch-size 4 --checkpoint-activations --cuda-graph-impl local "
                                    "--enable-cuda-graph", "cmd.txt", "h100", root).unmapped)
    assert why["--batch-size 4"] == ("Megatron-LM refuses it: --batch-size argument is no longer valid, use "
                                     "--micro-batch-size instead")
    assert why["--checkpoint-activations"].startswith("Megatron-LM refuses it: --checkpoint-activations is no longer")
    assert why["--enable-cuda-graph"] == "Megatron-LM refuses it beside --cuda-graph-impl local"


def test_launch_values_validate_args_derives(root):
    """An unset ETP is TP; SP is off at TP = 1; the vocabulary is padded to --make-vocab-size-divisible-by x TP;
    --num-layers-per-virtual-pipeline-stage is a VPP size; a launch counted in samples is counted in iterations."""
    imp = importer.import_text(SMALL + "--tensor-model-parallel-size 2 --expert-model-parallel-size 2 "
                               "--sequence-parallel", "cmd.txt", "h100", root)
    assert imp.recipe["parallelism"]["etp"] == 2 and imp.model["architecture"]["vocab_size"] == 256
    imp = importer.import_text(SMALL + "--sequence-parallel --pipeline-model-parallel-size 2 "
                               "--num-layers-per-virtual-pipeline-stage 2 --make-vocab-size-divisible-by 100 "
                               "--train-samples 6400 --lr-decay-samples 3200 --lr-warmup-samples 100",
                               "cmd.txt", "h100", root)
    assert imp.recipe["parallelism"]["sp"] is False and imp.recipe["parallelism"]["vpp"] == 2
    assert imp.model["architecture"]["vocab_size"] == 200
    assert (imp.recipe["training"]["train_iters"], imp.recipe["schedule"]["decay_iters"],
            imp.recipe["schedule"]["warmup"]) == (100, 50, 2)
    why = dict(importer.import_text(SMALL + "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3",
                                    "cmd.txt", "h100", root).unmapped)
    assert why["--num-layers-per-virtual-pipeline-stage 3"] == (
        "Megatron-LM refuses it: number of layers per pipeline stage must be divisible number of layers per virtual "
        "pipeline stage")


def test_dropped_arguments_that_change_training_say_so(root):
    why = dict(importer.import_text(SMALL + "--optimizer muon --muon-momentum 0.9 --apply-query-key-layer-scaling "
                                    "--timing-log-level 0 --log-throughput", "cmd.txt", "h100", root).unmapped)
    assert why["--optimizer muon"] == "changes what trains, and no recipe setting says it: a recipe trains with Adam"
    assert why["--muon-momentum 0.9"] == why["--optimizer muon"]
    assert why["--apply-query-key-layer-scaling"].startswith("a megatron-core setting no recipe states")
    # argparse converts before it checks the choices: 0 is one of --timing-log-level's [0, 1, 2]
    assert why["--timing-log-level 0"] == "a Megatron-LM argument moeforge has no knob for (launch-only)"
    # a Mamba hybrid's layers (Megatron-LM's ModelOpt confs of Nemotron-H): the model differs, so the import
    # refuses it (compiler/importer/validate_args.py refuse_unplanned; tests/importer/test_import_derivations.py)
    with pytest.raises(importer.ImportError_, match="a Mamba-hybrid launch"):
        importer.import_text(SMALL + "--hybrid-layer-pattern M*M* --mamba-num-heads 8", "cmd.txt", "h100", root)
    assert "--optimizer adam" not in dict(importer.import_text(SMALL + "--optimizer adam", "cmd.txt", "h100",
                                                               root).unmapped)


def test_functional_test_values_are_words_as_megatron_lms_runner_makes_them(root):
    ft = ("MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 64\n  --num-attention-heads: 4\n  --vocab-size: 128\n"
          "  --num-experts: 4\n  --seq-length: 32\n  --recompute-granularity: selective\n"
          "  --recompute-modules: \"[moe_act layernorm]\"\n  --moe-layer-freq: ([0]*1+[1]*1)\n")
    imp = importer.import_text(ft, "model_config.yaml", "h100", root)
    assert imp.recipe["recompute"]["modules"] == ["moe_act", "layernorm"]
    assert imp.model["moe"]["layer_freq"] == [0, 1]


def test_a_name_that_is_not_a_recipe_name_is_refused(root):
    with pytest.raises(importer.ImportError_, match="1 to 64 letters"):
        importer.import_text(SMALL, "cmd.txt", "h100", root, "x" * 65)


def test_megatron_lms_mixtral_example_imports_as_it_runs(root):
    """Megatron-LM's examples/mixtral/train_mixtral_8x7b_distributed.sh (core_v0.19.0): PP4 without VPP and TP1,
    so validate_args runs neither PP communication overlap nor sequence parallelism."""
    imp = importer.import_text((DATA / "train_mixtral_8x7b_distributed.sh").read_text(),
                               "train_mixtral_8x7b_distributed.sh", "h100", root)
    assert (imp.recipe["overlap"]["p2p"], imp.recipe["parallelism"]["sp"]) == (False, False)
    assert any(n.startswith("overlap.p2p: false") for n in imp.notes)
    assert dict(imp.unmapped)["--no-load-optim"] == ("changes what trains, and no recipe setting says it: a recipe "
                                                    "resumes with its optimizer state")


def test_a_bridge_environment_path_is_a_recipes_variable(root):
    """bridge.overrides writes a recipe's ${VAR} as OmegaConf's ${oc.env:VAR} (a bare ${VAR} is an interpolation
    Bridge refuses); the import reads it back as ${VAR}."""
    text = 'model.num_layers=2\nmodel.num_moe_experts=4\ncheckpoint.save="${oc.env:CKPT}/run"\n'
    imp = importer.import_text(text, "bridge.overrides", "h100", root)
    assert imp.recipe["checkpoint"]["save"] == "${CKPT}/run"


def test_flags_kept_in_a_string_are_split_as_bash_splits_them(root):
    """Megatron-LM's examples keep flags in a string (MODEL_ARGS="--num-layers 48 ...") and pass ${MODEL_ARGS}
    unquoted, so bash splits it into words; a quoted "${VAR}" stays one word."""
    imp = importer.import_text((DATA / "modelopt_qwen3_30b_a3b.sh").read_text(), "modelopt_qwen3_30b_a3b.sh", "h100",
                               root)
    arch, moe = imp.model["architecture"], imp.model["moe"]
    assert (arch["num_layers"], arch["hidden_size"], arch["num_query_groups"], arch["kv_channels"]) == (48, 2048, 4, 128)
    assert (moe["num_experts"], moe["router_topk"], moe["ffn_hidden_size"]) == (128, 8, 768)
    assert imp.recipe["tokenizer"]["path"] == "Qwen/Qwen3-30B-A3B"  # "${TOKENIZER_MODEL}": one word, the script's
    # --save-interval without --save: inert in the launch, refused in a recipe (CHECKPOINT_INTERVAL_NEEDS_SAVE)
    assert dict(imp.unmapped)["--save-interval 100000"] == "without --save Megatron-LM never saves"
    assert "interval" not in imp.recipe.get("checkpoint", {})


def test_a_commented_out_continuation_line_continues_nothing(root):
    """bash ends a comment at its newline: Megatron-LM's DeepSeek-R1 ModelOpt conf comments out flags ending in a
    backslash (`#    --decoder-last-pipeline-num-layers 7 \\`), and the next line is still a command."""
    script = ('MODEL_ARGS=" \\\n    --num-layers 4 \\\n    --hidden-size 64 \\\n    --num-attention-heads 4 \\\n'
              '    --num-experts 8 \\\n"\n#    --decoder-first-pipeline-num-layers 6 \\\n'
              '#    --decoder-last-pipeline-num-layers 7 \\\ntorchrun pretrain_gpt.py ${MODEL_ARGS} --vocab-size 128\n')
    imp = importer.import_text(script, "conf.sh", "h100", root)
    assert (imp.model["architecture"]["num_layers"], imp.model["moe"]["num_experts"]) == (4, 8)
