"""The calibration document (schemas/calibration.v1.json) and the report `moeforge calibrate` prints.

Written beside the platform in the user's project (recipes/platforms/<platform>.calibration.yaml),
atomically, deterministic for the same runs (no dates): the runs are named by content hash, so the
file changes exactly when the evidence does.  compiler/estimate/calibration.py reads it back.
"""
from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

from moeforge.compiler import __version__, project
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.estimate.calibration import GIB, SCHEMA, TIME_CONSTANTS


def _err(est: list, measured: list) -> dict:
    errs = [abs(e / m - 1) for e, m in zip(est, measured) if e is not None and m]
    return {"median": round(statistics.median(errs), 4) if errs else None,
            "max": round(max(errs), 4) if errs else None}


def _r(x, digits=6):
    return None if x is None else float(f"{x:.{digits}g}")


def build(platform: str, platform_file: Path | None, runs: list, time_fit, mem_fit, assumed: dict,
          weak: list[str] = ()) -> dict:
    """The calibration document, rounded and sorted so that refitting the same runs rewrites it unchanged."""
    doc = {"schema": SCHEMA, "platform": platform,
           "platform_sha256": hashlib.sha256(platform_file.read_bytes()).hexdigest() if platform_file else None,
           "made_by": f"moeforge {__version__}"}
    if weak:
        doc["weak"] = list(weak)
    if assumed:
        doc["assumed"] = dict(sorted(assumed.items()))
    rows = {r.digest: {"name": r.name, "sha256": r.digest, "kind": r.kind, "origin": r.origin,
                       "measured_step_s": _r(r.step_s), "measured_peak_bytes": r.peak_bytes,
                       "peak_source": r.peak_source} for r in runs}
    if time_fit is not None:
        doc["time"] = {"constants": {n: {"value": _r(time_fit.values[n]), "fixed": _r(time_fit.fixed[n]),
                                         "stderr": _r(time_fit.stderr[n], 3)} for n in time_fit.names},
                       **({"jointly_pinned": time_fit.jointly} if time_fit.jointly else {}),
                       "kept": {k: _r(v) for k, v in sorted(time_fit.kept.items()) if k in TIME_CONSTANTS},
                       "error_before": _err(time_fit.before, time_fit.measured),
                       "error_after": _err(time_fit.after, time_fit.measured),
                       "error_leave_one_out": _err(time_fit.loo, time_fit.measured)}
        timed = [r for r in runs if r.step_s]
        for r, b, a, loo in zip(timed, time_fit.before, time_fit.after, time_fit.loo or [None] * len(timed)):
            rows[r.digest].update(estimate_before_s=_r(b), estimate_after_s=_r(a), leave_one_out_s=_r(loo))
    if mem_fit is not None:
        consts = {}
        for name, value in mem_fit.values.items():
            key = name.replace("_bytes", "_gib")
            scale = 1 / GIB if name.endswith("_bytes") else 1.0
            fixed = {"activation_scale": 1.0, "allowance_bytes": 5.0, "allocated_offset_bytes": 0.0}[name]
            err = mem_fit.stderr.get(name)
            consts[key] = {"value": _r(value * scale), "fixed": fixed, "stderr": None if err is None else _r(err * scale, 3)}
        doc["memory"] = {"constants": consts, "error_before": _err(mem_fit.before, mem_fit.measured),
                         "error_after": _err(mem_fit.after, mem_fit.measured),
                         "error_leave_one_out": _err(mem_fit.loo, mem_fit.measured)}
        measured = [r for r in runs if r.peak_bytes]
        for r, b, a in zip(measured, mem_fit.before, mem_fit.after):
            rows[r.digest].update(estimate_peak_before_bytes=round(b), estimate_peak_after_bytes=round(a))
    doc["runs"] = [{k: v for k, v in row.items() if v is not None} for row in rows.values()]
    return doc


def render(doc: dict, command: str, path=None) -> str:
    """The document's text; ``path``: where it is written, which its `$schema` line is relative to (the
    project's .moeforge/schemas/, or this checkout's schemas/)."""
    import yaml  # lazy: only writing the document needs PyYAML

    ref = project.schema_ref(path, "calibration") if path is not None else "../../schemas/calibration.v1.json"
    head = [f"# yaml-language-server: $schema={ref}",
            f"# Written by `{command}`: the {doc['platform']} platform's constants fitted to the measured runs",
            "# below (docs/layout-model.md, section 10). plan-layout, explain, dryrun, results and diagnose use it.",
            "# Fit again rather than edit: the runs are named by content hash."]
    if doc.get("weak"):
        head.append("# WEAK (written with --accept-weak; every command using it says so): see `weak:` below.")
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=110)


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}" if x < 10 else f"{x:.2f} s"


def report(runs: list, time_fit, mem_fit, skipped: list[str], notes: list[str], weak: list[str] = ()) -> str:
    """The text `moeforge calibrate` prints: every run before, after and left out; the constants; the verdict."""
    lines = [f"{len(runs)} run(s)"] + [f"  left out: {printable(s)}" for s in skipped] + notes
    if time_fit is not None:
        timed = [r for r in runs if r.step_s]
        width = max(len(r.name) for r in timed)
        lines += ["", "step time (ms)".ljust(width) + "  measured    before        after      leave-one-out"]
        for r, b, a, loo in zip(timed, time_fit.before, time_fit.after, time_fit.loo or [None] * len(timed)):
            m = r.step_s
            lines.append(f"{r.name:<{width}}  {_ms(m):>8}  {_ms(b):>8} {_pct(b / m - 1):>7}  {_ms(a):>8} "
                         f"{_pct(a / m - 1):>7}  {_ms(loo):>8} {_pct(None if loo is None else loo / m - 1):>7}")
        for label, est in (("before", time_fit.before), ("after", time_fit.after), ("leave-one-out", time_fit.loo)):
            e = _err(est, time_fit.measured)
            if e["median"] is not None:
                lines.append(f"  |error| {label}: median {e['median']:.1%}, max {e['max']:.1%}")
        lines += ["", "constant                  fixed        fitted       stderr"]
        for n in time_fit.names:
            fixed, err = time_fit.fixed[n], time_fit.stderr[n]
            lines.append(f"{n:<24}  {'-' if fixed is None else f'{fixed:.4g}':>10}  {time_fit.values[n]:>10.4g}  "
                         f"{'exact' if err is None else f'{err:.2g}':>10}")
        for k, v in sorted(time_fit.kept.items()):
            if k in TIME_CONSTANTS:
                lines.append(f"{k:<24}  {'-' if v is None else f'{v:.4g}':>10}  (not fitted)")
        for group in time_fit.jointly:
            lines.append(f"  pinned only jointly: {' with '.join(group)} (each one's stderr of the order of its "
                         "value; together they price the runs' steps)")
    if mem_fit is not None:
        width = max(len(n) for n in mem_fit.names)
        lines += ["", "peak memory (MiB)".ljust(width) + "  measured    before        after      leave-one-out"]
        for n, m, b, a, loo in zip(mem_fit.names, mem_fit.measured, mem_fit.before, mem_fit.after,
                                   mem_fit.loo or [None] * len(mem_fit.names)):
            mib = 2 ** 20
            lines.append(f"{n:<{width}}  {m / mib:>8.1f}  {b / mib:>8.1f} {_pct(b / m - 1):>7}  {a / mib:>8.1f} "
                         f"{_pct(a / m - 1):>7}  {'-' if loo is None else f'{loo / mib:.1f}':>8} "
                         f"{_pct(None if loo is None else loo / m - 1):>7}")
        for name, value in mem_fit.values.items():
            shown = f"{value / GIB:.4g} GiB" if name.endswith("_bytes") else f"{value:.4g}"
            lines.append(f"  {name}: {shown}")
    lines += ["", f"calibration: weak ({'; '.join(weak)})" if weak else "calibration: accepted (leave-one-out, "
              "physical ranges and the estimates' uncertainty within their limits: compiler/calibrate/judge.py)"]
    return "\n".join(lines)
