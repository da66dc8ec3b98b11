"""Load plan.json, the runtime's only input, and check it against the compiler's own contract.

Why: the compiler validated the recipe, but a node may be handed a truncated, hand-edited or
stale plan. The shape is checked by the same JSON Schema the compiler validates every plan
against when it writes one (schemas/plan.v1.json); what a schema cannot say (the layout folds
into the world size, the layout agrees with the TransformerConfig, the micro-batch count) is
checked here. Either way a bad plan gives one message naming the field and a non-zero exit,
never a traceback halfway through model construction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import inputs
from ..errors import PlanError

SCHEMA_PREFIX = "moeforge/plan/v1"
# schemas/ beside runtime/: in a checkout, and in the installed `moeforge` package, which mirrors it.
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schemas" / "plan.v1.json"
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
        """A plan section by name: transformer_config, model, ddp_config, optimizer, training, runtime, and
        the training-I/O sections data, tokenizer, checkpoint, schedule, logging, eval."""
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


@lru_cache(maxsize=1)
def _validator():
    """The plan schema's validator, where an integer is a JSON integer: JSON Schema counts 4.0 as one,
    but ``"num_microbatches": 4.0`` would reach range() and torch as a float."""
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    base = jsonschema.validators.validator_for(schema)
    strict = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
    return jsonschema.validators.extend(base, type_checker=strict)(schema)


def _where(path) -> str:
    out = "plan"
    for part in path:
        out = f"{out}[{part}]" if isinstance(part, int) else ("" if out == "plan" else out + ".") + str(part)
    return out


def _check_schema(raw: dict) -> None:
    """The first schema violation (shallowest first), with how many more there are."""
    errors = sorted(_validator().iter_errors(raw), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        first, more = errors[0], len(errors) - 1
        raise PlanError(f"{_where(first.absolute_path)}: {first.message}"
                        + (f" (and {more} more schema error{'s' if more > 1 else ''})" if more else ""))


def _check_folding(layout: dict) -> int:
    """The folding identity tp*cp*dp*pp = etp*ep*edp*pp = world_size; returns dp.

    The runtime's one mirror of the compiler's compiler/knobs/layout.py (the runtime never imports the
    compiler): the same checks, the same messages."""
    world, tp, pp, cp, ep, etp = (layout[k] for k in ("world_size", "tp", "pp", "cp", "ep", "etp"))
    etp = tp if etp is None else etp
    if world % (tp * cp * pp):
        raise PlanError(f"world_size {world} is not divisible by tp*cp*pp = {tp}*{cp}*{pp} = {tp * cp * pp} "
                        "(world = tp*cp*dp*pp)")
    if world % (etp * ep * pp):
        raise PlanError(f"world_size {world} is not divisible by etp*ep*pp = {etp}*{ep}*{pp} = {etp * ep * pp} "
                        "(world = etp*ep*edp*pp)")
    if layout["vpp"] is not None and pp == 1:
        raise PlanError("vpp is set but pp is 1 (interleaving needs pipeline parallelism)")
    dp, edp = world // (tp * cp * pp), world // (etp * ep * pp)
    for key, value, formula in (("dp", dp, "world_size/(tp*cp*pp)"), ("edp", edp, "world_size/(etp*ep*pp)")):
        if key in layout and layout[key] != value:
            raise PlanError(f"layout.{key} = {layout[key]!r} but {key} = {formula} = {value}")
    return dp


def num_microbatches(gbs: int, mbs: int, dp: int) -> int | None:
    """Micro-batches per step when the batch splits into whole micro-batches on every DP rank, else None.
    The runtime's one copy of compiler/knobs/layout.py's num_microbatches and batch_remainder (it never imports
    the compiler); tests/compiler/test_layout.py compares the two over a grid of batch sizes."""
    return None if gbs % (mbs * dp) else gbs // (mbs * dp)


def _check_layout(raw: dict) -> None:
    layout, tc = raw["layout"], raw["transformer_config"]
    for key, field in LAYOUT_TO_CONFIG.items():
        if field in tc and tc[field] != layout.get(key):
            raise PlanError(
                f"layout.{key} = {layout.get(key)!r} but transformer_config.{field} = {tc[field]!r}"
            )
    dp = _check_folding(layout)
    train = raw["training"]
    world, tp, pp, cp = (layout[k] for k in ("world_size", "tp", "pp", "cp"))
    mbs, gbs = train["micro_batch_size"], train["global_batch_size"]
    if num_microbatches(gbs, mbs, dp) != train["num_microbatches"]:
        raise PlanError(
            f"training.num_microbatches = {train['num_microbatches']} but global_batch_size / "
            f"(micro_batch_size * dp) = {gbs} / ({mbs} * {dp}) "
            f"with dp = world_size/(tp*cp*pp) = {world}/({tp}*{cp}*{pp})"
        )
    first, last = train["report_window"]
    if not 1 <= first <= last <= train["train_iters"]:
        raise PlanError(f"training.report_window must be [first, last] with 1 <= first <= last <= "
                        f"train_iters ({train['train_iters']}), got {train['report_window']!r}")


def _check_training_io(raw: dict) -> None:
    """What the schema cannot say about data / checkpoint / schedule (the compiler's rules in
    compiler/rules/training_io.py refuse such recipes; a hand-edited plan is refused here)."""
    data, ckpt, sched = raw["data"], raw["checkpoint"], raw["schedule"]
    if data["kind"] == "indexed" and (data["paths"] is None) == (data["blend"] is None):
        raise PlanError("data.kind is 'indexed': give exactly one of data.paths and data.blend")
    if (ckpt["save"] is None) != (ckpt["interval"] is None):
        raise PlanError("checkpoint.save and checkpoint.interval go together "
                        f"(save = {ckpt['save']!r}, interval = {ckpt['interval']!r})")
    if ckpt["load"] == "auto" and ckpt["save"] is None:
        raise PlanError("checkpoint.load is 'auto' (the latest under checkpoint.save) but checkpoint.save is null")
    if sched["warmup_iters"] is not None and sched["warmup_fraction"] is not None:
        raise PlanError("schedule: give warmup_iters or warmup_fraction, not both")


def check(raw, path: Path | str = "<plan>") -> Plan:
    """Check an already-parsed plan; raise PlanError naming the first bad field."""
    if not isinstance(raw, dict):
        raise PlanError("the plan must be a JSON object")
    schema = raw.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise PlanError(f"schema must be {SCHEMA_PREFIX!r}, got {schema!r} (recompile the recipe with this "
                        "moeforge)")
    _check_schema(raw)
    _check_layout(raw)
    _check_training_io(raw)
    return Plan(raw=raw, path=Path(path))


def load(path: str | Path) -> Plan:
    """Read (through the guarded reader, runtime/plan/inputs.py) and check ``path``; every problem is a
    PlanError with the file named."""
    p = Path(path)
    raw = inputs.load_json(p)
    try:
        return check(raw, p)
    except PlanError as exc:
        raise PlanError(f"{p}: {exc.message}") from None
