"""Load plan.json, the runtime's only input, and check the little the runtime relies on.

Why: the compiler validated the recipe, but a node may be handed a truncated, hand-edited or
stale plan.  Everything the runtime reads is checked here once, up front, so that a bad plan
gives one message naming the field and a non-zero exit, never a traceback halfway through
model construction.  Unknown keys are tolerated (the plan schema may grow).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import PlanError

SCHEMA_PREFIX = "moeforge/plan/v1"
SCHEDULES = ("combined_1f1b", "1f1b", "interleaved_1f1b", "no_pipelining")
TRANSFORMER_IMPLS = ("local", "transformer_engine")
DATA_KINDS = ("synthetic", "learnable")
DTYPES = ("bfloat16", "float16", "float32")
# layout key -> TransformerConfig key that must agree with it
LAYOUT_TO_CONFIG = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
    "etp": "expert_tensor_parallel_size",
}


@dataclass(frozen=True)
class Plan:
    """A checked plan: the raw mapping plus the path it came from."""

    raw: dict
    path: Path

    def section(self, name: str) -> dict:
        return self.raw.get(name) or {}

    @property
    def transformer_config(self) -> dict:
        return self.raw["transformer_config"]

    @property
    def layout(self) -> dict:
        return self.raw["layout"]

    @property
    def training(self) -> dict:
        return self.raw["training"]

    @property
    def runtime(self) -> dict:
        return self.raw["runtime"]

    @property
    def model(self) -> dict:
        return self.raw["model"]


def _need(mapping: dict, key: str, types, where: str, allow_none: bool = False) -> Any:
    if key not in mapping:
        raise PlanError(f"{where}.{key} is missing")
    value = mapping[key]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise PlanError(f"{where}.{key} must be {_tname(types)}, got {value!r}")
    if not isinstance(value, types):
        raise PlanError(f"{where}.{key} must be {_tname(types)}, got {value!r}")
    return value


def _tname(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join({int: "an integer", str: "a string", dict: "an object", list: "a list",
                        bool: "a boolean", float: "a number"}.get(t, t.__name__) for t in types)


def _positive(mapping: dict, key: str, where: str) -> int:
    value = _need(mapping, key, int, where)
    if value < 1:
        raise PlanError(f"{where}.{key} must be >= 1, got {value}")
    return value


def _check_layout(raw: dict) -> None:
    layout, tc = raw["layout"], raw["transformer_config"]
    sizes = {k: _positive(layout, k, "layout") for k in ("world_size", "tp", "pp", "cp", "ep")}
    etp = _need(layout, "etp", int, "layout", allow_none=True)
    vpp = _need(layout, "vpp", int, "layout", allow_none=True)
    for key, field in LAYOUT_TO_CONFIG.items():
        if field in tc and tc[field] != layout.get(key):
            raise PlanError(
                f"layout.{key} = {layout.get(key)!r} but transformer_config.{field} = {tc[field]!r}"
            )
    world, tp, pp, cp, ep = (sizes[k] for k in ("world_size", "tp", "pp", "cp", "ep"))
    if world % (tp * pp * cp):
        raise PlanError(f"world_size {world} is not divisible by tp*pp*cp = {tp}*{pp}*{cp}")
    if world % ((etp or tp) * ep * pp):
        raise PlanError(
            f"world_size {world} is not divisible by etp*ep*pp = {etp or tp}*{ep}*{pp}"
        )
    if vpp is not None and pp == 1:
        raise PlanError("layout.vpp is set but layout.pp is 1")
    train = raw["training"]
    dp = world // (tp * pp * cp)
    mbs, gbs = train["micro_batch_size"], train["global_batch_size"]
    if gbs % (mbs * dp) or gbs // (mbs * dp) != train["num_microbatches"]:
        raise PlanError(
            f"training.num_microbatches = {train['num_microbatches']} but global_batch_size / "
            f"(micro_batch_size * dp) = {gbs} / ({mbs} * {dp}) "
            f"with dp = world_size/(tp*pp*cp) = {world}/({tp}*{pp}*{cp})"
        )


def _check_training(raw: dict) -> None:
    train = raw["training"]
    for key in ("micro_batch_size", "global_batch_size", "seq_length", "train_iters",
                "num_microbatches"):
        _positive(train, key, "training")
    _need(train, "seed", int, "training")
    data = train.get("data", "synthetic")
    if data not in DATA_KINDS:
        raise PlanError(f"training.data must be one of {DATA_KINDS}, got {data!r}")
    window = train.get("report_window", [1, train["train_iters"]])
    if (not isinstance(window, list) or len(window) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in window)
            or not 1 <= window[0] <= window[1] <= train["train_iters"]):
        raise PlanError(
            f"training.report_window must be [first, last] with 1 <= first <= last <= "
            f"train_iters ({train['train_iters']}), got {window!r}"
        )


def _check_runtime(raw: dict) -> None:
    rt = raw["runtime"]
    impl = rt.get("transformer_impl", "local")
    if impl not in TRANSFORMER_IMPLS:
        raise PlanError(
            f"runtime.transformer_impl must be one of {TRANSFORMER_IMPLS}, got {impl!r}")
    if rt.get("schedule") not in SCHEDULES:
        raise PlanError(f"runtime.schedule must be one of {SCHEDULES}, got {rt.get('schedule')!r}")
    requires = rt.get("requires", [])
    if not isinstance(requires, list):
        raise PlanError("runtime.requires must be a list")
    for i, req in enumerate(requires):
        if not isinstance(req, dict) or not isinstance(req.get("module"), str):
            raise PlanError(f"runtime.requires[{i}] must be an object with a string 'module'")
    checked = rt.get("checked_fields", [])
    if not isinstance(checked, list) or not all(isinstance(f, str) for f in checked):
        raise PlanError("runtime.checked_fields must be a list of field names")


def check(raw: Any, path: Path | str = "<plan>") -> Plan:
    """Check an already-parsed plan; raise PlanError naming the first bad field."""
    if not isinstance(raw, dict):
        raise PlanError("the plan must be a JSON object")
    schema = raw.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise PlanError(f"schema must be {SCHEMA_PREFIX!r}, got {schema!r}")
    for name in ("transformer_config", "model", "training", "layout", "runtime"):
        _need(raw, name, dict, "plan")
    for name in ("ddp_config", "optimizer", "platform", "env"):
        if raw.get(name) is not None:
            _need(raw, name, dict, "plan")
    _positive(raw["model"], "vocab_size", "model")
    _positive(raw["model"], "max_sequence_length", "model")
    tc = raw["transformer_config"]
    for key in ("num_layers", "hidden_size", "num_attention_heads"):
        _positive(tc, key, "transformer_config")
    for key in ("params_dtype", "pipeline_dtype"):
        if tc.get(key) is not None and tc[key] not in DTYPES:
            raise PlanError(f"transformer_config.{key} must be one of {DTYPES}, got {tc[key]!r}")
    _check_training(raw)
    _check_layout(raw)
    _check_runtime(raw)
    return Plan(raw=raw, path=Path(path))


def load(path: str | Path) -> Plan:
    """Read and check ``path``; every problem is a PlanError with the file named."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    try:
        return check(raw, p)
    except PlanError as exc:
        raise PlanError(f"{p}: {exc.message}") from None
