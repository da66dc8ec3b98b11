"""`moeforge sweep check|launch` and `moeforge results` (compiler/commands/results.py): call compiler/sweep, print."""
from __future__ import annotations

import sys
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.estimate.calibration import CalibrationError
from moeforge.compiler.sweep import builds, inputs, k8s, report, results, slurm, status, workflow
from moeforge.compiler.targets.job import LaunchError


def cmd_sweep(args) -> int:
    """sweep check: every point compiled (exit 1 when the rules refuse one); sweep launch: the points run
    (exit 1 when a run did not succeed)."""
    try:
        checked = workflow.check(args.sweep)
        text = report.check_text(checked)  # estimates: a bad calibration document is the user's to fix
    except CalibrationError as exc:  # the estimates' calibration: one line, as explain and plan-layout say it
        print(printable(f"moeforge sweep {args.sweep_command}: error: {exc}"), file=sys.stderr)
        return 1
    print(text, flush=True)
    if args.sweep_command == "check":
        return 1 if checked.refused or not checked.launchable else 0
    target = args.target or checked.sweep.launch["target"]
    try:
        top, todo, ran = workflow.launch_sweep(checked, target, args.resume, args.out, args.concurrency, args.timeout,
                                               not args.no_wait)
    except (workflow.SweepError, slurm.SlurmError, k8s.K8sError, LaunchError, CalibrationError) as exc:
        print(printable(f"moeforge sweep launch: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("moeforge sweep launch: stopped; `moeforge sweep launch --resume` runs what is left", file=sys.stderr)
        return 128 + getattr(exc, "signum", 2)
    if target == "print":
        return 0
    print("\n" + report.launch_text(checked.sweep, todo, ran, top))
    if target == "slurm" and not args.no_wait:
        try:
            ran = [r for t in todo for r in status.runs(project.root() / t["build_dir"], checked.sweep.repeats,
                                                         t["fingerprint"])]
        except inputs.InputError as exc:
            print(printable(f"moeforge sweep launch: error: {exc}"), file=sys.stderr)
            return 2
    return 1 if any(r["status"] != "ok" for r in ran) else 0


def cmd_results(args) -> int:
    top = Path(args.dir)
    if not (top / builds.MANIFEST).exists() and (builds.sweep_dir(args.dir) / builds.MANIFEST).exists():
        top = builds.sweep_dir(args.dir)
    try:
        doc = results.collect(top, args.baseline)
    except results.ResultsError as exc:
        print(printable(f"moeforge results: error: {exc}"), file=sys.stderr)
        return 2
    except CalibrationError as exc:
        print(printable(f"moeforge results: error: {exc}"), file=sys.stderr)
        return 1
    written, notes = results.write_all(doc, Path(args.out) if args.out else top, plot=not args.no_plot)
    print(results.to_json(doc) if args.format == "json" else results.to_csv(doc) if args.format == "csv"
          else results.to_text(doc), end="" if args.format != "table" else "\n")
    for note in notes:
        print(printable(f"moeforge results: {note}"), file=sys.stderr)
    print(printable("wrote " + ", ".join(builds.relative(p) for p in written)), file=sys.stderr)
    return 0


DESCRIPTION = ("A sweep (recipes/sweeps/NAME.yaml, schemas/sweep.v1.json) is a recipe and the knob values to try. "
               "check compiles every point; launch writes build/sweeps/NAME/ and runs them.")


def arguments(c) -> None:
    sweep = c.add_subparsers(dest="sweep_command", required=True)
    s = sweep.add_parser("check", help="compile every point: refused points, collapsed duplicates, estimates")
    s.add_argument("sweep", help="a sweep file, or its name (recipes/sweeps/NAME.yaml)")
    s = sweep.add_parser("launch", help="write one build per point and run the points still to run")
    s.add_argument("sweep", help="a sweep file, or its name (recipes/sweeps/NAME.yaml)")
    s.add_argument("--target", choices=("local", "slurm", "k8s", "print"), default=None,
                   help="local: one point after another; slurm: one job array; k8s: one PyTorchJob per point; "
                        "print: the commands, nothing run (default: the sweep's launch.target, else local)")
    s.add_argument("--resume", action="store_true", help="run only the points (repeats) without a successful result")
    s.add_argument("--out", default=None, help="build root (default: build/ under the project root)")
    s.add_argument("--concurrency", type=int, default=None, help="slurm: array tasks at once (default: the sweep's)")
    s.add_argument("--timeout", type=int, default=None, help="slurm: seconds to follow the array (default: the sweep's)")
    s.add_argument("--no-wait", action="store_true", help="slurm: submit the array and return")


def run(args) -> int:
    return cmd_sweep(args)
