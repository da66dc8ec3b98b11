"""`moeforge diagnose RUN`: which wall a run hit, the numbers behind it, and the fixes that compile.

RUN is a report.json (moeforge.runtime.train or moeforge.runtime.megatron) or the directory holding it; its plan.json is
read beside it, its profiler trace (runtime --profile) from the report's profile section.  Exit codes as
moeforge's: 0 a diagnosis, 1 an unusable run (one line), 2 usage.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from moeforge.compiler.calibrate.runs import RunError, from_report, walk
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.diagnose import fixes, trace, walls
from moeforge.compiler.diagnose.trace import TraceError
from moeforge.compiler.diagnostics import command_main
from moeforge.compiler.estimate import calibration as calib
from moeforge.compiler.estimate import memory, steptime


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moeforge diagnose",
                                description="Attribute a run's step to the four walls (memory, communication, host "
                                            "overhead, compute), name the dominant one, and list the domain documents' "
                                            "fixes for it as --set values that compile, each with the calibrated "
                                            "planner's estimate.")
    p.add_argument("run", help="report.json, the build directory holding it, or a sweep point's directory "
                                "(build/sweeps/NAME/p00: every repeat under its runs/, or --repeat N)")
    p.add_argument("--repeat", type=int, metavar="N", help="of a sweep point's repeats, diagnose runs/N only")
    p.add_argument("--trace", help="a torch.profiler Chrome trace (default: of the ranks' traces the report lists, "
                                   "the one the others waited for: the least communication)")
    p.add_argument("--calibration", metavar="FILE|none",
                   help="the calibration to estimate with (default: the one beside the platform, if any)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    return p


def main(argv) -> int:
    return command_main("moeforge diagnose", parser(), run, argv,
                        (RunError, TraceError, calib.CalibrationError, steptime.PerformanceError))


def diagnose(report_path: Path, trace_path: str | None = None, choice: str | None = None) -> dict:
    """The diagnosis as a dict (what --format json prints)."""
    run = from_report(report_path)
    if not run.step_s:
        raise RunError(f"{report_path}: no step times in the report (moeforge.runtime.megatron records them from this "
                       "version on): run it again")
    plan = run.plan
    cal = calib.for_platform(plan["platform"]["name"], choice)
    if trace_path is not None:
        split = trace.split(trace_path)
    else:
        found = [report_path.parent / t for t in (run.profile or {}).get("traces") or []]
        split = trace.critical([trace.split(p) for p in found if p.is_file()])
    w = walls.attribute(run.report, plan, run.step_s, cal, split)
    if not all(math.isfinite(v) for v in w.seconds.values()):
        raise RunError(f"{report_path}: the walls are not finite numbers ({', '.join(f'{k} {v}' for k, v in w.seconds.items())}): "
                       "is the trace or the calibration corrupted? try --calibration none")
    recipe = plan["recipe"].get("path") or plan["recipe"]["id"]
    found = fixes.verify(w.dominant, plan, recipe, plan["recipe"].get("overrides", []), cal,
                         run.peak_bytes if run.peak_source != "allocated" else None)
    try:
        current = steptime.estimate(plan, calibration=cal).total_s
    except steptime.PerformanceError:
        current = None
    return {"run": str(report_path), "step_s": run.step_s, "peak_memory_bytes": run.peak_bytes,
            "calibration": calib.record(cal), "calibration_note": calib.note(cal), "source": w.source,
            "walls": {k: {"seconds": round(w.seconds[k], 6), "share": round(w.seconds[k] / w.step_s, 4),
                          "numbers": w.numbers.get(k, [])} for k in walls.WALLS},
            "dominant": w.dominant, "why": w.why, "estimate_step_s": current,
            "fixes": [{"fix": f.what, "set": f.sets, "compiles": f.compiled, "refused": f.refused,
                       "estimate_step_s": f.step_s, "estimate_peak_gib": f.peak_gib, "fits": f.fits,
                       "notes": f.notes} for f in found]}


def reports(path: Path, repeat: int | None = None) -> list[Path]:
    """The report.json files RUN names: itself, the one in a build directory, or a sweep point's repeats
    (runs/1, runs/2, ...; with ``repeat`` only runs/N)."""
    if not path.is_dir():
        return [path]
    if repeat is not None:
        named = path / "runs" / str(repeat) / "report.json"
        if not named.is_file():
            have = sorted(p.parent.name for p in walk(path / "runs")) if (path / "runs").is_dir() else []
            raise RunError(f"{path}: no runs/{repeat}/report.json (repeats with a report: {', '.join(have) or 'none'})")
        return [named]
    if (path / "report.json").is_file():
        return [path / "report.json"]
    found = walk(path / "runs") if (path / "runs").is_dir() else []
    if not found:
        raise RunError(f"{path}: no report.json in it or under its runs/: give a run's build directory or report.json, "
                       "or a sweep point's directory after `moeforge sweep launch` ran it")
    return found


def run(args) -> int:
    found = reports(Path(args.run), args.repeat)
    out = [diagnose(p, args.trace, args.calibration) for p in found]
    if args.format == "json":
        print(json.dumps(out[0] if len(out) == 1 else {"repeats": out}, indent=2, allow_nan=False))
    else:
        print("\n\n".join(text(d) for d in out))
    return 0


def text(d: dict) -> str:
    lines = [f"{d['run']}: {d['step_s'] * 1e3:.1f} ms per step"
             + (f", peak {d['peak_memory_bytes'] / memory.GIB:.3f} GiB per rank" if d["peak_memory_bytes"] else ""),
             f"  walls from the {d['source']}", f"  {d['calibration_note']}", ""]
    for name, wall in d["walls"].items():
        mark = "  <- dominant" if name == d["dominant"] else ""
        lines.append(f"{name:<14} {wall['seconds'] * 1e3:9.1f} ms  {wall['share']:6.1%}{mark}")
        lines += [f"    {n}" for n in wall["numbers"]]
    lines += ["", f"dominant wall: {d['dominant']} ({d['why']})", "",
              f"fixes for the {d['dominant']} wall (seeds, Phase 3), each compiled:"]
    now = d["estimate_step_s"]
    for f in d["fixes"]:
        sets = " ".join(f"--set {s}" for s in f["set"])
        if f["compiles"]:
            est = []
            if f["estimate_step_s"] is not None:
                est.append(f"step {f['estimate_step_s'] * 1e3:.1f} ms"
                           + (f" ({f['estimate_step_s'] / now - 1:+.0%})" if now else ""))
            if f["estimate_peak_gib"] is not None:
                est.append(f"peak {f['estimate_peak_gib']:.3f} GiB" + ("" if f["fits"] is None else
                                                                     " (fits)" if f["fits"] else " (over capacity)"))
            lines.append(f"  {f['fix']}: {sets}  [compiles; {', '.join(est + f['notes'])}]")
        elif f["refused"]:
            lines.append(f"  {f['fix']}: {sets}  [refused: {f['refused']}]")
        else:
            lines.append(f"  {f['fix']}  [{', '.join(f['notes'])}]")
    return "\n".join(printable(line) for line in lines)
