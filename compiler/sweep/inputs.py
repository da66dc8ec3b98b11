"""What `moeforge results` and `sweep launch` read from a sweep's build directory, read as a user's input:
the manifest (sweep.json), each run's status.json and report.json, each point's plan.json and the runs' logs.

Why: these files sit in a directory anyone can edit, copy between machines or forge, and the runtime and
Slurm tasks write them from outside this process. Each goes through the bounded reader (regular files only,
a size limit; a log only by its tail) and is checked against the shape this module states, with physical
ranges, before a value of it is used, so a bad file is one line naming the file and the key and how to fix
it, never a KeyError, a hang or an Infinity in results.json. The shapes state only what moeforge reads.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.bounded import LIMITS, Unreadable, read_json, read_tail
from moeforge.compiler.recipe.validate import validator

LOG_TAIL = 200_000          # bytes of a log's end read: where a run says why it stopped
EPOCH_MAX = 1e11            # seconds since 1970: past the year 5000 is not a time a run started
STEP_MAX_S = 1e7            # a step of 115 days is not a measurement
BYTES_MAX = 2 ** 50         # a petabyte per rank
COUNT_MAX = 2 ** 20         # ranks, steps


@lru_cache(maxsize=None)
def shapes() -> dict:
    """The shapes of sweep.json, status.json and report.json, by file name (built on first use: they borrow
    from schemas/results.v1.json and sweep.v1.json, which are read then)."""
    results = validator("results.v1.json").schema
    sweep = validator("sweep.v1.json").schema
    point = results["properties"]["points"]["items"]["properties"]
    opt_str = {"type": ["string", "null"], "maxLength": 4096}
    int_ = {"type": "integer"}

    manifest = {
        "type": "object", "required": ["sweep", "points"], "$defs": results["$defs"],
        "properties": {
            "sweep": {"type": "object", "required": ["name", "file", "recipe", "repeats", "warmup_steps", "swept"],
                      "properties": {
                "name": sweep["properties"]["name"], "file": {"type": "string"}, "recipe": {"type": "string"},
                "description": opt_str, "repeats": sweep["properties"]["repeats"],
                "warmup_steps": {**sweep["properties"]["warmup_steps"], "maximum": COUNT_MAX},
                "swept": {"type": "array", "items": {"type": "string"}, "maxItems": 1000},
                "set": {"type": ["object", "null"]}}},
            "launches": {"type": "array", "items": {"type": "object", "properties": {"logs_dir": {"type": "string"}}}},
            "points": {"type": "array", "maxItems": 1000, "items": {
                "type": "object", "required": ["id", "values", "verdict"],
                "properties": {"id": {"type": "string", "pattern": "^p[0-9]{2,4}$(?!\\n)"},
                               "values": {"type": "object"},
                               "verdict": point["verdict"], "duplicate_of": point["duplicate_of"],
                               "collapsed": point["collapsed"], "diagnostics": point["diagnostics"],
                               "build_dir": {"type": "string"}, "fingerprint": opt_str, "estimate": point["estimate"]},
                "if": {"properties": {"verdict": {"const": "planned"}}}, "then": {"required": ["build_dir"]}}}}}

    status = {
        "type": "object", "required": ["state"],
        "properties": {
            "state": {"enum": ["running", "ended"]}, "fingerprint": opt_str, "log": opt_str,
            "exit_code": {"type": ["integer", "null"], "minimum": 0, "maximum": 255},
            "signal": {"type": ["string", "null"], "pattern": "^SIG[A-Z0-9+-]{1,12}$(?!\\n)"},
            "started": {"type": ["number", "null"], "minimum": 0, "maximum": EPOCH_MAX},
            "ended": {"type": ["number", "null"], "minimum": 0, "maximum": EPOCH_MAX},
            "cancelled": {"type": ["boolean", "null"]}, "target": {"type": "string"},
            "slurm_state": {"type": ["string", "null"], "maxLength": 80},
            "job_id": opt_str, "array_job_id": {"type": ["string", "null"], "pattern": "^[0-9]{1,20}$(?!\\n)"},
            "array_task_id": {"type": ["integer", "null"], "minimum": 0, "maximum": COUNT_MAX},
            "pid": {"type": "integer", "minimum": 1, "maximum": 2 ** 22}}}

    bytes_ = {"type": "integer", "minimum": 0, "maximum": BYTES_MAX}
    report = {
        "type": "object",
        "properties": {
            "status": {"type": "string", "maxLength": 40}, "world_size": {**int_, "minimum": 1, "maximum": COUNT_MAX},
            "steps": {"type": "array", "maxItems": COUNT_MAX, "items": {"type": "object", "properties": {
                "step": {**int_, "minimum": 0, "maximum": 2 ** 40},
                "time_s": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": STEP_MAX_S}}}},
            "peak_memory_bytes_per_rank": {"type": ["array", "null"], "maxItems": COUNT_MAX, "items": bytes_},
            "peak_memory_bytes_max": {"anyOf": [bytes_, {"type": "null"}]},
            "peak_memory_source": {"type": ["string", "null"], "maxLength": 200},
            "realised": {"type": ["object", "null"]}, "layout": {"type": ["object", "null"]},
            "versions": {"type": ["object", "null"],
                         # a version string; a backend's presence (deep_ep, hybrid_ep) as the preflight probes it
                         "additionalProperties": {"type": ["string", "boolean", "null"], "maxLength": 200}},
            "entrypoint": {"type": "string", "maxLength": 200}, "device": opt_str, "schedule_taken": opt_str}}
    return {"sweep.json": manifest, "status.json": status, "report.json": report}


HOW = {"sweep.json": "run `moeforge sweep launch` again to rewrite it",
       "status.json": "remove the run's directory (runs/N/) and launch with --resume to run it again",
       "report.json": "remove the run's directory (runs/N/) and launch with --resume to run it again",
       "plan.json": "run `moeforge sweep launch` again to rewrite the point's build"}


class InputError(Exception):
    """A file of the sweep's build directory that cannot be used: one line naming it, the key, and the fix."""


def _fix(path: Path) -> str:
    return HOW.get(path.name, "remove it")


def read(path: Path, shape: str, optional: bool = False):
    """The JSON object in `path`, checked against `shape` (sweep.json, status.json, report.json, or a schema
    in schemas/: plan.v1.json); None for a missing file when `optional`. InputError otherwise."""
    if optional and not path.exists() and not path.is_symlink():
        return None
    try:
        data = read_json(path, LIMITS["report"])
    except Unreadable as exc:
        raise InputError(f"{path}: {exc}: {_fix(path)}") from None
    v = _validator(shape)
    errors = sorted(v.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        e = errors[0]
        where = ".".join(map(str, e.absolute_path)) or "(the document)"
        raise InputError(f"{path}: {where}: {_short(e.message)}: {_fix(path)}")
    return data


@lru_cache(maxsize=None)
def _validator(name: str):
    """A validator whose integers are ints: JSON Schema takes 2.0 (and -0.0) for an integer, which then
    reaches range() and slices as a float."""
    import jsonschema  # lazy: as compiler/recipe/validate.py, only when a file is checked

    schema = shapes()[name] if name in shapes() else validator(name).schema
    base = jsonschema.validators.validator_for(schema)
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool))
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


def _short(message: str) -> str:
    return message if len(message) <= 160 else message[:157] + "..."


def inside(path_text: str, top: Path, what: Path) -> Path:
    """A path a record names (relative to the project root, or absolute), which must lie inside the sweep's
    directory `top`: a forged record must not make `results` read, and copy out, any file it likes."""
    path = Path(path_text)
    if not path.is_absolute():
        path = project.root() / path
    try:
        path.resolve().relative_to(top.resolve())
    except (ValueError, OSError, RuntimeError):
        raise InputError(f"{what}: {path_text!r} is outside the sweep's directory {top}: {_fix(what)}") from None
    return path


def log_tail(path: Path, what: Path) -> str:
    """The end of a run's log (at most LOG_TAIL bytes) as text; '' when there is none yet."""
    if not path.exists() and not path.is_symlink():
        return ""
    try:
        return read_tail(path, LOG_TAIL).decode("utf-8", "replace")
    except Unreadable as exc:
        raise InputError(f"{path} (the log {what} names): {exc}: {_fix(what)}") from None
