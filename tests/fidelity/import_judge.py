"""Judge: does `moeforge import` + `compile` of a Megatron-LM launch run what the launch runs?

Run under .venv312 (megatron-core 0.19.2 ships megatron/training):
    .venv312/bin/python tests/fidelity/import_judge.py SOURCE::BUILD_DIR ... [--json]

SOURCE is a functional-test model_config.yaml or a launch script. MODEL_ARGS become words the way Megatron-LM's own
runner makes them (tests/functional_tests/shell_test_utils/_run_training.sh, written out again here so that the
importer's reading is not judged by itself); a script's words are the ones bash itself hands pretrain_gpt.py
when it runs the script with stand-in launchers (bash_capture.py). Both argument lists, the launch's and the build's
megatron-lm.args, go through parse_args, validate_args and core_transformer_config_from_args, with the plan's
world size and GPU (judgelib.emulate_platform). The verdict lists (`megatron`: the launch's value, `plan`: the
import's) every TransformerConfig, DDP and optimizer
config field that differs, plus the vocabulary the model is built with and the training length and LR schedule,
counted in samples (a launch may count in samples, a recipe counts in iterations).
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import sys
from contextlib import redirect_stderr
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import judgelib as jl  # noqa: E402
from bash_capture import bash_words  # noqa: E402
from megatron_lm_judge import gpu_facts, read_args  # noqa: E402


def runner_words(source: Path) -> list[str]:
    """_run_training.sh: `true` is the bare flag, `[a b]` the words a b, any other value one word."""
    words = []
    for key, value in yaml.safe_load(source.read_text())["MODEL_ARGS"].items():
        text = str(value).strip()
        if value is True:
            words.append(key)
        elif value is False or value is None:
            continue
        elif re.fullmatch(r"\[[^]]+\]", text):
            words += [key, *text[1:-1].split()]
        else:
            words += [key, text]
    return words


def configs(argv: list[str], plan: dict):
    """(args, {section: config}) as Megatron-LM builds them from argv, or (None, error text)."""
    from megatron.core.tokenizers.utils.build_tokenizer import vocab_size_with_padding
    from megatron.training.argument_utils import core_transformer_config_from_args
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.training import get_megatron_ddp_config, get_megatron_optimizer_config

    saved_env, saved_argv = dict(os.environ), sys.argv
    os.environ.update({k: str(v["value"]) for k, v in plan.get("env", {}).items()})
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(plan["layout"]["world_size"]))
    sys.argv, stderr = ["pretrain_gpt.py", *argv], io.StringIO()
    try:
        with jl.quiet(), redirect_stderr(stderr):
            args = parse_args(ignore_unknown_args=False)
            validate_args(args)
            out = {"transformer": core_transformer_config_from_args(args), "ddp": get_megatron_ddp_config(args),
                   "optimizer": get_megatron_optimizer_config(args)[0]}
            if args.padded_vocab_size is None:  # what build_tokenizer sets before the model is built
                args.padded_vocab_size = vocab_size_with_padding(tokenizer_vocab(args), args, logging_enabled=False)
        return args, out
    except SystemExit as exc:
        return None, f"exit {exc.code}: {stderr.getvalue()[-500:]}"
    except Exception as exc:  # noqa: BLE001 - a refusal is the finding
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


def tokenizer_vocab(args) -> int:
    """The tokenizer's own vocabulary as Megatron-LM's build_tokenizer reads it: a Hugging Face tokenizer built by
    Megatron-LM itself; GPT-2 BPE files by transformers' GPT-2 tokenizer (Megatron-LM's would fetch the name `gpt2`
    from the Hub first); NullTokenizer's --vocab-size."""
    if args.tokenizer_type == "HuggingFaceTokenizer":
        from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer

        saved, args.pad_vocab_size = args.pad_vocab_size, False
        try:
            return build_tokenizer(args).vocab_size
        finally:
            args.pad_vocab_size = saved
    if args.tokenizer_type == "GPT2BPETokenizer":
        from transformers import GPT2TokenizerFast

        # transformers 5 takes the files as `vocab` / `merges` (vocab_file= is ignored, leaving an empty tokenizer)
        return len(GPT2TokenizerFast(vocab=args.vocab_file, merges=args.merge_file))
    return args.vocab_size


def source_words(source: Path) -> list[str]:
    if source.suffix == ".sh":
        runs = bash_words(source)
        if not runs:
            raise ValueError(f"bash ran no entry point in {source}")
        return runs[-1]
    return runner_words(source)


def in_samples(args) -> dict:
    """Training length and LR schedule in samples, as Megatron-LM's scheduler counts them."""
    gbs = args.global_batch_size
    train = args.train_samples if args.train_samples else args.train_iters * gbs
    if args.lr_decay_samples:
        decay = args.lr_decay_samples
    elif args.train_samples:  # training.py: a launch counted in samples decays over all of them
        decay = args.train_samples
    else:
        decay = (args.lr_decay_iters or args.train_iters or 0) * gbs
    if args.lr_warmup_fraction is not None:
        warmup = args.lr_warmup_fraction * decay
    else:
        warmup = args.lr_warmup_samples if args.lr_warmup_samples else args.lr_warmup_iters * gbs
    wsd = args.lr_wsd_decay_samples if args.train_samples else (args.lr_wsd_decay_iters or 0) * gbs
    return {"train samples": train, "LR decay samples": decay, "LR warm-up samples": warmup,
            "WSD decay samples": wsd or 0}


def judge_one(pair: str) -> dict:
    source, build_dir = (Path(p) for p in pair.split("::"))
    plan = jl.load_plan(build_dir)
    verdict = {"recipe": source.stem, "build_dir": pair, "judge": "import", "accepted": False, "error": None,
               "diffs": [], "notes": gpu_facts(plan)}
    if plan["platform"].get("software", {}).get("transformer_engine"):
        jl.te_fused_adam_signature()
    launch, ours = configs(source_words(source), plan), configs(read_args(build_dir / "megatron-lm.args"), plan)
    for who, (args, cfgs) in (("launch", launch), ("import", ours)):
        if args is None:
            verdict["error"] = f"Megatron-LM refuses the {who}: {cfgs}"
            return verdict
    verdict["accepted"] = True
    diffs = verdict["diffs"]
    for section, cfg in launch[1].items():
        for f in dataclasses.fields(cfg):
            a, b = getattr(cfg, f.name, None), getattr(ours[1][section], f.name, None)
            if callable(a) or callable(b):  # init methods: their inputs are compared
                continue
            if not jl.same(jl.norm(a), jl.norm(b)):
                diffs.append({"field": f"{section}.{f.name}", "megatron": jl.norm(a), "plan": jl.norm(b)})
    gbs = launch[0].global_batch_size
    for name, a in in_samples(launch[0]).items():
        b = in_samples(ours[0])[name]
        if abs(a - b) >= gbs:  # a recipe counts whole iterations
            diffs.append({"field": name, "megatron": a, "plan": b})
    for attr in ("padded_vocab_size", "seq_length", "micro_batch_size", "global_batch_size", "lr", "min_lr",
                 "lr_decay_style", "data_parallel_size", "seed", "init_method_std"):
        a, b = getattr(launch[0], attr), getattr(ours[0], attr)
        if not jl.same(jl.norm(a), jl.norm(b)):
            diffs.append({"field": f"args.{attr}", "megatron": jl.norm(a), "plan": jl.norm(b)})
    return verdict


def judge(pairs: list) -> list[dict]:
    with jl.quiet():
        import megatron.training.arguments  # noqa: F401  (slow: ~6 s, once)
    return [judge_one(str(p)) for p in pairs]


if __name__ == "__main__":
    sys.exit(jl.main(judge, sys.argv[1:]))
