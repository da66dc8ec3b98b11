"""Judge: do Megatron-Bridge's own recipe + bridge.overrides + Bridge's validation give the plan?

Run under .venv312 (megatron-bridge 0.6.2, megatron-core 0.19.2):
    .venv312/bin/python tests/fidelity/bridge_judge.py build/<recipe> ... [--json]

For each build dir: build Bridge's own pretrain recipe for the model (RECIPES; for a model it has no
recipe for, its plain GPT recipe, or DeepSeek-V3's when the plan has MLA, as bridge.overrides says), apply the
bridge.overrides lines with Bridge's own applier (training.utils.omegaconf_utils.
process_config_with_overrides: Hydra syntax, struct mode, so an unknown key is refused the way
Bridge's scripts refuse it), run what Bridge's pretrain() runs before it builds anything
(config.runtime_config_update: the recipe's environment defaults, MixedPrecisionConfig.setup and
CommOverlapConfig.setup when present, which overwrite model / optimizer / DDP fields, then
ConfigContainer.validate(), which finalizes the provider), and compare every TransformerConfig field
of the provider with the config the plan implies, plus GPTModel, YaRN, training / optimizer / DDP
values (FIELD_MAP), and every field of the validated DDP and optimizer configs against the ones
runtime/train/ builds from the plan (judgelib.compare_training_configs).

What is stubbed, and why (no GPU, no network, no Transformer Engine here):
  - Bridge 0.6.2 imports transformer_engine.pytorch unconditionally in peft/lora_layers.py and
    models/gpt_full_te_layer_autocast_spec.py (LoRA adapters, a TE layer spec; neither is used to
    build or validate a pretrain config). Those two Bridge modules are replaced by empty
    placeholders so TE stays absent (megatron-core's HAVE_TE checks stay honest).
  - the recipes call AutoBridge.from_hf_pretrained(<HF id>): the model's public config.json is
    read from tests/fidelity/hf_configs/ instead of the Hub.
  - GPU / TE availability probes answer from plan.platform (judgelib.emulate_platform).
  - megatron-core's OptimizerConfig checks that TE's FusedAdam takes the precision-aware
    arguments when the recipe uses use_precision_aware_optimizer: a FusedAdam signature (the platform's
    TE) is provided as transformer_engine.pytorch.optimizers, inserted only after every megatron
    module has been imported, with nothing else in it (judgelib.te_fused_adam_signature).
  - ConfigContainer.validate reads the world size from torch.distributed when initialised, else
    from WORLD_SIZE; it is set to the plan's world size.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import judgelib as jl  # noqa: E402

# model name -> (HF id, Bridge recipe function). Bridge 0.6.2's H100 pretrain recipes: the
# overrides set parallelism, dispatcher and overlap for the target platform.
RECIPES = {
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B",
                      "megatron.bridge.recipes.qwen.h100.qwen3_moe:qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B",
                        "megatron.bridge.recipes.qwen.h100.qwen3_moe:qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3",
                    "megatron.bridge.recipes.deepseek.h100.deepseek_v3:deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config"),
    "qwen3-next-80b-a3b": ("Qwen/Qwen3-Next-80B-A3B-Instruct",
                           "megatron.bridge.recipes.qwen.h100.qwen3_next:qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config"),
    "gpt-oss-120b": ("openai/gpt-oss-120b",
                     "megatron.bridge.recipes.gpt_oss.h100.gpt_oss:gpt_oss_120b_pretrain_64gpu_h100_bf16_config"),
}

# Models Bridge ships no recipe for (the CPU test model, models outside the catalogue) start from its plain GPT
# pretrain recipe: the overrides state every model field, so the starting point only supplies the training
# scaffolding. An MLA model starts from an MLA provider's recipe (DeepSeek-V3's), as bridge.overrides' header says.
FALLBACK_RECIPE = "megatron.bridge.recipes.gpt.h100.vanilla_gpt:vanilla_gpt_pretrain_1gpu_h100_bf16_config"
MLA_FALLBACK_MODEL = "deepseek-v3"

# Provider fields that legitimately differ from the plan. Keep it short; each needs a reason.
LAUNCH_ONLY_EXCEPTIONS = {
    "inference_sampling_seed": "inference-only sampling seed; the plan's seed is compared as rng.seed",
    "deallocate_pipeline_outputs": "GPTModelProvider defaults it True, as Megatron-LM hard-codes it (see "
    "megatron_lm_judge): frees pipeline output tensors early in the schedule, no effect on the math",
    "hetereogenous_dist_checkpoint": "Bridge's Qwen3-Next provider sets it: the layout of distributed "
    "checkpoints of heterogeneous layers, read only when a checkpoint is saved or loaded",
}
NOT_COMPARABLE = {"init_method", "output_layer_init_method", "embedding_init_method"}

# (plan section, key, attribute path in the ConfigContainer): plan values outside the provider's
# TransformerConfig fields, and TransformerConfig values megatron-core also reads from another config.
FIELD_MAP = (
    ("model", "position_embedding_type", "model.position_embedding_type"),
    ("model", "rotary_base", "model.rotary_base"),
    ("model", "rotary_percent", "model.rotary_percent"),
    ("model", "vocab_size", "model.vocab_size"),
    ("model", "share_embeddings_and_output_weights", "model.share_embeddings_and_output_weights"),
    ("training", "seq_length", "model.seq_length"),
    ("training", "global_batch_size", "train.global_batch_size"),
    ("training", "micro_batch_size", "train.micro_batch_size"),
    ("training", "train_iters", "train.train_iters"),
    ("training", "seed", "rng.seed"),
    ("optimizer", "lr", "optimizer.lr"),
    ("optimizer", "weight_decay", "optimizer.weight_decay"),
    ("optimizer", "clip_grad", "optimizer.clip_grad"),
    ("optimizer", "optimizer", "optimizer.optimizer"),
    ("optimizer", "use_distributed_optimizer", "optimizer.use_distributed_optimizer"),
    ("ddp_config", "grad_reduce_in_fp32", "ddp.grad_reduce_in_fp32"),
    ("ddp_config", "overlap_grad_reduce", "ddp.overlap_grad_reduce"),
    ("ddp_config", "overlap_param_gather", "ddp.overlap_param_gather"),
    ("ddp_config", "overlap_param_gather", "optimizer.overlap_param_gather"),
    ("ddp_config", "use_distributed_optimizer", "ddp.use_distributed_optimizer"),
    ("ddp_config", "bucket_size", "ddp.bucket_size"),
    ("transformer_config", "delay_wgrad_compute", "ddp.delay_wgrad_compute"),
    ("transformer_config", "use_te_rng_tracker", "rng.te_rng_tracker"),
    ("transformer_config", "bf16", "optimizer.bf16"),
    ("transformer_config", "fp16", "optimizer.fp16"),
    ("transformer_config", "params_dtype", "optimizer.params_dtype"),
) + tuple(("config_attributes", f"yarn_{k}", f"model.yarn_{k}") for k in (
    "rotary_scaling_factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
    "mscale_all_dim", "correction_range_round_to_int"))


def _placeholder_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {})

    mod.__getattr__ = __getattr__
    return mod


def install_te_free_bridge() -> None:
    """Let megatron.bridge import without Transformer Engine: megatron-core first (its TE probes see no
    TE), then placeholders for the two Bridge modules that import TE unconditionally (module docstring).
    Shared with tests/lint/frontend_judge.py."""
    with jl.quiet():
        import megatron.core  # noqa: F401

        for name in ("megatron.bridge.peft.lora_layers",
                     "megatron.bridge.models.gpt_full_te_layer_autocast_spec"):
            sys.modules.setdefault(name, _placeholder_module(name))


def import_bridge():
    """Import megatron.bridge without Transformer Engine (see the module docstring)."""
    install_te_free_bridge()
    with jl.quiet():
        import megatron.bridge
        from megatron.bridge import AutoBridge
        from megatron.bridge.training.utils import omegaconf_utils
        from megatron.bridge.training import config as bridge_config

    original = AutoBridge.from_hf_pretrained.__func__
    cache = Path(tempfile.mkdtemp(prefix="moeforge-hf-"))

    def from_hf_pretrained(cls, path, **kwargs):
        by_id = {hf_id: model for model, (hf_id, _) in RECIPES.items()}
        if str(path) in by_id:
            local = cache / by_id[str(path)]
            local.mkdir(exist_ok=True)
            cfg = json.loads((HERE / "hf_configs" / f"{by_id[str(path)]}.json").read_text())
            cfg.pop("_source", None)
            (local / "config.json").write_text(json.dumps(cfg))
            kwargs.pop("revision", None)
            path = local
        return original(cls, path, **kwargs)

    AutoBridge.from_hf_pretrained = classmethod(from_hf_pretrained)
    omegaconf_utils.runtime_config_update = bridge_config.runtime_config_update
    return omegaconf_utils


def read_overrides(path: Path) -> list[str]:
    return [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]


def dig(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part, "<absent>")
    return obj


def training_io_expected(plan: dict) -> dict:
    """The plan's training-I/O values where Megatron-Bridge's ConfigContainer holds them (after validate()),
    from the plan's own meaning: ConfigContainer path -> value."""
    lm = jl.training_io_expected(plan)
    data, tok, ckpt = plan["data"], plan["tokenizer"], plan["checkpoint"]
    out = {"dataset.data_path": lm["data_path"], "dataset.path_to_cache": data["cache_dir"],
           "tokenizer.tokenizer_type": lm["tokenizer_type"], "tokenizer.tokenizer_model": tok["path"],
           "tokenizer.vocab_size": tok["vocab_size"], "tokenizer.null_tokenizer_eod_id": tok["eod_id"],
           "checkpoint.most_recent_k": ckpt["keep_last"] if ckpt["keep_last"] is not None else -1,
           "validation.eval_interval": plan["eval"]["interval"], "validation.eval_iters": plan["eval"]["iters"],
           "dist.distributed_backend": lm["distributed_backend"],
           "train.exit_signal_handler": lm["exit_signal_handler"], "train.exit_signal": lm["exit_signal"]}
    if data["kind"] == "indexed":
        out["dataset.split"] = data["split"]
    for attr in ("save", "save_interval", "load", "async_save", "ckpt_format"):
        out[f"checkpoint.{attr}"] = lm[attr]
    for attr in ("lr_decay_style", "lr_warmup_iters", "lr_warmup_fraction", "lr_decay_iters", "lr_wsd_decay_iters",
                 "start_weight_decay", "end_weight_decay", "weight_decay_incr_style", "lr_warmup_init",
                 "lr_wsd_decay_style"):
        out[f"scheduler.{attr}"] = lm[attr]
    # decay_iters null means train_iters: Bridge's validate() writes it in (Megatron-LM computes it at run time)
    out["scheduler.lr_decay_iters"] = lm["lr_decay_iters"] or plan["training"]["train_iters"]
    for attr in ("min_lr", "adam_beta1", "adam_beta2", "adam_eps"):
        out[f"optimizer.{attr}"] = lm[attr]
    for attr in ("log_interval", "tensorboard_dir", "wandb_project"):
        out[f"logger.{attr}"] = lm[attr]
    return out


def judge_one(build_dir: Path, omegaconf_utils) -> dict:
    plan = jl.load_plan(build_dir)
    model = plan["recipe"]["id"].split("/")[0]
    verdict = {"recipe": plan["recipe"]["id"], "build_dir": str(build_dir), "judge": "megatron-bridge",
               "accepted": False, "error": None, "diffs": [], "notes": jl.emulate_platform(plan)}
    if model not in RECIPES and plan["transformer_config"].get("multi_latent_attention"):
        model = MLA_FALLBACK_MODEL
    module, func = (RECIPES[model][1] if model in RECIPES else FALLBACK_RECIPE).split(":")
    verdict["notes"].append(f"Bridge recipe: {module}.{func}")
    saved_env = dict(os.environ)
    os.environ.update({k: str(v["value"]) for k, v in plan.get("env", {}).items()})
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(plan["layout"]["world_size"]))
    overrides = read_overrides(Path(build_dir) / "bridge.overrides")
    # a recipe's ${VAR} reaches Bridge as ${oc.env:VAR}, resolved at launch: here each resolves to the recipe's
    # literal ${VAR} (OmegaConf does not interpolate a resolver's result), which the plan holds
    os.environ.update({name: f"${{{name}}}" for name in re.findall(r"\$\{oc\.env:(\w+)\}", " ".join(overrides))})
    stage = "recipe"
    try:
        with jl.quiet():
            cfg = getattr(importlib.import_module(module), func)()
            stage = "overrides"
            omegaconf_utils.process_config_with_overrides(cfg, cli_overrides=overrides)
            stage = "runtime_config_update"
            if plan["platform"].get("software", {}).get("transformer_engine"):
                jl.te_fused_adam_signature()
            omegaconf_utils.runtime_config_update(cfg)  # what pretrain() runs first
    except Exception as exc:  # noqa: BLE001 - Bridge's refusal is the finding
        msg = str(exc).strip().splitlines()
        verdict["error"] = f"{stage}: {type(exc).__name__}: {' '.join(msg)[:1500]}"
        return verdict
    finally:
        os.environ.clear()
        os.environ.update(saved_env)

    verdict["accepted"] = True
    verdict["diffs"] = jl.compare_config(plan, cfg.model, LAUNCH_ONLY_EXCEPTIONS, NOT_COMPARABLE)
    verdict["diffs"] += jl.compare_training_configs(plan, {"ddp": cfg.ddp, "optimizer": cfg.optimizer})
    for path, want in training_io_expected(plan).items():
        got = dig(cfg, path)
        if not jl.same(jl.norm(want), jl.norm(got)):
            verdict["diffs"].append({"field": f"training I/O {path}", "plan": jl.norm(want), "megatron": jl.norm(got),
                                     "stated_in_plan": True, "exception": None})
    for section, key, path in FIELD_MAP:
        if key not in (plan.get(section) or {}):
            continue
        want, got = plan[section][key], dig(cfg, path)
        if not jl.same(jl.norm(want), jl.norm(got)):
            verdict["diffs"].append({"field": f"{section}.{key} ({path})", "plan": jl.norm(want),
                                     "megatron": jl.norm(got), "stated_in_plan": True, "exception": None})
    return verdict


def judge(build_dirs: list[Path]) -> list[dict]:
    logging.disable(logging.WARNING)
    omegaconf_utils = import_bridge()
    return [judge_one(d, omegaconf_utils) for d in build_dirs]


if __name__ == "__main__":
    sys.exit(jl.main(judge, sys.argv[1:]))
