"""`moeforge calibrate`: fit a platform's constants to measured runs and write them beside the platform.

Exit codes as moeforge's: 0 written (or printed with --dry-run), 1 the runs cannot determine the fit or
an input is unusable (one line each, naming the constant or the file and the fix), 2 usage.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.calibrate import document, judge
from moeforge.compiler.calibrate import runs as R
from moeforge.compiler.calibrate.fit import UnderDetermined, fit_time
from moeforge.compiler.calibrate.megatron_log import LogError
from moeforge.compiler.calibrate.memory_fit import fit_memory, problems
from moeforge.compiler.calibrate.runs import RunError
from moeforge.compiler.diagnostics import command_main, printable
from moeforge.compiler.estimate import calibration as calib
from moeforge.compiler.estimate.steptime import PERFORMANCE_FIELDS
from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.resources import BUILTIN_RECIPES


def parser() -> argparse.ArgumentParser:
    """The calibrate flags, kept apart from main so `moeforge calibrate --help` and the tests read one parser."""
    p = argparse.ArgumentParser(
        prog="moeforge calibrate",
        description="Fit a platform's step-time and memory constants (docs/layout-model.md, section 10) to measured "
                    "runs and write recipes/platforms/<platform>.calibration.yaml: every run's estimate before and "
                    "after, and left out of the fit.")
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="report.json files, directories holding them (a sweep's builds), or a sweep's results.json")
    p.add_argument("--log", nargs=2, action="append", default=[], metavar=("LOG", "SOURCE"),
                   help="a Megatron-LM training log (the last rank's) and what it ran: a launch script, command line or "
                        "args file (read as `moeforge import` reads it), a recipe, or a plan.json (repeatable)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="with a recipe or launch SOURCE: override a value of what it compiles to (repeatable)")
    p.add_argument("--platform", help="calibrate this platform (default: the one the runs ran on)")
    p.add_argument("--fit", help="comma-separated step-time constants to fit (default: all of "
                                 f"{', '.join(calib.TIME_CONSTANTS)})")
    p.add_argument("--fix", default="", help="comma-separated constants to keep at their fixed values "
                                             "(time constants, or activation_scale)")
    p.add_argument("--assume", action="append", default=[], metavar="FIELD=VALUE",
                   help="a performance field the platform file lacks (the cpu platform has no datasheet): "
                        f"{', '.join(PERFORMANCE_FIELDS)}")
    p.add_argument("--only", choices=("time", "memory"), help="fit only the step time or only the memory terms")
    p.add_argument("--output", metavar="FILE", help="where to write (default: recipes/platforms/<platform>"
                                                     f"{calib.SUFFIX} in the project)")
    p.add_argument("--dry-run", action="store_true", help="print the report and write nothing")
    p.add_argument("--accept-weak", action="store_true",
                   help="write a fit judged weak (leave-one-out error, a value outside its physical range, an "
                        "estimate as uncertain as itself) anyway, marked weak: every command using it says so")
    p.add_argument("--no-loo", action="store_true", help="skip the leave-one-out fits")
    p.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or the document as json")
    return p


class Refused(Exception):
    """One or more lines for the user, exit 1."""


def main(argv) -> int:
    """Entry for `moeforge calibrate`: its refusals end as located messages with exit 2, never a traceback."""
    argv = list(argv)
    return command_main("moeforge calibrate", parser(), lambda args: run(args, argv), argv,
                        (Refused, RunError, LogError, calib.CalibrationError))


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


# How to measure each performance field on a CPU (the cpu platform has no datasheet): the refusal for
# missing --assume values lists them all at once with these
CPU_MEASURE = {
    "bf16_dense_tflops": "one core's bf16 GEMM rate: time `a @ b` for two 1024x1024 torch.bfloat16 tensors "
                         "(OMP_NUM_THREADS=1), 2*1024**3 / seconds / 1e12",
    "hbm_gbps": "the memory copy bandwidth: time `y.copy_(x)` for a 64 MiB torch.uint8 tensor, "
                "2 * bytes / seconds / 1e9",
    "nvlink_gbps": "ranks on one host talk through memory (gloo over loopback): the copy bandwidth (hbm_gbps)",
    "internode_gbps": "the network between hosts (iperf3), or on one host the copy bandwidth (hbm_gbps)",
    "achievable_fraction": "the share of the GEMM peak a training step reaches: fit it (the default), or state it",
    "collective_efficiency": "gloo's collectives on CPU are latency-bound, so runs cannot tell an efficiency: "
                             "state 0.5 (or fit it from runs with DP > 1)",
    "a2a_efficiency": "gloo's all-to-all on CPU is latency-bound: state 0.5 (or fit it from runs with EP > 1)",
}


def _assumed(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in PERFORMANCE_FIELDS:
            raise Refused(f"--assume {item}: expected FIELD=VALUE with FIELD one of {', '.join(PERFORMANCE_FIELDS)}")
        try:
            out[key] = float(value)
        except ValueError:
            raise Refused(f"--assume {item}: {value!r} is not a number") from None
        lo, hi = calib.DATASHEET_RANGE.get(key) or calib.TIME_CONSTANTS[key].bounds
        if not (math.isfinite(out[key]) and 0 < out[key] and lo <= out[key] <= hi):
            raise Refused(f"--assume {item}: {key} must be a finite number above 0 in [{lo:g}, {hi:g}]"
                          + (" (a fraction of a peak)" if hi == 1.0 else ""))
    return out


def _missing(platform: str, missing: list[str]) -> str:
    """Every missing performance field in one message, each with how to measure it on a CPU."""
    lines = [f"platform {platform!r} has no performance.{', '.join(missing)}: state "
             f"{'them' if len(missing) > 1 else 'it'} with "
             + " ".join(f"--assume {k}=VALUE" for k in missing)
             + ", or add a performance block to its file; on a CPU:"]
    for k in missing:
        fit = f" (or fit it: --fit {k})" if k in calib.TIME_CONSTANTS else ""
        lines.append(f"  {k}: {CPU_MEASURE[k]}{fit}")
    return "\n".join(lines)


def gather(args) -> tuple[list, list[str]]:
    """The runs to fit: the report files given, plus each --log pair, a log already read as a report counted once."""
    runs, skipped = R.collect(args.runs)
    for log, source in args.log:
        plan, label = R.plan_for(source, args.overrides, args.platform)
        run = R.from_log(Path(log), plan, label)
        if all(r.digest != run.digest for r in runs):
            runs.append(run)
    return runs, skipped


def _need_scipy() -> None:
    try:
        import scipy.optimize  # noqa: F401  # lazy: the probe of whether scipy is installed
    except ImportError:
        raise Refused("the fit needs scipy, which is not installed here: pip install 'moeforge[calibrate]' "
                      "(scipy==1.17.1)") from None


def run(args, argv: list[str] = ()) -> int:
    """Fit one platform's constants and write its calibration file; refuses runs of mixed platforms or none usable."""
    _need_scipy()
    if not args.runs and not args.log:
        raise Refused("no runs: give report.json files or directories, or --log LOG SOURCE")
    runs, skipped = gather(args)
    if not runs and skipped:  # every run left out: say why, not that they ran nowhere
        more = f" (and {len(skipped) - 1} more left out)" if len(skipped) > 1 else ""
        raise Refused(f"no usable run: {skipped[0]}{more}")
    platforms = sorted({r.platform for r in runs})
    platform = args.platform or (platforms[0] if len(platforms) == 1 else None)
    if platform is None:
        raise Refused(f"the runs ran on {', '.join(platforms) or 'no platform'}: calibrate one at a time "
                      "with --platform NAME")
    others = [r for r in runs if r.platform != platform]
    runs = [r for r in runs if r.platform == platform]
    skipped += [f"{r.origin}: ran on {r.platform}, not {platform}" for r in others]
    if not runs:
        raise Refused(f"no run on platform {platform!r}")
    platform_file = _platform_file(platform)
    assumed, fixed = _starting_point(runs[0].plan, _assumed(args.assume))
    fix = _names(args.fix)
    unknown = [n for n in fix + _names(args.fit) if n not in calib.TIME_CONSTANTS and n != "activation_scale"]
    if unknown:
        raise Refused(f"unknown constant {unknown[0]!r}: the step-time constants are "
                      f"{', '.join(calib.TIME_CONSTANTS)}; "
                      "the memory one is activation_scale")
    stated = _assumed(args.assume)
    # a constant stated with --assume is not fitted unless --fit names it
    names = [n for n in (_names(args.fit) or [n for n in calib.TIME_CONSTANTS if n not in stated]) if n not in fix]
    missing = [k for k in PERFORMANCE_FIELDS if fixed.get(k) is None and k not in names]
    if missing:
        raise Refused(_missing(platform, missing))
    time_fit = mem_fit = None
    notes = []
    if args.only != "memory":
        time_fit = _fit_time(runs, names, platform, assumed, fixed, not args.no_loo)
    if args.only != "time":
        measured = [r for r in runs if r.peak_bytes]
        if len(measured) < 1:
            notes.append("memory: no run measured its peak memory, so the memory terms keep their fixed values")
        else:
            mem_fit = _fit_memory(measured, "activation_scale" in fix, not args.no_loo)


    command = "moeforge calibrate " + shlex.join(argv)
    weak = judge.reasons(time_fit, mem_fit)
    doc = document.build(platform, platform_file, runs, time_fit, mem_fit, assumed, weak)
    try:  # a NaN or an infinity is never written: a document moeforge wrote must read back
        json.dumps(doc, allow_nan=False)
    except ValueError:
        raise Refused("the fit gave a number that is not finite (a run's step or peak far outside the others?): "
                      "nothing written; calibrate without the odd run, or --fix the constants it moves") from None
    if args.format == "json":
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        text = document.report(runs, time_fit, mem_fit, skipped, notes, weak)
        print("\n".join(printable(line) for line in text.split("\n")))  # run names are file and directory names
    if args.dry_run:
        return 0
    if weak and not args.accept_weak:
        raise Refused("\n".join([f"the fit is weak, so nothing was written: {'; '.join(weak)}", judge.fixes()]))
    out = Path(args.output) if args.output else _default_output(platform)

    write_file_atomically(out, document.render(doc, command, out))
    calib.load(out, platform)  # what was written reads back through the schema
    print(printable(f"wrote {out}"), file=sys.stderr if args.format == "json" else sys.stdout)
    return 0


def _fit_time(runs, names, platform, assumed, fixed, loo):
    if not [r for r in runs if r.step_s]:
        raise Refused("no run has a step time (moeforge.runtime.megatron reports from before step times were recorded "
                      "have none: pass its log with --log), so the step-time constants cannot be fitted; "
                      "--only memory fits the memory terms alone")
    try:
        return fit_time(runs, names, platform, assumed, fixed, loo)
    except UnderDetermined as exc:
        raise Refused("\n".join(f"cannot determine {line}" for line in exc.lines)) from None


def _fit_memory(runs, fix_scale, loo):
    lines = problems(runs, fix_scale)
    if lines:
        raise Refused("\n".join(f"cannot determine {line} (or --only time)" for line in lines))
    return fit_memory(runs, fix_scale, loo)


def _starting_point(plan: dict, assumed: dict) -> tuple[dict, dict]:
    """(the assumptions the calibration records, every constant's fixed value): the platform's performance
    block, the assumptions over its gaps, the fixed constants elsewhere; a fitted constant the platform lacks
    starts from 0.5 of a peak."""
    perf = (plan.get("platform") or {}).get("performance") or {}
    stated = {k: v for k, v in assumed.items() if perf.get(k) is None}
    fixed = calib.time_constants({"platform": {"performance": {**perf, **stated}}}, None)
    return stated, fixed


def _platform_file(platform: str) -> Path | None:
    for top in (project.recipes(), BUILTIN_RECIPES):
        path = top / "platforms" / f"{platform}.yaml"
        if path.is_file():
            return path
    return None


def _default_output(platform: str) -> Path:
    return project.recipes() / "platforms" / f"{platform}{calib.SUFFIX}"
