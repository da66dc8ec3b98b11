"""The recipe language for real training (recipe v3): runtime, data, tokenizer, checkpoint, schedule, logging
and eval reach plan.json under the plan contract's keys, megatron-lm.args through flags Megatron-LM's parser
has (compiler/data/megatron_lm_args.json), and bridge.overrides through Megatron-Bridge ConfigContainer paths;
everything from one knob row each (compiler/knobs/table.py).
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from moeforge.compiler.knobs import table as K
from moeforge.compiler.targets.bridge_overrides import bridge_overrides
from moeforge.compiler.targets.emit import launch_settings
from moeforge.compiler.targets.megatron_args import arguments, lm_parser
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.targets.plan import build

ROOT = Path(__file__).resolve().parents[2]
# the case: tiny-moe on Megatron-LM's loop, an indexed dataset, byte tokens, checkpoints
REAL = ["runtime.entrypoint=megatron-lm", "platform.software.megatron_core=0.19.2",
        "model.architecture.vocab_size=384", "data.kind=indexed", 'data.paths=["/d/corpus_text_document"]',
        "tokenizer.type=byte", "checkpoint.save=/ck", "checkpoint.interval=6", "training.train_iters=12"]
PLAN_KEYS = {
    "data": ["kind", "paths", "blend", "split", "cache_dir", "env_vars"],
    "tokenizer": ["type", "path", "vocab_size", "eod_id"],
    "checkpoint": ["save", "interval", "load", "keep_last", "async", "format", "scheduler"],
    "schedule": ["decay", "warmup_iters", "warmup_fraction", "decay_iters", "wsd_decay_iters", "wsd_decay_style"],
    "logging": ["interval", "tensorboard", "wandb_project"],
    "eval": ["interval", "iters"],
}


def compiled(recipe: str, sets=()):
    plan = build(resolve(load(recipe, list(sets))))
    args, notes = arguments(plan)
    return plan, {flag: values for flag, values in args}, notes


def test_defaults_keep_the_harness_recipe_as_it_was():
    plan, args, notes = compiled("tiny-moe/cpu")
    assert plan["runtime"]["entrypoint"] == "moeforge"
    assert "data" not in plan["training"]
    assert {s: list(plan[s]) for s in PLAN_KEYS} == PLAN_KEYS
    assert plan["data"] == {"kind": "synthetic", "paths": None, "blend": None, "split": "969,30,1",
                            "cache_dir": None, "env_vars": []}
    assert plan["tokenizer"] == {"type": None, "path": None, "vocab_size": 128, "eod_id": None}
    assert plan["checkpoint"] == {"save": None, "interval": None, "load": "none", "keep_last": None, "async": False,
                                  "format": "torch_dist", "scheduler": "match"}
    assert plan["schedule"] == {"decay": "constant", "warmup_iters": 0, "warmup_fraction": None, "decay_iters": None,
                                "wsd_decay_iters": None, "wsd_decay_style": "exponential"}
    assert plan["logging"] == {"interval": 100, "tensorboard": None, "wandb_project": None}
    assert plan["eval"] == {"interval": None, "iters": 0}
    assert plan["optimizer"] == {"optimizer": "adam", "lr": 0.001, "min_lr": 0.0, "weight_decay": 0.01,
                                 "clip_grad": 1.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-08,
                                 "apply_wd_to_qk_layernorm": False,
                                 "use_distributed_optimizer": False, "overlap_param_gather": False,
                                 # the FP32 optimizer, stated so that no Bridge recipe's own stands in
                                 "use_precision_aware_optimizer": False, "main_grads_dtype": "float32",
                                 "main_params_dtype": "float32", "exp_avg_dtype": "float32",
                                 "exp_avg_sq_dtype": "float32", "reuse_grad_buf_for_mxfp8_param_ag": False}
    # Megatron-LM: mock data, the null tokenizer, exactly the plan's vocab, no evaluation, gloo
    assert args["--mock-data"] == [] and args["--tokenizer-type"] == ["NullTokenizer"]
    assert args["--vocab-size"] == args["--padded-vocab-size"] == ["128"]
    assert args["--eval-iters"] == ["0"] and args["--eval-interval"] == ["4"]
    assert args["--distributed-backend"] == ["gloo"] and args["--lr-decay-style"] == ["constant"]
    for absent in ("--save", "--load", "--data-path", "--split", "--exit-signal-handler", "--async-save"):
        assert absent not in args


def test_the_real_training_case_reaches_megatron_lm_args():
    plan, args, notes = compiled("tiny-moe/cpu", REAL)
    assert plan["runtime"]["entrypoint"] == "megatron-lm"
    assert plan["data"] == {"kind": "indexed", "paths": ["/d/corpus_text_document"], "blend": None,
                            "split": "969,30,1", "cache_dir": None, "env_vars": []}
    assert plan["tokenizer"] == {"type": "byte", "path": None, "vocab_size": 257, "eod_id": 256}
    assert plan["checkpoint"] == {"save": "/ck", "interval": 6, "load": "auto", "keep_last": None, "async": False,
                                  "format": "torch_dist", "scheduler": "match"}
    assert args["--data-path"] == ["/d/corpus_text_document"] and args["--split"] == ["969,30,1"]
    assert "--mock-data" not in args
    assert args["--tokenizer-type"] == ["NullTokenizer"] and args["--null-tokenizer-eod-id"] == ["256"]
    assert args["--vocab-size"] == args["--padded-vocab-size"] == ["384"]
    assert args["--save"] == ["/ck"] and args["--save-interval"] == ["6"] and args["--load"] == ["/ck"]
    assert args["--exit-signal-handler"] == [] and args["--exit-signal"] == ["SIGUSR1"]
    assert args["--train-iters"] == ["12"] and args["--eval-interval"] == ["12"] and args["--eval-iters"] == ["0"]
    assert not [n for n in notes if n.startswith(("kind=", "entrypoint=", "save", "split"))]


def test_the_cli_compiles_it_with_list_overrides(tmp_path):
    sets = [a for s in REAL for a in ("--set", s)]
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(tmp_path),
                           *sets], cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "tiny-moe" / "cpu" / "megatron-lm.args").read_text()
    argv = [t for line in text.splitlines() if not line.startswith("#") for t in shlex.split(line)]
    assert argv[argv.index("--data-path") + 1] == "/d/corpus_text_document"
    plan = json.loads((tmp_path / "tiny-moe" / "cpu" / "plan.json").read_text())
    assert plan["data"]["kind"] == "indexed" and plan["checkpoint"]["save"] == "/ck"


def test_a_blend_env_vars_a_warmup_fraction_and_the_rest():
    sets = REAL[:5] + ["checkpoint.save=${CKPT_ROOT}/run", "checkpoint.interval=6", "checkpoint.keep_last=2",
                       "data.cache_dir=${SCRATCH}/cache", "schedule.warmup=0.1", "schedule.decay=wsd",
                       "schedule.wsd_decay_iters=2", "schedule.wsd_decay_style=linear", "schedule.min_lr=1e-5",
                       "logging.tensorboard=/tb",
                       "logging.wandb=moe", "logging.interval=1", "eval.interval=5", "eval.iters=2",
                       "tokenizer.type=huggingface", "tokenizer.path=${HF_HOME}/tok", "checkpoint.load=none"]
    r = resolve(load("tiny-moe/cpu", sets))
    [warning] = [d for d in r.diagnostics if d.code == "PATH_ENV_VARS_RESOLVED_AT_LAUNCH"]
    assert "SCRATCH, HF_HOME, CKPT_ROOT" in warning.message
    plan = build(r)
    assert plan["data"]["cache_dir"] == "${SCRATCH}/cache" and plan["data"]["env_vars"] == ["SCRATCH"]
    assert plan["schedule"] == {"decay": "wsd", "warmup_iters": None, "warmup_fraction": 0.1, "decay_iters": None,
                                "wsd_decay_iters": 2, "wsd_decay_style": "linear"}
    assert plan["tokenizer"] == {"type": "huggingface", "path": "${HF_HOME}/tok", "vocab_size": None, "eod_id": None}
    assert plan["logging"] == {"interval": 1, "tensorboard": "/tb", "wandb_project": "moe"}
    args, notes = arguments(plan)
    args = dict(args)
    assert args["--tokenizer-type"] == ["HuggingFaceTokenizer"] and args["--tokenizer-model"] == ["${HF_HOME}/tok"]
    assert "--null-tokenizer-eod-id" not in args and "--load" not in args
    assert args["--save"] == ["${CKPT_ROOT}/run"] and args["--data-cache-path"] == ["${SCRATCH}/cache"]
    assert args["--lr-decay-style"] == ["WSD"] and args["--lr-wsd-decay-iters"] == ["2"]
    assert args["--lr-wsd-decay-style"] == ["linear"]
    assert args["--lr-warmup-fraction"] == ["0.1"] and "--lr-warmup-iters" not in args
    assert args["--min-lr"] == ["1e-05"] and args["--log-interval"] == ["1"]
    assert args["--tensorboard-dir"] == ["/tb"] and args["--wandb-project"] == ["moe"]
    assert args["--eval-interval"] == ["5"] and args["--eval-iters"] == ["2"]
    assert any(n.startswith("keep_last=2: Megatron-LM has no flag") and "moeforge.runtime.megatron prunes" in n for n in notes)
    overrides = dict(bridge_overrides(plan)[0])
    assert overrides["checkpoint.most_recent_k"] == "2" and overrides["scheduler.lr_decay_style"] == '"WSD"'
    assert overrides["scheduler.lr_warmup_fraction"] == "0.1" and overrides["scheduler.lr_warmup_iters"] == "0"
    assert overrides["scheduler.lr_wsd_decay_style"] == '"linear"'
    # Bridge reads a ${VAR} from the environment as OmegaConf's resolver (a bare ${VAR} is an interpolation)
    assert overrides["tokenizer.tokenizer_model"] == '"${oc.env:HF_HOME}/tok"'
    assert overrides["checkpoint.save"] == '"${oc.env:CKPT_ROOT}/run"'


def test_blend_is_megatron_lms_weighted_data_path(tmp_path):
    import shutil

    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    (root / "tiny-moe" / "blend.yaml").write_text(
        "schema: moeforge/recipe/v3\nrevision: 1\nextends: cpu.yaml\nname: blend\n"
        "runtime: {entrypoint: megatron-lm}\n"
        "data: {kind: indexed, split: '98,1,1', blend: [{weight: 0.7, path: /d/web}, {weight: 0.3, path: /d/code}]}\n")
    plan = build(resolve(load("tiny-moe/blend", ["platform.software.megatron_core=0.19.2"], root)))
    assert plan["data"]["blend"] == [{"weight": 0.7, "path": "/d/web"}, {"weight": 0.3, "path": "/d/code"}]
    args = dict(arguments(plan)[0])
    assert args["--data-path"] == ["0.7", "/d/web", "0.3", "/d/code"] and args["--split"] == ["98,1,1"]
    assert dict(bridge_overrides(plan)[0])["dataset.data_path"] == '["0.7", "/d/web", "0.3", "/d/code"]'


def test_async_checkpoints_bring_the_persistent_worker():
    sets = ["runtime.entrypoint=megatron-lm", "data.kind=mock", "checkpoint.save=/ck", "checkpoint.interval=100",
            "checkpoint.async=true"]
    plan, args, _ = compiled("qwen3-30b-a3b/h100-bf16", sets)
    assert args["--async-save"] == [] and args["--use-persistent-ckpt-worker"] == []
    assert plan["platform"]["distributed_backend"] == "nccl" and "--distributed-backend" not in args  # the default


@pytest.mark.parametrize("scheduler, flag", [("match", None), ("plan", "--override-opt-param-scheduler"),
                                             ("checkpoint", "--use-checkpoint-opt-param-scheduler")])
def test_the_schedule_on_resume_is_one_of_megatron_lms_two_switches(scheduler, flag):
    """checkpoint.scheduler (issue 42): plan trains on with the plan's schedule (a longer run), checkpoint keeps the
    checkpoint's; match is Megatron-LM's default (neither switch: a changed schedule is refused)."""
    plan, args, notes = compiled("tiny-moe/cpu", [*REAL, f"checkpoint.scheduler={scheduler}"])
    assert plan["checkpoint"]["scheduler"] == scheduler
    switches = {f for f in args if "opt-param-scheduler" in f}
    assert switches == ({flag} if flag else set()) and not [n for n in notes if "scheduler" in n]
    bridge = dict(bridge_overrides(plan)[0])
    assert {k: v for k, v in bridge.items() if "opt_param_scheduler" in k} == {
        "scheduler.override_opt_param_scheduler": json.dumps(scheduler == "plan"),
        "scheduler.use_checkpoint_opt_param_scheduler": json.dumps(scheduler == "checkpoint")}


def test_every_training_io_value_is_a_knob_row_with_real_megatron_names():
    """One row each: the plan's training-I/O keys, their Megatron-LM dests (in Megatron-LM's own parser) and
    their Megatron-Bridge paths (a ConfigContainer section)."""
    from moeforge.compiler.lint.frontends import BRIDGE_SECTIONS

    plan = build(resolve(load("tiny-moe/cpu", REAL)))
    rows = {(k.section, k.name_for(0)): k for k in K.KNOBS if k.section in K.IO_SECTIONS}
    for section in K.IO_SECTIONS:
        keys = ["entrypoint"] if section == "runtime" else [k for k in plan[section] if k != "env_vars"]
        for key in keys:
            assert (section, key) in rows, f"plan.{section}.{key} has no knob row"
    dests = {e["dest"] for e in lm_parser()["options"].values()}
    for k in list(K.KNOBS) + list(K.FACTS):
        for dest in k.lm_dests(0) if k.lm is not None else ():
            if k.section in K.IO_SECTIONS or k.field in ("padded_vocab_size", "vocab_size", "use_persistent_ckpt_worker",
                                                         "exit_signal_handler", "exit_signal", "distributed_backend",
                                                         "min_lr", "adam_beta1", "adam_beta2", "adam_eps"):
                assert dest in dests, f"{k.field}: Megatron-LM has no argument {dest}"
        for path in k.bridge_paths:
            assert path.split(".")[0] in BRIDGE_SECTIONS, f"{k.field}: {path}"


def test_launch_settings_defaults():
    tiny = load("tiny-moe/cpu").data
    assert launch_settings(tiny, "tiny-moe-cpu") == {"logs_dir": "logs/tiny-moe-cpu", "signal_margin_s": 120,
                                                    "exclusive": False}
    gpu = load("qwen3-30b-a3b/h100-bf16", ["launch.logs_dir=/scratch/logs", "launch.signal_margin_s=300"]).data
    assert launch_settings(gpu, "q") == {"logs_dir": "/scratch/logs", "signal_margin_s": 300, "exclusive": True}


@pytest.mark.parametrize("recipe", ["tiny-moe/cpu", "qwen3-30b-a3b/h100-bf16"])
def test_megatron_lm_args_only_use_flags_of_the_platforms_release(recipe):
    from moeforge.compiler.targets.megatron_args import flag_tables, release_for

    plan, args, _ = compiled(recipe)
    known = flag_tables()[release_for(plan["platform"]["software"]["megatron_core"])]
    assert set(args) <= set(known)


def _overrides(plan) -> dict:
    return dict(bridge_overrides(plan)[0])


def test_ddp_and_optimizer_fields_are_stated_for_every_front_end():
    """The plan states the DDP and optimizer fields that Megatron-LM derives from its arguments and Bridge recipes
    set on their own, so the runtime, megatron-lm.args and bridge.overrides agree (the judges compare every field
    of both configs): the NaN check, aligned param gathers on the interleaved schedule, the DDP's copy of delayed
    wgrad, the optimizer's copy of param-gather overlap, FP8 parameters, and the FP32 optimizer where the recipe
    asks for no other (DeepSeek-V3's Bridge recipe turns the precision-aware optimizer on with BF16 moments)."""
    plan, args, notes = compiled("deepseek-v3/h100-bf16")   # PP8 VP4, overlapped param gathers
    ddp, opt, over = plan["ddp_config"], plan["optimizer"], _overrides(plan)
    assert ddp["align_param_gather"] is True and over["ddp.align_param_gather"] == "true"
    assert any(n.startswith("align_param_gather=true: Megatron-LM derives it") for n in notes)
    assert ddp["check_for_nan_in_grad"] is True and "--no-check-for-nan-in-loss-and-grad" not in args
    assert opt["overlap_param_gather"] == ddp["overlap_param_gather"]
    assert opt["use_precision_aware_optimizer"] is False and over["optimizer.use_precision_aware_optimizer"] == "false"
    for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        assert opt[name] == "float32" and over[f"optimizer.{name}"] == "{_target_:torch.float32,_call_:false}"
        assert f"--{name.replace('_', '-')}" not in args   # Megatron-LM's default fp32
    assert ddp["average_in_collective"] is False and over["ddp.average_in_collective"] == "false"
    # Bridge's scheduler sets every step's weight decay (its own default 0.033): the plan's, constant
    assert over["scheduler.start_weight_decay"] == over["scheduler.end_weight_decay"] == over["optimizer.weight_decay"]
    assert over["scheduler.weight_decay_incr_style"] == '"constant"' and over["scheduler.lr_warmup_init"] == "0.0"

    plan, args, _ = compiled("qwen3-30b-a3b/h100-bf16", ["moe.overlap.delay_wgrad=true"])
    assert plan["ddp_config"]["delay_wgrad_compute"] is plan["transformer_config"]["delay_wgrad_compute"] is True
    assert plan["ddp_config"]["align_param_gather"] is False   # PP1: no interleaving

    plan, args, _ = compiled("deepseek-v3/b200-bf16", ["cuda_graph.impl=full_iteration", "cuda_graph.modules=[]"])
    over = _overrides(plan)
    assert plan["ddp_config"]["check_for_nan_in_grad"] is False and "--no-check-for-nan-in-loss-and-grad" in args
    assert over["ddp.check_for_nan_in_grad"] == over["rerun_state_machine.check_for_nan_in_loss"] == "false"

    plan, args, _ = compiled("qwen3-next-80b-a3b/h100-bf16", ["precision.fp8=e4m3", "precision.fp8_param=true"])
    assert plan["ddp_config"]["fp8_param_gather"] is True and "--fp8-param-gather" in args
    assert plan["optimizer"]["fp8_recipe"] == plan["transformer_config"]["fp8_recipe"]


def test_precision_aware_optimizer_is_a_recipe_setting():
    """optimizer.precision_aware and the optimizer's dtypes (Megatron-Bridge's DeepSeek-V3 recipe: BF16 main grads
    and moments) reach OptimizerConfig, Megatron-LM's flags and Bridge's optimizer; the FP8 recipe the optimizer then
    reads (TE or megatron-core keeps the master weights) is stated, since Bridge's own default (tensorwise) is not
    Megatron-LM's (delayed)."""
    sets = ["optimizer.precision_aware=true", "optimizer.main_grads_dtype=bfloat16", "optimizer.exp_avg_dtype=bfloat16",
            "optimizer.exp_avg_sq_dtype=bfloat16"]
    plan, args, _ = compiled("deepseek-v3/h100-bf16", sets)
    opt, over = plan["optimizer"], _overrides(plan)
    assert opt["use_precision_aware_optimizer"] is True and "--use-precision-aware-optimizer" in args
    assert args["--main-grads-dtype"] == args["--exp-avg-dtype"] == args["--exp-avg-sq-dtype"] == ["bf16"]
    assert "--main-params-dtype" not in args and opt["main_params_dtype"] == "float32"
    assert over["optimizer.exp_avg_dtype"] == "{_target_:torch.bfloat16,_call_:false}"
    assert opt["fp8_recipe"] == plan["transformer_config"]["fp8_recipe"] == "delayed"
    assert over["++mixed_precision.fp8_recipe"] == '"delayed"'
    # without it (and without FP8) nothing reads the recipe: the plan does not state it
    plan, _, _ = compiled("deepseek-v3/h100-bf16")
    assert "fp8_recipe" not in plan["optimizer"] and "fp8_recipe" not in plan["transformer_config"]


def test_weight_decay_on_qk_layernorm_is_a_recipe_setting():
    """schedule.apply_wd_to_qk_layernorm reaches OptimizerConfig, --apply-wd-to-qk-layernorm and Bridge's optimizer;
    the Qwen3-Next recipes set it, as Megatron-Bridge's qwen3_next recipes do."""
    plan, args, _ = compiled("qwen3-next-80b-a3b/b200-bf16")
    assert plan["optimizer"]["apply_wd_to_qk_layernorm"] is True and "--apply-wd-to-qk-layernorm" in args
    assert _overrides(plan)["optimizer.apply_wd_to_qk_layernorm"] == "true"
    plan, args, _ = compiled("qwen3-30b-a3b/h100-bf16")
    assert plan["optimizer"]["apply_wd_to_qk_layernorm"] is False and "--apply-wd-to-qk-layernorm" not in args


def test_the_default_activation_is_stated_for_bridge():
    """A model document that names no activation runs megatron-core's GELU, not gated; the plan states it and
    bridge.overrides write it, so a Bridge recipe's own SwiGLU (Qwen's, DeepSeek's) does not stand in."""
    plan, args, _ = compiled("tiny-moe/cpu")
    assert (plan["transformer_config"]["activation_func"], plan["transformer_config"]["gated_linear_unit"]) == \
        ("gelu", False)
    over = _overrides(plan)
    assert over["model.activation_func"] == '"gelu"' and over["model.gated_linear_unit"] == "false"
    assert "--swiglu" not in args
