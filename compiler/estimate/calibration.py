"""A platform's calibration, as the estimates use it: the constants `moeforge calibrate` fitted to a
team's measured runs, over the fixed ones, and which calibration an estimate used.

Why here and light: steptime.py and memory.py read their constants through ``time_constants`` and
``memory_constants`` whether or not a calibration exists, so one code path prices every layout; the
fitting itself (scipy) lives in compiler/calibrate/ and is imported only by `moeforge calibrate`.

A calibration document (schemas/calibration.v1.json) sits beside its platform:
``recipes/platforms/<name>.calibration.yaml``.  Commands that estimate (plan-layout, explain, dryrun,
results, diagnose) find it with ``find`` and either pass it to the estimates or make it the active one
for a platform (``using``), so code that estimates many plans (the planner's search) needs no argument.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from moeforge.compiler import bounded, project
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.estimate.steptime_constants import DWG_LAUNCH_S, EP_OVERLAP_SLOWDOWN, OUTPUT_LAYER_FRACTION
from moeforge.compiler.resources import BUILTIN_RECIPES
from moeforge.compiler.resources import SCHEMAS

SCHEMA = "moeforge/calibration/v1"
SUFFIX = ".calibration.yaml"
GIB = 2 ** 30
# The step-time constants a calibration may set: the one table that names them (`moeforge calibrate`'s
# --fit/--fix, the fit's bounds, its refusals, the schema's time.constants: a test holds the schema to it).
# host_step_s and host_layer_microbatch_s price the host: a per-step cost (optimizer launch, Python, the
# schedule's bookkeeping) and a per-layer-per-micro-batch one (kernel launches, the dispatcher's host-side
# preprocess).  elementwise_passes prices the kernels that are neither GEMMs nor communication (norms,
# dropout, residual adds, activation functions, the MoE permutation's copies): memory-bound passes over a
# layer's [tokens, hidden] activations at hbm_gbps (docs/layout-model.md, section 2).  All three are zero
# for every catalogue platform: the seeds' and Megatron-Bridge's measurements are GPU-bound at those sizes
# and do not separate them from achievable_fraction, so today's estimates stand.
@dataclass(frozen=True)
class TimeConstant:
    """One step-time constant: where its fixed value comes from, that value when the platform has none,
    the range a fit may set it to (natural units), where a fit starts without a fixed value, and what
    makes a run's step time move with it (what a refusal names)."""

    source: str
    fixed: float | None
    bounds: tuple[float, float]
    exercised_by: str
    start: float = 0.0


TIME_CONSTANTS = {
    "achievable_fraction": TimeConstant("platform", None, (1e-4, 1.0), "every run's decoder-layer compute", 0.5),
    "output_layer_fraction": TimeConstant(
        "steptime_constants.OUTPUT_LAYER_FRACTION", OUTPUT_LAYER_FRACTION, (1e-4, 1.0),
        "the output layer's GEMMs: a run whose vocabulary is large against its layers", 0.5),
    "collective_efficiency": TimeConstant(
        "platform", None, (1e-4, 1.0),
        "data-parallel gradient reduction or TP/CP collectives: a run with DP, TP or CP > 1", 0.5),
    "a2a_efficiency": TimeConstant("platform", None, (1e-4, 1.0), "the MoE all-to-all: a run with EP > 1", 0.5),
    "ep_overlap_slowdown": TimeConstant(
        "steptime_constants.EP_OVERLAP_SLOWDOWN", EP_OVERLAP_SLOWDOWN, (0.0, 5.0),
        "a run with EP overlap on (moe.overlap.ep_comm) and more than one micro-batch"),
    "delay_wgrad_launch_s": TimeConstant("steptime_constants.DWG_LAUNCH_S", DWG_LAUNCH_S, (0.0, 1e-2),
                                         "a run with delayed wgrad on (moe.overlap.delay_wgrad)"),
    "elementwise_passes": TimeConstant(
        "fixed: 0 (no element-wise term)", 0.0, (0.0, 1e5),
        "every run's element-wise work, in proportion to its tokens x layers x hidden size"),
    "host_step_s": TimeConstant("fixed: 0 (no host term)", 0.0, (0.0, 1e3), "every run's per-step host cost"),
    "host_layer_microbatch_s": TimeConstant("fixed: 0 (no host term)", 0.0, (0.0, 10.0),
                                            "every run's per-layer, per-micro-batch host cost"),
}
# Physical ranges: where a fitted value means what its name says (a fraction of a peak that is well above
# nothing, a host cost under a minute).  The fit's bounds above are wider (they keep the optimiser finite); a
# fit that lands outside these is judged weak (compiler/calibrate/judge.py), and a document is read only with
# every value inside the fit's bounds (0 efficiency would divide by zero in every estimate).
PHYSICAL = {
    "achievable_fraction": (0.01, 1.0), "output_layer_fraction": (0.01, 1.0),
    "collective_efficiency": (0.01, 1.0), "a2a_efficiency": (0.01, 1.0),
    "ep_overlap_slowdown": (0.0, 5.0), "delay_wgrad_launch_s": (0.0, 1e-2), "elementwise_passes": (0.0, 1e5),
    "host_step_s": (0.0, 60.0), "host_layer_microbatch_s": (0.0, 1.0),
    # memory (the document's units): the memory model's activations off by 10x either way is a wrong model,
    # not a calibration; what a rank holds beyond its tensors is under a terabyte
    "activation_scale": (0.1, 10.0), "allowance_gib": (0.0, 1024.0), "allocated_offset_gib": (0.0, 1024.0),
}
# What a document may hold at all (load refuses outside): the time constants' fit bounds, memory's fit bounds.
HARD = {**{n: c.bounds for n, c in TIME_CONSTANTS.items()},
        "activation_scale": (0.0, 20.0), "allowance_gib": (0.0, 1e6), "allocated_offset_gib": (0.0, 1e6)}
# The datasheet figures the model reads; a calibration of a platform without a performance block (the
# cpu platform) states them as assumptions (`moeforge calibrate --assume`).
DATASHEET = ("bf16_dense_tflops", "hbm_gbps", "nvlink_gbps", "internode_gbps")
# ... and their ranges (a B300's dense bf16 is 2.5e3 TFLOP/s, its HBM 8e3 GB/s): an assumption outside is refused
DATASHEET_RANGE = {"bf16_dense_tflops": (1e-6, 1e5), "hbm_gbps": (1e-3, 1e6), "nvlink_gbps": (1e-3, 1e6),
                   "internode_gbps": (1e-3, 1e6)}
# Memory: the activations' scale and the allowance (what the allocator, the CUDA context or the
# process holds beyond weights, gradients, optimizer state and activations; docs/memory-model.md).
MEMORY_FIXED = {"activation_scale": 1.0, "allowance_bytes": None}  # None: memory.ALLOWANCE_BYTES


class CalibrationError(ValueError):
    """A calibration document that cannot be used: one line naming the file and the fix."""


@dataclass(frozen=True)
class Calibration:
    """What a calibration sets; ``source`` says where it came from (a path, or what made it)."""

    platform: str
    time: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    assumed: dict = field(default_factory=dict)   # datasheet fields the platform lacks
    source: str = ""
    runs: int = 0
    digest: str = ""
    weak: tuple = ()     # why the fit cannot be trusted (written with --accept-weak); () for an accepted one

    def describe(self) -> str:
        """The line an estimating command prints (note()): source, runs, digest prefix and every fitted constant."""
        fitted = ", ".join(f"{k} {_fmt(v)}" for k, v in sorted({**self.time, **self.memory}.items()))
        line = (f"calibration {self.source} ({self.runs} run{'s' if self.runs != 1 else ''}, "
                f"sha256 {self.digest[:12]}): {fitted or 'no constant'}")
        if self.weak:
            line = f"calibration: weak ({'; '.join(self.weak)}): " + line
        return line


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def time_constants(plan: dict, cal: Calibration | None) -> dict:
    """Every step-time constant and datasheet field, the calibration's over the platform's over the fixed."""
    perf = dict((plan.get("platform") or {}).get("performance") or {})
    if cal is not None:
        perf.update({k: v for k, v in cal.assumed.items() if perf.get(k) is None})
    out = {k: perf.get(k) for k in DATASHEET}
    for name, const in TIME_CONSTANTS.items():
        out[name] = perf.get(name, const.fixed)
    if cal is not None:
        out.update(cal.time)
    return out


def memory_constants(cal: Calibration | None, allowance_bytes: int) -> dict:
    """memory.py's constants: activation scale 1 and the fixed allowance, unless a calibration fitted them."""
    out = {"activation_scale": 1.0, "allowance_bytes": allowance_bytes}
    if cal is not None:
        out.update(cal.memory)
    return out


# ------------------------------------------------------------------------ the active calibration
_ACTIVE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("moeforge_calibration", default=None)


@contextlib.contextmanager
def using(cal: Calibration | None):
    """Make ``cal`` the calibration of its platform for every estimate inside the block."""
    if cal is None:
        yield
        return
    token = _ACTIVE.set({**(_ACTIVE.get() or {}), cal.platform: cal})
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active(plan: dict) -> Calibration | None:
    """The active calibration of the plan's platform, if any (``using``)."""
    table = _ACTIVE.get()
    return table.get((plan.get("platform") or {}).get("name")) if table else None


def resolve(plan: dict, cal: Calibration | None) -> Calibration | None:
    """An explicitly passed calibration wins; else the one ``using`` made active for the plan's platform."""
    return cal if cal is not None else active(plan)


# ------------------------------------------------------------------------ finding and reading
def path_beside(platform_file: Path) -> Path:
    """Where a platform file's calibration sits: <name>.yaml beside <name>.calibration.yaml."""
    return platform_file.with_name(platform_file.name[:-len(".yaml")] + SUFFIX)


def find(platform: str, platform_file: Path | None = None) -> Path | None:
    """The calibration of a platform: the project's recipes/platforms/<name>.calibration.yaml (where
    `moeforge calibrate` writes it, whether the platform file is the project's or built in), else the one
    beside the platform file that wins (``platform_file``: the project's, else the built-in one), or None."""
    if platform_file is None:
        platform_file = next((top / "platforms" / f"{platform}.yaml" for top in (project.recipes(), BUILTIN_RECIPES)
                              if (top / "platforms" / f"{platform}.yaml").is_file()), None)
    candidates = [project.recipes() / "platforms" / f"{platform}{SUFFIX}"]
    if platform_file is not None:
        candidates.append(path_beside(Path(platform_file)))
    return next((p for p in candidates if p.is_file()), None)


def load(path: Path | str, expect_platform: str | None = None) -> Calibration:
    """A calibration document, schema-checked; CalibrationError with one line on anything wrong."""
    import jsonschema  # lazy: only a calibration document is read with them (the planner's estimates run
    import yaml  # lazy: without one, on the fixed constants)

    path = Path(path)
    try:
        text = bounded.read_text(path, bounded.LIMITS["recipe"])
        doc = yaml.safe_load(text)
    except bounded.Unreadable as exc:
        raise CalibrationError(f"{path}: {exc}: rewrite it with `moeforge calibrate`") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise CalibrationError(f"{path}{where}: not YAML ({getattr(exc, 'problem', exc)}): "
                               "rewrite it with `moeforge calibrate`") from None
    schema = json.loads((SCHEMAS / "calibration.v1.json").read_text())
    try:
        error = next(iter(sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: e.path)), None)
    except RecursionError:  # a YAML alias inside itself: a document that never ends
        raise CalibrationError(f"{path}: an alias refers to itself: rewrite it with `moeforge calibrate`") from None
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "the document"
        raise CalibrationError(printable(f"{path}: {where}: {error.message[:300]} "
                                         f"({project.schema_shown('calibration')}): rewrite it with `moeforge calibrate`"))
    _check_numbers(path, doc)
    if expect_platform and doc["platform"] != expect_platform:
        raise CalibrationError(printable(f"{path}: calibrates platform {doc['platform']!r}, not {expect_platform!r}: "
                                         f"name it {doc['platform']}{SUFFIX}, or calibrate {expect_platform}"))
    time = {k: v["value"] for k, v in (doc.get("time") or {}).get("constants", {}).items()}
    fitted = {k: v["value"] for k, v in (doc.get("memory") or {}).get("constants", {}).items()}
    memory = {k: v for k, v in fitted.items() if k == "activation_scale"}
    if "allowance_gib" in fitted:  # allocated_offset_gib is what max_memory_allocated saw: not an allowance
        memory["allowance_bytes"] = int(fitted["allowance_gib"] * GIB)
    weak = list(doc.get("weak") or [])
    weak += [w for w in outside_physical({**time, **fitted}) if w not in weak]
    return Calibration(doc["platform"], time, memory, dict(doc.get("assumed") or {}), _display(path),
                       len(doc.get("runs") or ()), hashlib.sha256(text.encode()).hexdigest(), tuple(weak))


def outside_physical(values: dict) -> list[str]:
    """One reason per constant outside its PHYSICAL range ([] when all are inside)."""
    out = []
    for name, value in values.items():
        lo, hi = PHYSICAL.get(name, (-math.inf, math.inf))
        if not lo <= value <= hi:
            out.append(f"{name} {value:.4g} outside its physical range [{lo:g}, {hi:g}]")
    return out


def _check_numbers(path: Path, doc: dict) -> None:
    """Every number finite (YAML's .nan and .inf pass a schema's minimum), every constant inside HARD: one
    located line otherwise."""
    stack = [((), doc)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((where + (str(k),), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((where + (str(i),), v) for i, v in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            raise CalibrationError(f"{path}: {'.'.join(where)}: {item} is not a finite number: "
                                   "rewrite it with `moeforge calibrate`")
    for name, value in (doc.get("assumed") or {}).items():
        lo, hi = DATASHEET_RANGE.get(name) or TIME_CONSTANTS[name].bounds
        if not lo <= value <= hi:
            raise CalibrationError(f"{path}: assumed.{name}: {value:g} is outside [{lo:g}, {hi:g}]: "
                                   "measure it again (moeforge calibrate --help)")
    for part in ("time", "memory"):
        for name, const in ((doc.get(part) or {}).get("constants") or {}).items():
            lo, hi = HARD[name]
            if not lo <= const["value"] <= hi:
                raise CalibrationError(f"{path}: {part}.constants.{name}.value: {const['value']:g} is outside "
                                       f"[{lo:g}, {hi:g}]: rewrite it with `moeforge calibrate`")


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(project.root().resolve()))
    except (ValueError, OSError):
        return str(path)


def for_platform(platform: str, choice: str | None = None, platform_file: Path | None = None) -> Calibration | None:
    """The calibration a command uses: ``choice`` "none" for the fixed constants, a path, or (None) the
    one beside the platform."""
    if choice == "none":
        return None
    path = Path(choice) if choice else find(platform, platform_file)
    return load(path, platform) if path else None


def record(cal: Calibration | None) -> dict | None:
    """The calibration as JSON output names it (None: the fixed constants)."""
    if cal is None:
        return None
    return {"source": cal.source, "sha256": cal.digest, "runs": cal.runs, "time": dict(cal.time),
            "memory": dict(cal.memory), "assumed": dict(cal.assumed), "weak": list(cal.weak)}


def note(cal: Calibration | None) -> str:
    """The line every estimating command prints: which calibration it used."""
    if cal is None:
        return "calibration: none (fixed constants: docs/layout-model.md, section 6)"
    return printable(cal.describe())  # "calibration: weak (...): ..." for one written with --accept-weak
