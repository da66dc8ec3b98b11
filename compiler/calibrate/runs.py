"""Measured runs, from wherever a team has them: report.json files (moeforge.runtime.train, moeforge.runtime.megatron), a
directory of them (a sweep's builds: every report.json with its plan.json), a sweep's results.json, and
Megatron-LM logs of runs made without moeforge with the launch or recipe they came from.

A Run is a compiled plan with what was measured on it: the steady step time and the peak memory per
rank (with how it was measured: ``allocated`` as torch.cuda.max_memory_allocated sees it, ``reserved``
or ``rss`` for all the memory a rank held), named by the sha256 of its measurement and its plan, so a
calibration says exactly which runs it came from.  A source that cannot be read is one line, never a
traceback; a run without a step time still calibrates memory.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from moeforge.compiler import bounded, driver, project
from moeforge.compiler.calibrate import megatron_log
from moeforge.compiler.diagnostics import CompileError, render_all
from moeforge.compiler.importer.launch import import_text
from moeforge.compiler.launch_reader.text import ImportError_
from moeforge.compiler.resources import BUILTIN_RECIPES


class RunError(ValueError):
    """A run that cannot be used: one line naming the file and the fix."""


def _json(path: Path, kind: str, what: str, fix: str, raw: bytes | None = None):
    """A JSON file through the bounded reader: RunError names the file, what is wrong with it and the fix."""
    try:
        return bounded.parse_json(bounded.decode(bounded.read_bytes(path, bounded.LIMITS[kind]) if raw is None else raw))
    except bounded.Unreadable as exc:
        where = f":{exc.where}" if exc.where else ""
        raise RunError(f"{path}{where}: not a readable {what} ({exc.detail or exc}): {fix}") from None


def _head(path: Path, size: int) -> str:
    """The first ``size`` bytes of a regular file as text ('' where it cannot be read): enough to tell its kind."""
    try:
        return bounded.read_bytes(path, size, head=True).decode("utf-8", "replace")
    except bounded.Unreadable:
        return ""


@dataclass
class Run:
    name: str
    origin: str               # the file the measurement came from
    digest: str               # sha256 of the measurement and the plan
    plan: dict
    kind: str                 # "report" | "megatron-log"
    step_s: float | None = None
    step_samples: int = 0     # steps (or printed log lines) the step time is the median of
    peak_bytes: int | None = None
    peak_source: str | None = None   # "allocated" | "reserved" | "rss"
    profile: dict | None = None      # report.json's profile section (diagnose reads the trace)
    report: dict | None = None

    @property
    def platform(self) -> str:
        """The platform the run was compiled for: calibration fits one platform at a time."""
        return self.plan["platform"]["name"]


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _canonical(plan: dict) -> bytes:
    return json.dumps(plan, sort_keys=True, separators=(",", ":")).encode()


def peak_kind(source: str | None) -> str | None:
    """How a report's peak memory was measured, from its peak_memory_source text."""
    if not source:
        return None
    if "ru_maxrss" in source or "RSS" in source:
        return "rss"
    if "reserved" in source:
        return "reserved"
    if "allocated" in source:
        return "allocated"
    return None


# ------------------------------------------------------------------------ report.json
def _plan_of(report_path: Path, report: dict) -> tuple[Path, dict]:
    beside = report_path.with_name("plan.json")
    named = Path(report["plan"]) if isinstance(report.get("plan"), str) and report["plan"] else None
    # a sweep's repeat: build/sweeps/NAME/p00/runs/N/report.json, its plan in the point's directory
    point = report_path.parent.parent.parent / "plan.json" if report_path.parent.parent.name == "runs" else None
    for candidate in (beside, named, report_path.parent / named if named else None, point):
        if candidate is not None and candidate.is_file():
            return candidate, _json(candidate, "plan", "plan.json", "compile the recipe again")
    raise RunError(f"{report_path}: its plan.json is neither beside it nor at {report.get('plan')!r}: "
                   "keep the report in its build directory")


def from_report(path: Path, name: str | None = None) -> Run:
    """One report.json (runtime/report/ writes it) with its plan; ``name``: its label (default: from its path)."""
    try:
        raw = bounded.read_bytes(path, bounded.LIMITS["report"])
    except bounded.Unreadable as exc:
        raise RunError(f"{path}: {exc}: moeforge.runtime.train and moeforge.runtime.megatron write a run's report.json") from None
    report = _json(path, "report", "run report", "is the run still writing it?", raw)
    if not isinstance(report, dict) or "steps" not in report:
        raise RunError(f"{path}: not a moeforge run report (no 'steps'): moeforge.runtime.train and moeforge.runtime.megatron write one")
    if report.get("status") not in (None, "ok"):
        raise RunError(f"{path}: the run ended {report.get('status')!r}: only finished runs calibrate")
    plan_path, plan = _plan_of(path, report)
    if not isinstance(plan, dict) or not isinstance(plan.get("platform"), dict) \
            or not isinstance(plan["platform"].get("name"), str) or not isinstance(plan.get("layout"), dict):
        raise RunError(f"{plan_path}: not a moeforge plan (no platform.name or layout): compile the recipe again")
    steady = report.get("steady_state") or {}
    if not isinstance(steady, dict) or not isinstance(report["steps"], list):
        raise RunError(f"{path}: steady_state must be an object and steps a list: not a moeforge run report")
    step_s = _quantity(path, "steady_state.median_s", steady.get("median_s"), STEP_S)
    samples = steady.get("steps", 0) if isinstance(steady.get("steps", 0), int) else 0
    if step_s is None:
        times = [_quantity(path, f"steps[{i}].time_s", s.get("time_s"), STEP_S)
                 for i, s in enumerate(report["steps"]) if isinstance(s, dict)]
        times = [t for t in times if t is not None][1:]
        if times:
            times.sort()
            step_s, samples = times[len(times) // 2], len(times)
    peak = None
    for key in ("peak_memory_bytes_max", "peak_memory_bytes_rank0"):
        if report.get(key) != 0:  # 0: a CPU run's stand-in reports nothing
            peak = peak or _quantity(path, key, report.get(key), PEAK_BYTES)
    kind = peak_kind(report.get("peak_memory_source") if isinstance(report.get("peak_memory_source"), str) else None)
    name = name or _name(path)
    return Run(name, str(path), _sha(raw, _canonical(plan)), plan, "report", step_s, samples,
               int(peak) if peak and kind else None, kind if peak else None, report.get("profile"), report)


STEP_S = (0.0, 86_400.0)       # a step: more than nothing, at most a day
PEAK_BYTES = (0.0, 2.0 ** 50)   # a rank's peak: at most a petabyte


def _quantity(path: Path, key: str, value, bounds: tuple[float, float]) -> float | None:
    """A measured quantity of a report, None when absent; RunError (located by its key) when it is not a
    number in its physical range: a negative step time would price a negative TFLOP/s."""
    if value is None:
        return None
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
        raise RunError(f"{path}: {key}: {str(value)[:40]!r} is not a number in ({lo:g}, {hi:g}]: "
                       "moeforge.runtime.train and moeforge.runtime.megatron write it; run again")
    return value


def _name(path: Path) -> str:
    """A short label: the build directory's path below the nearest build/ or runs/ folder."""
    parts = path.parent.parts
    for marker in ("build", "runs", "builds"):
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):]) or path.parent.name
    return "/".join(parts[-2:])


def _label(report: Path, source: Path) -> str:
    """A run's label: its directory below the directory it was found in (a sweep point's name)."""
    if source.is_dir():
        try:
            return str(report.parent.relative_to(source)) or source.name
        except ValueError:
            pass
    return _name(report)


def walk(directory: Path) -> list[Path]:
    """Every report.json under ``directory`` (a sweep's builds, a folder of runs), sorted."""
    found = []
    for here, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if "report.json" in files:
            found.append(Path(here) / "report.json")
    return sorted(found)


def from_results(path: Path) -> list[Path]:
    """The report.json of every point of a sweep's results.json (schemas/results.v1.json: each point names its
    build directory and its runs' reports, relative to the project root); a point without a report is left
    out.  Falls back to walking the results file's folder."""
    doc = _json(path, "report", "results.json", "write it again with `moeforge results`")
    if not isinstance(doc, dict):
        raise RunError(f"{path}: not a results.json ({project.schema_shown('results')}): write it again with `moeforge results`")

    def located(text: str) -> Path | None:
        for base in (Path(), project.root(), path.parent):
            candidate = base / text
            if candidate.exists():
                return candidate.resolve()
        return None

    found = []
    for point in doc.get("points") or []:
        texts = [point.get("report")] + [run.get("report") for run in point.get("runs") or [] if isinstance(run, dict)]
        found += [p for p in (located(t) for t in texts if isinstance(t, str)) if p is not None and p.is_file()]
        build = located(point["build_dir"]) if isinstance(point.get("build_dir"), str) else None
        if build is not None and build.is_dir():
            found.extend(walk(build))
    return sorted(set(found)) or walk(path.parent)


def collect(sources: list[str]) -> tuple[list[Run], list[str]]:
    """Runs from report.json files, directories and results.json files; (runs, one line per source left out)."""
    runs, skipped, seen = [], [], set()
    for source in sources:
        path = Path(source)
        if path.is_dir():
            reports = walk(path)
            if not reports:
                skipped.append(f"{path}: no report.json under it (runs write theirs into their build directory)")
        elif path.is_file() and path.name != "report.json" and path.suffix == ".json" and _is_results(path):
            reports = from_results(path)
        elif path.exists():  # a FIFO or a device too: the bounded reader says why it is not read
            reports = [path]
        else:
            raise RunError(f"{path}: no such file or directory")
        for report in reports:
            try:
                run = from_report(report, _label(report, path))
            except RunError as exc:
                skipped.append(str(exc))
                continue
            if run.digest not in seen:
                seen.add(run.digest)
                runs.append(run)
    return runs, skipped


def _is_results(path: Path) -> bool:
    head = _head(path, 4096)
    return '"moeforge/results' in head or '"points"' in head


# ------------------------------------------------------------------------ Megatron-LM logs
def from_log(log_path: Path, plan: dict, origin_of_plan: str) -> Run:
    """A Megatron-LM training log with the plan of the launch or recipe it came from."""
    log = megatron_log.read(log_path)
    step_s, samples = log.step_time_s()
    gbs = log.global_batch_size()
    planned = plan["training"]["global_batch_size"]
    if gbs is not None and gbs != planned:
        raise RunError(f"{log_path}: the log trains global batch size {gbs}, {origin_of_plan} says {planned}: "
                       "pair the log with the launch that wrote it")
    peak = log.peak_memory()
    kind, value = (("reserved", peak["max_reserved"]) if peak and peak.get("max_reserved") else
                   ("allocated", peak["max_allocated"]) if peak and peak.get("max_allocated") else (None, None))
    return Run(f"{log_path.name} ({origin_of_plan})", str(log_path), _sha(log.digest.encode(), _canonical(plan)),
               plan, "megatron-log", step_s, samples, value, kind)


def plan_for(source: str, overrides=(), platform: str | None = None) -> tuple[dict, str]:
    """The compiled plan of what a log came from: a plan.json, a build directory, a recipe (id, path or
    builtin:ID, with ``overrides``), or a Megatron-LM launch (script, command line, args file: read by
    `moeforge import`, never executed).  (plan, label)."""
    path = Path(source)
    if path.exists() and not (path.is_file() or path.is_dir()):  # a FIFO or a device: never opened
        raise RunError(f"{path}: not a regular file (a FIFO or a device is not read): pass the launch script, "
                       "recipe or plan.json the log came from")
    if path.is_dir() and (path / "plan.json").is_file():
        path = path / "plan.json"
    if path.is_file() and path.suffix == ".json":
        return _json(path, "plan", "plan.json", "compile the recipe again"), str(path)
    try:
        if _is_recipe(path, source):
            return driver.compile(source, list(overrides)).plan, source
        return _imported_plan(path, platform, overrides), f"{path.name} (imported)"
    except CompileError as exc:
        first = render_all(exc.diagnostics, "text").splitlines()[0]
        raise RunError(f"{source}: does not compile: {first}") from None
    except ImportError_ as exc:
        raise RunError(f"{source}: {exc}") from None


def _is_recipe(path: Path, source: str) -> bool:
    if not path.is_file():
        return True  # a recipe id (tiny-moe/cpu) or builtin:ID; the pipeline says when it is not one
    return "moeforge/recipe/" in _head(path, 2048)


def _imported_plan(path: Path, platform: str | None, overrides=()) -> dict:
    """A launch's plan, through `moeforge import` in a scratch project (nothing written to the user's); the
    log came from Megatron-LM's own loop, so the recipe runs it (runtime.entrypoint megatron-lm)."""
    import yaml  # lazy: only a launch imported from a log needs PyYAML

    try:
        text = bounded.read_text(path, bounded.LIMITS["launch"])
    except bounded.Unreadable as exc:
        raise RunError(f"{path}: {exc}: pass the launch script, command line or args file the log came from") from None
    imp = import_text(text, str(path), platform)
    imp.recipe.setdefault("runtime", {})["entrypoint"] = "megatron-lm"
    scratch = Path(tempfile.mkdtemp(prefix="moeforge-calibrate-"))
    try:
        for kind, name, doc in (("models", imp.model["name"], imp.model), ("imported", imp.recipe["name"], imp.recipe)):
            (scratch / kind).mkdir(exist_ok=True)
            (scratch / kind / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        (scratch / "platforms").mkdir()
        for top in (project.recipes(), BUILTIN_RECIPES):
            candidate = top / "platforms" / f"{imp.platform}.yaml"
            if candidate.is_file():
                shutil.copyfile(candidate, scratch / "platforms" / candidate.name)
                break
        recipe = scratch / "imported" / f"{imp.recipe['name']}.yaml"
        return driver.compile(recipe, list(overrides), scratch).plan
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
