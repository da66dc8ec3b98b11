"""Megatron-LM pretrain_gpt.py arguments for a plan, per megatron-core version.

A plan field becomes `--field-name` unless RENAMES says otherwise, and only if that flag
exists in the Megatron-LM release matching the platform (compiler/data/megatron_lm_flags.json,
read from Megatron-LM's own argument parser at core_v0.16.1 and core_v0.19.0). Whether a
boolean is written depends on the flag's argparse action (store_true / store_false), so the
table never encodes a flag's polarity by hand.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from .rules.expr import version_int

DATA = Path(__file__).resolve().parent / "data" / "megatron_lm_flags.json"

# plan field -> flag, where Megatron-LM does not spell it --field-name
RENAMES = {
    "virtual_pipeline_model_parallel_size": "--num-virtual-stages-per-pipeline-rank",
    "num_moe_experts": "--num-experts",
    "fp8": "--fp8-format",
    "fp4": "--fp4-format",
    "add_bias_linear": "--disable-bias-linear",
    "gradient_accumulation_fusion": "--no-gradient-accumulation-fusion",
    "overlap_p2p_comm": "--no-overlap-p2p-communication",
    "max_sequence_length": "--max-position-embeddings",
    "share_embeddings_and_output_weights": "--untie-embeddings-and-output-weights",
    "micro_batch_size": "--micro-batch-size", "global_batch_size": "--global-batch-size",
    "train_iters": "--train-iters",
    "num_layers_in_first_pipeline_stage": "--decoder-first-pipeline-num-layers",
    "num_layers_in_last_pipeline_stage": "--decoder-last-pipeline-num-layers",
}
INVERTED = {"share_embeddings_and_output_weights"}   # the flag says the opposite of the field
SKIP = {"params_dtype", "pipeline_dtype", "activation_func", "gated_linear_unit", "batch_p2p_comm",
        "num_microbatches", "data", "report_window", "grad_reduce_in_fp32", "bucket_size", "optimizer",
        "weight_decay", "clip_grad", "num_query_groups", "normalization", "position_embedding_type"}


@lru_cache(maxsize=1)
def flag_tables() -> dict:
    return {k: v for k, v in json.loads(DATA.read_text()).items() if not k.startswith("_")}


def release_for(mcore: str) -> str:
    """The Megatron-LM release whose flags apply: 0.16.1 before 0.17, else 0.19.0."""
    return "0.16.1" if version_int(mcore) < version_int("0.17.0") else "0.19.0"


def _flag_for(field: str) -> str:
    return RENAMES.get(field, "--" + field.replace("_", "-"))


def _layer_freq(value) -> str:
    if not isinstance(value, list):
        return str(value)
    runs, out = [], []
    for v in value:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    for v, n in runs:
        out.append(f"[{v}]*{n}")
    return "(" + "+".join(out) + ")"


def arguments(plan: dict) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(flag, values) pairs for pretrain_gpt.py, and the plan fields Megatron-LM cannot take."""
    release = release_for(plan["platform"]["software"]["megatron_core"])
    table = flag_tables()[release]
    tc, model, training = plan["transformer_config"], plan["model"], plan["training"]
    fields = {**tc, **model, **plan["ddp_config"], **{k: training[k] for k in (
        "micro_batch_size", "global_batch_size", "seq_length", "train_iters", "seed")}, "lr": plan["optimizer"]["lr"]}
    out, missing = [], []
    for field, value in fields.items():
        if field in SKIP or value is None:
            continue
        flag = _flag_for(field)
        kind = table.get(flag)
        if kind is None:
            missing.append(f"{field}={json.dumps(value)}")
            continue
        if field in INVERTED:
            value = not value
        if kind == "store_true":
            if value:
                out.append((flag, []))
        elif kind == "store_false":
            if value is False:
                out.append((flag, []))
        elif kind == "list":
            items = value if isinstance(value, list) else [value]
            if items:
                out.append((flag, [str(v) for v in items]))
        else:
            out.append((flag, [_layer_freq(value) if field == "moe_layer_freq" else _scalar(value)]))
    out += _derived(tc, table)
    return out, missing


def _derived(tc: dict, table: dict) -> list[tuple[str, list[str]]]:
    """Flags that stand for a combination of fields, and the mock-pretraining data path."""
    out = []
    if tc.get("gated_linear_unit") and tc.get("activation_func") == "silu":
        out.append(("--swiglu", []))
    heads, groups = tc.get("num_attention_heads"), tc.get("num_query_groups")
    if groups and heads and groups < heads:
        out += [("--group-query-attention", []), ("--num-query-groups", [str(groups)])]
    if tc.get("normalization"):
        out.append(("--normalization", [tc["normalization"]]))
    out += [("--mock-data", []), ("--tokenizer-type", ["NullTokenizer"])]
    return [(f, v) for f, v in out if f in table]


def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def bridge_overrides(plan: dict) -> list[tuple[str, str]]:
    """Megatron-Bridge overrides (Hydra-style key=value) from the flag table's Bridge paths."""
    from .flags import TABLE

    tc = plan["transformer_config"]
    sections = {"ddp": plan["ddp_config"], "training": plan["training"], "optimizer": plan["optimizer"]}
    # model fields keep the name this megatron-core release gives them; others move (comm_overlap.*)
    by_tc_name = {name: t.bridge for t in TABLE.values() if t.section == "tc" and not t.bridge.startswith("model.")
                  for _, name in t.tc}
    out = [(by_tc_name.get(field) or f"model.{field}", json.dumps(value)) for field, value in tc.items()
           if field not in ("params_dtype", "pipeline_dtype", "activation_func")]
    out += [(t.bridge, json.dumps(sections[t.section][field])) for field, t in TABLE.items()
            if t.section in sections and field in sections[t.section]]
    return sorted(set(out))
