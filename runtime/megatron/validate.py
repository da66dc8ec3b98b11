"""What Megatron-LM parsed and validated from the args file, checked against the plan before step 1.

Why: Megatron-LM's validate_args() rewrites arguments silently; every rewrite is reported (report.json
``megatron_lm_rewrites``, an error under --strict when it changes a planned value), and the
TransformerConfig Megatron-LM derives must describe the plan's model (its MoE, overlap and shape
fields), else the job stops before anything is built.
"""

from __future__ import annotations

import copy
import os
import sys

from ..errors import ConfigRejected, RealisedMismatch, raised_at
from ..model import realised
from ..report import measure as report
from .args import ARGS_FILE

# TransformerConfig fields, beyond the plan's checked MoE/overlap fields, that fix the model's shape.
SHAPE_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                "kv_channels", "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk",
                "moe_shared_expert_intermediate_size", "tensor_model_parallel_size",
                "pipeline_model_parallel_size", "context_parallel_size")


def _planned(plan) -> dict:
    """Every plan value under its Megatron name (later sections never shadow the model's)."""
    out = {}
    for section in ("optimizer", "ddp_config", "training", "model", "transformer_config"):
        out.update(plan.section(section) or {})
    return out


def rewrites(before: dict, after: dict, plan) -> list[dict]:
    """What validate_args() changed, each with the plan's value where the plan states one."""
    planned = _planned(plan)
    out = []
    for key in sorted(set(before) & set(after)):
        if callable(before[key]) or callable(after[key]):
            continue
        old, new = realised.jsonable(before[key]), realised.jsonable(after[key])
        if old == new:
            continue
        entry = {"argument": key, "parsed": old, "validated": new}
        if key in planned:
            entry["plan"] = realised.jsonable(planned[key])
            entry["agrees_with_plan"] = entry["plan"] == entry["validated"]
        out.append(entry)
    return out


def config_differences(args, plan) -> list[str]:
    """Fields where the TransformerConfig Megatron-LM derives from its arguments differs from the plan."""
    from megatron.training.arguments import core_transformer_config_from_args

    try:
        derived = core_transformer_config_from_args(args)
    except (AssertionError, ValueError, TypeError, NotImplementedError) as exc:
        raise ConfigRejected(f"the TransformerConfig Megatron-LM derives from its arguments: "
                             f"{raised_at(exc)}") from None
    tc = plan.transformer_config
    fields = [f for f in (*plan.runtime.get("checked_fields", []), *SHAPE_FIELDS) if f in tc]
    diffs = []
    for field in dict.fromkeys(fields):
        ours, theirs = realised.jsonable(tc[field]), realised.jsonable(getattr(derived, field, None))
        if ours != theirs:
            diffs.append(f"{field}: plan {ours!r}, Megatron-LM {theirs!r}")
    vocab = plan.model.get("vocab_size")
    if vocab is not None and getattr(args, "padded_vocab_size", vocab) != vocab:
        diffs.append(f"vocab_size: plan {vocab}, Megatron-LM {args.padded_vocab_size} "
                     f"(its tokenizer's vocabulary padded to --make-vocab-size-divisible-by x TP)")
    return diffs


def megatron_lm_arguments(plan, argv: list[str], strict: bool):
    """(args, rewrites): Megatron-LM's parse_args + validate_args on ``argv``, set as its global
    arguments (tokenizer built), checked against the plan before anything is built."""
    from megatron.training import arguments as mlm_arguments
    from megatron.training import global_vars

    sys.argv = ["moeforge.runtime.megatron", *argv]
    try:
        args = mlm_arguments.parse_args(ignore_unknown_args=False)
    except SystemExit as exc:  # argparse already printed which argument
        raise ConfigRejected(f"Megatron-LM's argument parser refused {ARGS_FILE} (exit {exc.code}); "
                             f"see the message above") from None
    before = copy.copy(vars(args))
    try:
        mlm_arguments.validate_args(args, {})
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigRejected(f"Megatron-LM's validate_args: {raised_at(exc)}") from None
    global_vars.set_global_variables(args)
    changed = rewrites(before, vars(args), plan)
    differs = config_differences(args, plan)
    if differs:
        raise RealisedMismatch("Megatron-LM's arguments describe a different model than the plan: "
                               + "; ".join(differs))
    disagree = [c for c in changed if c.get("agrees_with_plan") is False]
    if strict and disagree:
        raise ConfigRejected("--strict: Megatron-LM rewrote planned values at start-up: " + ", ".join(
            f"{c['argument']} {c['plan']!r} -> {c['validated']!r}" for c in disagree))
    if int(os.environ.get("RANK", "0")) == 0:
        planned = [c for c in changed if "plan" in c]
        report.echo(f"Megatron-LM's validate_args set {len(changed)} argument(s) ("
                    f"{len(planned)} the plan states, {len(disagree)} differently; report.json "
                    f"megatron_lm_rewrites)" + (": " + ", ".join(
                        f"{c['argument']} {c['plan']!r} -> {c['validated']!r}" for c in disagree)
                        if disagree else ""))
    return args, changed
