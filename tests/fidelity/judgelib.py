"""Shared helpers for the fidelity judges (run under .venv312, Python 3.12).

Why: both judges compare "the TransformerConfig the plan implies" with what Megatron's own code
builds, and both must normalise representations the same way (torch dtypes vs strings, activation
callables vs names, enums, tuples) without hiding a real difference.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import json
import math
import os
import sys
import types
from pathlib import Path

DTYPE_FIELDS = ("params_dtype", "pipeline_dtype", "autocast_dtype")


def quiet():
    """Megatron prints a lot on stdout; the judges keep stdout for their JSON verdict."""
    return contextlib.redirect_stdout(sys.stderr)


def load_plan(build_dir: Path) -> dict:
    return json.loads((Path(build_dir) / "plan.json").read_text())


def activation_name(fn) -> str:
    """F.silu -> 'silu', megatron's squared_relu -> 'squared_relu' (partials unwrapped)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", repr(fn))


def norm(value):
    """A comparable, JSON-able form: dtype -> 'bfloat16', enum -> its value, tuple -> list."""
    import torch

    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, enum.Enum):
        return norm(value.value) if not isinstance(value.value, int) else value.name
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if isinstance(value, dict):
        return {str(k): norm(v) for k, v in value.items()}
    if callable(value):
        return f"<fn {activation_name(value)}>"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


MEGATRON_TOKENIZERS = {None: "NullTokenizer", "byte": "NullTokenizer", "huggingface": "HuggingFaceTokenizer",
                       "sentencepiece": "SentencePieceTokenizer"}


def data_path(plan: dict):
    """Megatron's --data-path list for the plan's data (None: no data path, mock data)."""
    data = plan["data"]
    if data["kind"] != "indexed":
        return None
    if data["blend"] is not None:
        return [str(v) for e in data["blend"] for v in (e["weight"], e["path"])]
    return list(data["paths"])


def training_io_expected(plan: dict) -> dict:
    """The plan's training-I/O values as Megatron-LM's arguments hold them after validate_args, worked out
    from the plan's own meaning (not from the compiler's emitter): attribute -> value."""
    data, tok, ckpt, sched = plan["data"], plan["tokenizer"], plan["checkpoint"], plan["schedule"]
    logging_, evals, opt = plan["logging"], plan["eval"], plan["optimizer"]
    saves = ckpt["save"] is not None
    load = {"auto": ckpt["save"], "none": None}.get(ckpt["load"], ckpt["load"])
    out = {
        "mock_data": data["kind"] != "indexed", "data_path": data_path(plan),
        "tokenizer_type": MEGATRON_TOKENIZERS[tok["type"]], "tokenizer_model": tok["path"],
        "null_tokenizer_eod_id": tok["eod_id"],
        "save": ckpt["save"], "save_interval": ckpt["interval"], "load": load, "async_save": ckpt["async"],
        "ckpt_format": ckpt["format"], "exit_signal_handler": saves, "exit_signal": "SIGUSR1" if saves else "SIGTERM",
        "lr_decay_style": {"wsd": "WSD"}.get(sched["decay"], sched["decay"]),
        "lr_warmup_iters": sched["warmup_iters"] or 0, "lr_warmup_fraction": sched["warmup_fraction"],
        "lr_decay_iters": sched["decay_iters"], "lr_wsd_decay_iters": sched["wsd_decay_iters"],
        "min_lr": opt["min_lr"], "adam_beta1": opt["adam_beta1"], "adam_beta2": opt["adam_beta2"],
        "adam_eps": opt["adam_eps"],
        # the scheduler sets every step's weight decay (OptimizerParamScheduler): one constant value, the plan's,
        # from a warmup that starts at zero
        "start_weight_decay": opt["weight_decay"], "end_weight_decay": opt["weight_decay"],
        "weight_decay_incr_style": "constant", "lr_warmup_init": 0.0,
        "lr_wsd_decay_style": sched["wsd_decay_style"],
        "log_interval": logging_["interval"], "tensorboard_dir": logging_["tensorboard"],
        "wandb_project": logging_["wandb_project"],
        # no evaluation: Megatron-LM still divides train_iters by eval_interval; eval_iters 0 evaluates nothing
        "eval_iters": evals["iters"], "eval_interval": evals["interval"] or plan["training"]["train_iters"],
        "distributed_backend": plan["platform"]["distributed_backend"],
    }
    if data["kind"] == "indexed":
        out["split"] = data["split"]
    return out


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    return a == b


def emulate_platform(plan: dict) -> list[str]:
    """Answer megatron's hardware/TE availability probes from plan.platform (returns notes).

    Why: Transformer Engine cannot be installed without CUDA, and megatron-core's config checks
    ask "is TE >= X installed?" and "are the fused permute kernels importable?". On the target
    platform they are (plan.platform.software.transformer_engine), so megatron-core's cached TE
    version is set to the platform's and the fused-permute / fused-RoPE handles to placeholders that are never
    called. torch.cuda.get_device_capability answers the platform's compute capability, and
    torch.cuda.get_device_properties its name, compute capability and memory (Bridge's flex-dispatcher check). No TE
    code runs; every other check runs unchanged.
    """
    import torch
    from packaging.version import Version

    import megatron.core.utils as mcu
    import megatron.core.transformer.moe.moe_utils as moe_utils

    notes = []
    gpu = plan["platform"].get("gpu") or {}
    cc = str(gpu.get("compute_capability", "0.0"))
    major, minor = (int(x) for x in cc.split("."))
    torch.cuda.get_device_capability = lambda *a, **k: (major, minor)
    # Bridge's flex-dispatcher check reads the device's name and major version
    props = types.SimpleNamespace(name=gpu.get("name", "none"), major=major, minor=minor,
                                  total_memory=int(gpu.get("memory_gb", 0)) * 2**30)
    torch.cuda.get_device_properties = lambda *a, **k: props
    te = plan["platform"].get("software", {}).get("transformer_engine")
    mcu._te_version = Version(str(te)) if te else Version("0.0.0")
    placeholder = (lambda *a, **k: (_ for _ in ()).throw(RuntimeError("TE placeholder"))) if te else None
    import megatron.core.models.common.embeddings.rope_utils as rope_utils

    for name in ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd"):
        setattr(rope_utils, name, placeholder)
    for name in ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
                 "fused_sort_chunks_by_index_with_probs", "fused_unpermute"):
        setattr(moe_utils, name, placeholder)
    if te:
        notes.append(f"emulated platform: compute capability {cc}, transformer-engine {te}")
    return notes


def config_class(plan: dict):
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    return MLATransformerConfig if plan["transformer_config"].get("multi_latent_attention") else TransformerConfig


def plan_kwargs(plan: dict) -> dict:
    """The plan's transformer_config as megatron-core kwargs, resolved the way runtime/model/build.py
    resolves them (dtype and activation strings, transformer_impl from plan.runtime)."""
    import torch
    import torch.nn.functional as F

    values = dict(plan["transformer_config"])
    for key in DTYPE_FIELDS:
        if isinstance(values.get(key), str):
            values[key] = getattr(torch, values[key])
    act = values.get("activation_func")
    if isinstance(act, str):
        if act == "squared_relu":
            from megatron.core.activations import squared_relu as fn
        elif act == "quick_gelu":
            from megatron.core.fusions.fused_bias_geglu import quick_gelu as fn
        else:
            fn = getattr(F, act)
        values["activation_func"] = fn
    values.setdefault("transformer_impl", plan.get("runtime", {}).get("transformer_impl", "local"))
    return values


def plan_expected(plan: dict) -> tuple[dict, list[str], str | None]:
    """(every field of the config class -> the value the plan implies, plan fields the class
    lacks, error constructing it). Stated fields come from the plan; unstated ones are what the
    runtime would get: megatron-core's default after __post_init__ (construction is attempted
    first; if megatron-core refuses it on this machine, raw dataclass defaults are used)."""
    cls = config_class(plan)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = plan_kwargs(plan)
    unknown = sorted(k for k in kwargs if k not in fields)
    kwargs = {k: v for k, v in kwargs.items() if k in fields}
    error = None
    try:
        with quiet():
            cfg = cls(**kwargs)
        return {name: getattr(cfg, name) for name in fields}, unknown, None
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        error = f"{type(exc).__name__}: {exc}"
    out = {}
    for name, f in fields.items():
        if name in kwargs:
            out[name] = kwargs[name]
        elif f.default is not dataclasses.MISSING:
            out[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[name] = f.default_factory()  # type: ignore[misc]
    return out, unknown, error


# Fields megatron-core resolves lazily: None means "the TP size" (resolve_tensor_parallel_weight_shards
# with no GTP), which Megatron-LM's validate_args writes out; both sides mean the same.
RESOLVED_LATER = {"tensor_parallel_num_weight_shards": "tensor_model_parallel_size",
                  "expert_tensor_parallel_num_weight_shards": "expert_tensor_parallel_size"}


def compare_config(plan: dict, actual_cfg, exceptions: dict, not_comparable: set,
                   actual_values: dict | None = None) -> list[dict]:
    """Field-by-field differences between the plan-implied config and ``actual_cfg``.

    ``actual_values`` overrides where a field's real value lives (Megatron-LM keeps some in args).
    None and False are the same value for a bool field (megatron only tests truthiness)."""
    expected, _, _ = plan_expected(plan)
    bool_fields = {f.name for f in dataclasses.fields(config_class(plan)) if f.type in (bool, "bool")}
    stated = set(plan["transformer_config"])
    diffs = []
    for name, want in expected.items():
        if name in not_comparable and name not in stated:
            continue
        got = (actual_values or {}).get(name, getattr(actual_cfg, name, "<absent>"))
        if name in RESOLVED_LATER:
            tp = expected[RESOLVED_LATER[name]]
            want, got = (tp if want is None else want), (tp if got is None else got)
        if want in ([], ()) and got is None or got in ([], ()) and want is None:
            continue  # an empty list and None both mean "none" to megatron-core
        if name in bool_fields:
            want, got = (False if want is None else want), (False if got is None else got)
        if name == "activation_func" or (callable(want) and callable(got)):
            want_n, got_n = activation_name(want), activation_name(got)
        else:
            want_n, got_n = norm(want), norm(got)
        if same(want_n, got_n):
            continue
        diffs.append({
            "field": name,
            "plan": want_n,
            "megatron": got_n,
            "stated_in_plan": name in stated,
            "exception": exceptions.get(name),
        })
    return diffs


# megatron-core DDP / optimizer fields a front-end may hold differently from the runtime without effect, each
# with the condition under which that holds (the plan -> why; the exception applies only when the plan meets it)
TRAINING_CONFIG_INERT = {
    "data_parallel_sharding_strategy": (lambda plan: True, "read only by Megatron-FSDP, which moeforge does not plan "
                                                           "(recipe.v3.json optimizer.megatron_fsdp)"),
    "fp8_recipe": (lambda plan: not plan["transformer_config"].get("fp8")
                   and not plan["optimizer"].get("use_precision_aware_optimizer"),
                   "the optimizer reads it only with FP8 or the precision-aware optimizer (both off here)"),
    "megatron_fsdp_use_decoupled_grad": (lambda plan: True, "read only by Megatron-FSDP, which moeforge does not "
                                                            "plan"),
    # Megatron-LM's argument defaults differ from OptimizerConfig's for these three
    "muon_momentum": (lambda plan: plan["optimizer"].get("optimizer", "adam") != "muon",
                      "read only by the Muon optimizer (Adam here)"),
    "optimizer_offload_fraction": (lambda plan: not plan["optimizer"].get("optimizer_cpu_offload"),
                                   "read only with the optimizer offloaded to the CPU (off here)"),
    "barrier_with_L1_time": (lambda plan: True, "a barrier before Megatron-LM's level-1 timers; moeforge's runtime "
                                                "passes the optimizer no timers"),
}


def te_fused_adam_signature() -> None:
    """megatron-core's OptimizerConfig checks that TE's FusedAdam takes the precision-aware arguments when a
    configuration uses use_precision_aware_optimizer: a FusedAdam signature (TE >= 1.13, the platform's TE) is
    provided as transformer_engine.pytorch.optimizers, with nothing else of TE in it. Call it only after every
    megatron module has been imported, so their HAVE_TE probes stay honest."""
    if "transformer_engine" in sys.modules:
        return
    te, te_pt, te_opt = (types.ModuleType(n) for n in (
        "transformer_engine", "transformer_engine.pytorch", "transformer_engine.pytorch.optimizers"))

    class FusedAdam:  # the signature of transformer_engine.pytorch.optimizers.FusedAdam (TE >= 1.13)
        def __init__(self, params, lr=1e-3, *, master_weight_dtype=None, exp_avg_dtype=None,
                     exp_avg_sq_dtype=None, use_decoupled_grad=False, **kwargs):
            raise RuntimeError("placeholder: no Transformer Engine on this machine")

    te_opt.FusedAdam, te_pt.optimizers, te.pytorch = FusedAdam, te_opt, te_pt
    sys.modules.update({m.__name__: m for m in (te, te_pt, te_opt)})


def runtime_training_configs(plan: dict) -> dict:
    """{"ddp": DistributedDataParallelConfig, "optimizer": OptimizerConfig} as runtime/train/ builds them from
    the plan (its DDP and optimizer sections; the optimizer's dtypes by name, its precision from the model's)."""
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig

    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    tc = plan["transformer_config"]
    ddp_fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    opt_fields = {f.name for f in dataclasses.fields(OptimizerConfig)}
    opt = {k: dtypes[v] if k.endswith("_dtype") and isinstance(v, str) else v
           for k, v in plan["optimizer"].items() if k in opt_fields}
    opt.update(bf16=bool(tc.get("bf16")), fp16=bool(tc.get("fp16")), params_dtype=dtypes[tc["params_dtype"]])
    with quiet():
        return {"ddp": DistributedDataParallelConfig(**{k: v for k, v in plan["ddp_config"].items()
                                                       if k in ddp_fields}),
                "optimizer": OptimizerConfig(**opt)}


def compare_training_configs(plan: dict, actual: dict) -> list[dict]:
    """Every megatron-core DDP and optimizer field the runtime would build from the plan against ``actual``
    ({"ddp": ..., "optimizer": ...}, what a front-end built), so no front-end default or Bridge recipe stands in
    for a field the plan leaves implicit."""
    diffs = []
    for section, mine in runtime_training_configs(plan).items():
        theirs = actual[section]
        for f in dataclasses.fields(type(mine)):
            want, got = getattr(mine, f.name), getattr(theirs, f.name, "<absent>")
            if callable(want) and not isinstance(want, type):
                continue  # hooks and timers, not settings
            want_n, got_n = norm(want), norm(got)
            if same(want_n, got_n):
                continue
            inert = TRAINING_CONFIG_INERT.get(f.name)
            diffs.append({"field": f"{section}.{f.name}", "plan": want_n, "megatron": got_n, "stated_in_plan": True,
                          "exception": inert[1] if inert and inert[0](plan) else None})
    return diffs


def is_failure(diff: dict) -> bool:
    return not diff.get("exception")


def report(verdicts: list[dict]) -> str:
    """A readable text report of judge verdicts (the CLI's output)."""
    lines = []
    for v in verdicts:
        bad = [d for d in v.get("diffs", []) if is_failure(d)]
        status = "ACCEPTED" if v["accepted"] else "REFUSED"
        lines.append(f"== {v['recipe']}: {status}, {len(bad)} difference(s)")
        if v.get("error"):
            lines.append(f"   error: {v['error']}")
        for note in v.get("notes", []):
            lines.append(f"   note: {note}")
        for d in v.get("diffs", []):
            tag = f"  [exception: {d['exception']}]" if d.get("exception") else ""
            silent = "" if d.get("stated_in_plan", True) else "  (not stated in plan)"
            lines.append(f"   {d['field']}: plan={d['plan']!r} megatron={d['megatron']!r}{silent}{tag}")
    return "\n".join(lines)


def main(judge, argv: list[str]) -> int:
    """CLI: judge BUILD_DIR... [--json]. Prints a report (or JSON); exit 1 when any fails."""
    as_json = "--json" in argv
    dirs = [Path(a) for a in argv if a != "--json"]
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    verdicts = judge(dirs)
    if as_json:
        print(json.dumps(verdicts, indent=1, default=str))
    else:
        print(report(verdicts))
    ok = all(v["accepted"] and not any(is_failure(d) for d in v.get("diffs", [])) for v in verdicts)
    return 0 if ok else 1
