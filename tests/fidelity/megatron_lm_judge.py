"""Judge: does Megatron-LM's own code accept megatron-lm.args and build the plan's model?

Run under .venv312 (megatron-core 0.19.2 ships megatron/training):
    .venv312/bin/python tests/fidelity/megatron_lm_judge.py build/<recipe> ... [--json]

For each build dir: parse_args() on the emitted flags (unknown flags refused, as pretrain_gpt.py
would), validate_args() with the plan's world size and environment (env.sh), then
core_transformer_config_from_args(), and compare every TransformerConfig field with the config
the plan implies (what runtime/model/build.py would build), plus the plan's model / training /
optimizer / DDP / layout values that map to Megatron-LM arguments, every field of the DDP and optimizer
configs its training loop builds (get_megatron_ddp_config / get_megatron_optimizer_config) against the ones
runtime/train/ builds from the plan (judgelib.compare_training_configs), the training-I/O values (data,
tokenizer, checkpoints, LR schedule, logging, evaluation, distributed backend: judgelib.
training_io_expected), the model's vocab as gpt_config_from_args builds it (after any padding), and a
NullTokenizer's end-of-document id as build_tokenizer makes it.

GPU facts: validate_args asks torch.cuda for the compute capability (grouped GEMM check) and
megatron for the device arch, and megatron-core asks for TE's version and fused kernels; there
is no GPU or TE here, so they answer from plan.platform (judgelib.emulate_platform). Nothing else
is stubbed but the signature of TE's FusedAdam, which megatron-core's OptimizerConfig checks for the
precision-aware optimizer (judgelib.te_fused_adam_signature); torch.distributed is never initialised.
"""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import judgelib as jl  # noqa: E402

# TransformerConfig fields that legitimately differ between a Megatron-LM launch and the plan.
# Keep this short; each entry needs a reason that holds for every recipe.
LAUNCH_ONLY_EXCEPTIONS = {
    "deallocate_pipeline_outputs": "core_transformer_config_from_args hard-codes True (no flag); "
    "it only frees pipeline output tensors early in Megatron-LM's schedule, no effect on the math",
    "inference_sampling_seed": "Megatron-LM copies --seed into it; only used by inference sampling "
    "(the plan's seed is compared as training.seed)",
    "config_logger_dir": "Megatron-LM's --config-logger-dir (debug logging path), launch-only",
}

# Fields that are functions built from other compared fields (init_method_std, num_layers):
# their identity cannot be compared, their inputs are.
NOT_COMPARABLE = {"init_method", "output_layer_init_method", "embedding_init_method"}

# plan section, key -> (Megatron-LM args attribute, transform of the args value)
ARG_MAP = {
    ("model", "position_embedding_type"): ("position_embedding_type", None),
    ("model", "rotary_base"): ("rotary_base", None),
    ("model", "max_sequence_length"): ("max_position_embeddings", None),
    ("model", "vocab_size"): ("vocab_size", None),
    ("model", "share_embeddings_and_output_weights"): ("untie_embeddings_and_output_weights", lambda v: not v),
    ("training", "global_batch_size"): ("global_batch_size", None),
    ("training", "micro_batch_size"): ("micro_batch_size", None),
    ("training", "seq_length"): ("seq_length", None),
    ("training", "train_iters"): ("train_iters", None),
    ("training", "seed"): ("seed", None),
    ("optimizer", "lr"): ("lr", None),
    ("optimizer", "weight_decay"): ("weight_decay", None),
    ("optimizer", "clip_grad"): ("clip_grad", None),
    ("optimizer", "optimizer"): ("optimizer", None),
    ("optimizer", "use_distributed_optimizer"): ("use_distributed_optimizer", None),
    ("ddp_config", "grad_reduce_in_fp32"): ("accumulate_allreduce_grads_in_fp32", None),
    ("ddp_config", "overlap_grad_reduce"): ("overlap_grad_reduce", None),
    ("ddp_config", "overlap_param_gather"): ("overlap_param_gather", None),
    ("ddp_config", "use_distributed_optimizer"): ("use_distributed_optimizer", None),
    ("ddp_config", "bucket_size"): ("ddp_bucket_size", None),
    ("layout", "tp"): ("tensor_model_parallel_size", None),
    ("layout", "pp"): ("pipeline_model_parallel_size", None),
    ("layout", "cp"): ("context_parallel_size", None),
    ("layout", "ep"): ("expert_model_parallel_size", None),
    ("layout", "etp"): ("expert_tensor_parallel_size", None),
    ("layout", "dp"): ("data_parallel_size", None),
    ("layout", "vpp"): ("virtual_pipeline_model_parallel_size", None),
    ("layout", "world_size"): ("world_size", None),
}


def read_args(path: Path) -> list[str]:
    """Flags from megatron-lm.args, read as moeforge.runtime.megatron reads them (one shell-word reader)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from moeforge.runtime.megatron.args import read_args_file

    return read_args_file(Path(path))


def gpu_facts(plan: dict) -> list[str]:
    """The platform's GPU and TE (judgelib.emulate_platform), plus megatron-LM's arch probe."""
    import megatron.training.arguments as margs

    notes = jl.emulate_platform(plan)
    cc = (plan["platform"].get("gpu") or {}).get("compute_capability", "0.0")
    margs.get_device_arch_version = lambda *a, **k: int(str(cc).split(".")[0])
    return notes


def judge_one(build_dir: Path) -> dict:
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.argument_utils import core_transformer_config_from_args

    plan = jl.load_plan(build_dir)
    verdict = {"recipe": plan["recipe"]["id"], "build_dir": str(build_dir), "judge": "megatron-lm",
               "accepted": False, "error": None, "diffs": [], "notes": gpu_facts(plan)}
    expected, unknown, err = jl.plan_expected(plan)
    if unknown:
        verdict["notes"].append(f"plan fields unknown to megatron-core 0.19.2: {unknown}")
    if err:
        verdict["notes"].append(f"megatron-core refuses the plan's own transformer_config: {err}")

    saved_env, saved_argv = dict(os.environ), sys.argv
    os.environ.update({k: str(v["value"]) for k, v in plan.get("env", {}).items()})
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(plan["layout"]["world_size"]))
    sys.argv = ["pretrain_gpt.py", *read_args(Path(build_dir) / "megatron-lm.args")]
    stage, stderr = "parse_args", io.StringIO()
    try:
        with jl.quiet(), redirect_stderr(stderr):
            args = parse_args(ignore_unknown_args=False)
            stage = "validate_args"
            validate_args(args)
            stage = "core_transformer_config_from_args"
            cfg = core_transformer_config_from_args(args)
    except SystemExit as exc:  # argparse: unknown flag / bad value
        lines = [l for l in stderr.getvalue().splitlines() if "error:" in l]
        verdict["error"] = f"{stage}: exit {exc.code}: " + (lines[-1] if lines else stderr.getvalue()[-500:])
        return verdict
    except Exception as exc:  # noqa: BLE001 - Megatron's refusal is the finding
        verdict["error"] = f"{stage}: {type(exc).__name__}: {exc}"
        return verdict
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv

    verdict["accepted"] = True
    # Megatron-LM keeps the TE RNG tracker switch in args.te_rng_tracker (RNGConfig,
    # --te-rng-tracker; initialize.py sets the tracker up from it) and never copies it into
    # TransformerConfig.use_te_rng_tracker, so that is where the launch's value lives.
    in_args = {"use_te_rng_tracker": args.te_rng_tracker}
    verdict["diffs"] = jl.compare_config(plan, cfg, LAUNCH_ONLY_EXCEPTIONS, NOT_COMPARABLE, in_args)
    for (section, key), (attr, fn) in ARG_MAP.items():
        if key not in plan.get(section, {}):
            continue
        want, got = plan[section][key], getattr(args, attr, "<absent>")
        got = fn(got) if fn and got != "<absent>" else got
        if not jl.same(jl.norm(want), jl.norm(got)):
            verdict["diffs"].append({"field": f"{section}.{key} (--{attr.replace('_', '-')})",
                                     "plan": jl.norm(want), "megatron": jl.norm(got),
                                     "stated_in_plan": True, "exception": None})
    for attr, want in jl.training_io_expected(plan).items():  # data, tokenizer, checkpoints, schedule, ...
        got = getattr(args, attr, "<absent>")
        if not jl.same(jl.norm(want), jl.norm(got)):
            verdict["diffs"].append({"field": f"training I/O --{attr.replace('_', '-')}", "plan": jl.norm(want),
                                     "megatron": jl.norm(got), "stated_in_plan": True, "exception": None})
    verdict["diffs"] += vocab_and_tokenizer(plan, args, cfg, verdict["notes"])
    verdict["diffs"] += jl.compare_training_configs(plan, megatron_training_configs(plan, args))
    return verdict


def megatron_training_configs(plan: dict, args) -> dict:
    """The DDP and optimizer configs Megatron-LM's training loop builds from its arguments (training.py
    get_megatron_ddp_config, get_megatron_optimizer_config)."""
    from megatron.training.training import get_megatron_ddp_config, get_megatron_optimizer_config

    if plan["platform"].get("software", {}).get("transformer_engine"):
        jl.te_fused_adam_signature()

    with jl.quiet():
        return {"ddp": get_megatron_ddp_config(args), "optimizer": get_megatron_optimizer_config(args)[0]}


def vocab_and_tokenizer(plan: dict, args, cfg, notes: list) -> list[dict]:
    """The model Megatron-LM builds has exactly the plan's vocab (its GPTModelConfig, padded the way
    build_tokenizer pads when --padded-vocab-size is absent), and a NullTokenizer (null / byte) has the plan's
    end-of-document id. A tokenizer with files (huggingface, sentencepiece) is not built here."""
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer, vocab_size_with_padding
    from megatron.training.argument_utils import gpt_config_from_args

    out = []
    with jl.quiet():
        model_cfg = gpt_config_from_args(args, cfg)
        built = model_cfg.vocab_size
        if model_cfg.should_pad_vocab:
            built = vocab_size_with_padding(built, args, logging_enabled=False)
            notes.append(f"Megatron-LM pads the vocabulary to {built}")
    if built != plan["model"]["vocab_size"]:
        out.append({"field": "model vocab (GPTModelConfig.vocab_size after padding)", "plan": plan["model"]["vocab_size"],
                    "megatron": built, "stated_in_plan": True, "exception": None})
    tok = plan["tokenizer"]
    if tok["type"] in (None, "byte"):
        with jl.quiet():
            eod = build_tokenizer(args).eod
        want = tok["eod_id"] if tok["eod_id"] is not None else args.vocab_size - 1  # NullTokenizer's own default
        if eod != want:
            out.append({"field": "tokenizer eod id (NullTokenizer)", "plan": want, "megatron": eod,
                        "stated_in_plan": True, "exception": None})
        if tok["type"] == "byte" and not 255 + 2 <= built:
            out.append({"field": "byte ids fit the embedding", "plan": 257, "megatron": built,
                        "stated_in_plan": True, "exception": None})
    return out


def judge(build_dirs: list[Path]) -> list[dict]:
    with jl.quiet():
        import megatron.training.arguments  # noqa: F401  (slow: ~6 s, once)
    return [judge_one(d) for d in build_dirs]


if __name__ == "__main__":
    sys.exit(jl.main(judge, sys.argv[1:]))
