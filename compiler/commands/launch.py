"""`make launch`: run a compiled build locally, on Slurm, or just show what would run.

local runs build/<recipe>/torchrun.sh; slurm creates the job's logs directory (sbatch opens the
#SBATCH --output/--error files before the script runs, so the script cannot) and submits
launch.sbatch with `sbatch --wait` (under a timeout, since a job that can never start would wait
forever) and reports the job's exit code; both finish by summarising report.json.

The job's interpreter (by the plan's megatron-core release) and environment are compiler/targets/job.py's.

The job runs in the project root (compiler/project.py: moeforge.toml or recipes/, or --root), where
build/ is. The runs find moeforge's runtime (`python -m moeforge.runtime....`) in the job's Python, where
moeforge is installed (from a checkout: `pip install -e`, which `make setup` and `make setup312` do); a
directory that holds an installed copy can be named by MOEFORGE_HOME, which the scripts put first on
PYTHONPATH.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.bounded import LIMITS, Unreadable, read_json, read_text
from moeforge.compiler.commands.compile import report_build, write_build
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.targets.emit import EXIT_SAVED_ON_SIGNAL
from moeforge.compiler.targets.job import LaunchError, job_env, job_python, local_command, needs_venv312


def _realised(report: dict, field: str):
    entry = report.get("realised", {}).get(field)
    return entry.get("realised") if isinstance(entry, dict) else entry


def summarize(report: dict) -> str:
    """A short, readable account of a run: steps, losses, what was really built."""
    steps = report.get("steps", [])
    losses = [(s.get("step"), s["loss"]) for s in steps if isinstance(s.get("loss"), (int, float))]
    shown = losses if len(losses) <= 10 else [*losses[:5], None, *losses[-5:]]
    on = {True: "on", False: "off"}
    span = f" (steps {losses[0][0]}-{losses[-1][0]})" if len(shown) < len(losses) else ""
    lines = [f"ran {len(steps)} steps on {report.get('world_size', '?')} ranks, "
             f"EP={_realised(report, 'expert_model_parallel_size')}",
             f"losses{span}: " + ", ".join("..." if x is None else f"{x[1]:.4f}" for x in shown),
             f"dispatcher: {_realised(report, 'moe_token_dispatcher_type')}; "
             f"EP overlap: {on.get(_realised(report, 'overlap_moe_expert_parallel_comm'), '?')}; "
             f"delayed wgrad: {on.get(_realised(report, 'delay_wgrad_compute'), '?')}",
             f"schedule taken: {report.get('schedule_taken', '?')} "
             f"(combined-1F1B overlap schedule ran: {on.get(report.get('overlap_schedule_ran'), '?')})"]
    hosts = (report.get("placement") or {}).get("hosts")
    if hosts:
        lines.append(ranks_per_host(hosts))
    checkpoint = report.get("checkpoint") or {}
    if checkpoint.get("resumed_from"):
        lines.append(f"resumed from {checkpoint['resumed_from']}"
                     + (f" (resharded: {checkpoint['resharded']})" if checkpoint.get("resharded") else ""))
    if report.get("status") == "preempted":
        lines.append(f"stopped on a signal after saving a checkpoint in {checkpoint.get('save')}: "
                     f"the same launch resumes from it")
    steady = report.get("steady_state") or {}
    if steady.get("mean_s") is not None:
        lines.append(f"steady-state step time: {steady['mean_s'] * 1e3:.1f} ms (steps {steady.get('window')}), "
                     f"{report.get('tokens_per_s', 0):.0f} tokens/s")
    return "\n".join(lines)


def ranks_per_host(hosts: list[str]) -> str:
    """'ranks per host: node1 (0-7), node2 (8-15)' from the host of each rank, in rank order."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    parts = [f"{host} ({_spans(ranks)})" for host, ranks in by_host.items()]
    if len(parts) > 8:
        parts = [*parts[:4], "...", *parts[-2:], f"({len(parts)} hosts)"]
    return "ranks per host: " + ", ".join(parts)


def _spans(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out, start = [], numbers[0]
    for prev, cur in zip(numbers, [*numbers[1:], None]):
        if cur != prev + 1:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ",".join(out)


def _report_stamp(build: Path) -> tuple | None:
    """Which report.json the build holds (the runtime replaces it with a new file), None without one: a recompile
    keeps an earlier run's report, which must not be shown as this run's."""
    try:
        st = (build / "report.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _print_report(build: Path, before: tuple | None) -> int:
    path = build / "report.json"
    stamp = _report_stamp(build)
    if stamp is None or stamp == before:
        earlier = " (the one there is an earlier run's)" if stamp is not None else ""
        print(printable(f"moeforge: the run left no {path}{earlier}"), file=sys.stderr)
        return 1
    try:
        report = read_json(path, LIMITS["report"])
        text = summarize(report) if isinstance(report, dict) else None
    except (Unreadable, AttributeError, TypeError, KeyError, ValueError) as exc:
        text, why = None, str(exc)
    else:
        why = "not a report (a JSON object)"
    if text is None:
        print(printable(f"moeforge: {path}: cannot summarise the run's report: {why}"), file=sys.stderr)
        return 1
    print("\n".join(map(printable, text.split("\n"))))  # the report's text: the run's own values
    return 0


def logs_dir(build: Path) -> Path | None:
    """The directory of launch.sbatch's `#SBATCH --output=` file, as sbatch reads that line (a quoted
    value, each backslash escaping the next character), '%%' read as '%'; relative to the job's
    working directory (the project root). None when the script names no directory."""
    try:
        script = read_text(build / "launch.sbatch", LIMITS["launch"])
    except Unreadable:
        return None  # sbatch will say what is wrong with it
    for line in script.splitlines():
        if line.startswith("#SBATCH --output="):
            text = line.split("=", 1)[1]
            if text[:1] == '"' and text[-1:] == '"':
                text = text[1:-1]
            chars, value = iter(text), []
            for c in chars:
                value.append(next(chars, "") if c == "\\" else c)
            value = "".join(value)
            return Path(value.rsplit("/", 1)[0].replace("%%", "%")) if "/" in value else None
        if line.strip() and not line.startswith("#"):
            break
    return None


def _plan(build: Path) -> dict:
    """The build's plan.json, through the bounded reader (a LaunchError says what is wrong with it)."""
    try:
        plan = read_json(build / "plan.json", LIMITS["plan"])
    except Unreadable as exc:
        raise LaunchError(f"{build / 'plan.json'}: {exc}: compile the recipe again") from None
    if not isinstance(plan, dict):
        raise LaunchError(f"{build / 'plan.json'}: not a plan (a JSON object): compile the recipe again")
    return plan


def slurm_command(build: Path, timeout: int) -> list[str]:
    """sbatch --wait under timeout(1), run from the project root so the script's relative paths hold."""
    # no --output here: launch.sbatch's #SBATCH --output/--error put the logs in its logs directory
    return ["timeout", str(timeout), "sbatch", "--wait", "--parsable", f"--chdir={project.root()}", str(build / "launch.sbatch")]


def run_local(build: Path) -> int:
    """Run the build here in the job's Python and print its report; a run saved on a signal keeps its exit code."""
    python = job_python(_plan(build))
    before = _report_stamp(build)
    rc = subprocess.call(local_command(build), cwd=project.root(), env=job_env(python))
    if rc == EXIT_SAVED_ON_SIGNAL:  # saved on USR1 and stopped: what it did, then the same code
        _print_report(build, before)
        return rc
    if rc != 0:
        print(printable(f"moeforge: the local run exited with {rc}"), file=sys.stderr)
        return rc
    return _print_report(build, before)


def run_slurm(build: Path, timeout: int) -> int:
    """Submit launch.sbatch and wait; on failure print sbatch's error and the job's log files."""
    python = job_python(_plan(build))
    logs = logs_dir(build)
    if logs is not None:
        (project.root() / logs).mkdir(parents=True, exist_ok=True)  # sbatch opens the log files before the script runs
        print(printable(f"slurm logs: {project.root() / logs}/"))
    before = _report_stamp(build)
    proc = subprocess.run(slurm_command(build, timeout), cwd=project.root(), capture_output=True, text=True,
                          env=job_env(python))
    job = proc.stdout.strip().split(";")[0] or "?"
    print(printable(f"slurm job {job} exited with {proc.returncode}"))
    if proc.returncode != 0:
        sys.stderr.write("".join(printable(line) + "\n" for line in proc.stderr.splitlines()))
        if logs is not None and job.isdigit():  # the job's own log and each node's (launch.sbatch's names)
            where = project.root() / logs
            found = sorted(where.glob(f"*-{job}.*")) + sorted(where.glob(f"*-{job}-*.*"))
            if found:
                print(printable("logs of the job: " + ", ".join(str(p) for p in found)), file=sys.stderr)
        return proc.returncode
    return _print_report(build, before)


def print_commands(build: Path, timeout: int) -> int:
    """What `local` and `slurm` would run, exactly (and the Kubernetes equivalent)."""
    try:
        python = job_python(_plan(build))
        path = f"PATH={shlex.quote(str(python.parent))}:\"$PATH\" "
    except LaunchError as exc:  # said once, above the commands (they run with the PATH as it is)
        path = ""
        print("\n".join(printable(f"# {line}") for line in str(exc).split("\n")))
    env = job_env(Path(sys.executable))
    for name in ("MOEFORGE_HOME", "MOEFORGE_ROOT"):
        if name not in os.environ and name in env:
            path = f"{name}={shlex.quote(env[name])} {path}"
    root = shlex.quote(str(project.root()))
    logs = logs_dir(build)
    # shell-quoted for copying, and escaped for the terminal (a path may hold ESC or a newline: one line each)
    print(printable(f"local: cd {root} && {path}{shlex.join(local_command(build))}"))
    mkdir = f"mkdir -p {shlex.quote(str(project.root() / logs))} && " if logs is not None else ""
    print(printable(f"slurm: cd {root} && {mkdir}{path}{shlex.join(slurm_command(build, timeout))}"))
    print(printable(f"k8s:   kubectl apply -f {shlex.quote(str(build / 'pytorchjob.yaml'))}"))
    return 0


def add_arguments(p: argparse.ArgumentParser, what: str = "build/<recipe> directory made by `moeforge compile`") -> None:
    """The launch options, shared by `python -m moeforge.compiler.commands.launch` and `moeforge launch`."""
    p.add_argument("build", help=what)
    p.add_argument("--target", choices=("local", "slurm", "print"), default="local",
                   help="local: torchrun.sh on this machine; slurm: sbatch --wait launch.sbatch; "
                        "print: the exact commands, nothing run (default: local)")
    p.add_argument("--timeout", type=int, default=1800, help="slurm: seconds to wait for the job (default 1800)")
    p.add_argument("--needs-venv312", action="store_true",
                   help="print yes when the plan runs with .venv312 (make launch builds it first), else no")


def main(argv=None) -> int:
    """Entry for `python -m moeforge.compiler.commands.launch`, which takes --root itself."""
    p = argparse.ArgumentParser(prog="moeforge launch", description="Run a compiled build locally, on Slurm, "
                                "or print the commands that would run.")
    add_arguments(p)
    p.add_argument("--root", help="the project root (default: found from the current directory, as moeforge does)")
    args = p.parse_args(argv)
    project.set_root(args.root)
    return run_build(args)


DESCRIPTION = ("Run build/<recipe>/ locally (torchrun.sh), on Slurm (sbatch --wait launch.sbatch) or print the "
               "exact commands. A recipe is compiled first.")


def arguments(c) -> None:
    """launch's flags on its subparser: a build directory, or a recipe it compiles first."""
    add_arguments(c, "build/<recipe> directory (with plan.json), or a recipe id/path to compile first")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="with a recipe: override a recipe value before compiling (repeatable)")
    c.add_argument("--out", default=None, help="with a recipe: build root (default: build/ under the project root)")


def run(args) -> int:
    """`moeforge launch`: a build directory runs as it is; a recipe is compiled first (into --out), then run."""
    build = Path(args.build)
    if not (build / "plan.json").exists() and not build.is_dir():  # a recipe: compiled into --out first
        options = argparse.Namespace(recipe=args.build, overrides=args.overrides, strict=False, format="text",
                                     out=args.out, quiet=False, advice=False)
        compiled, build_dir, kept = write_build(options)
        if not args.needs_venv312:  # that answer is the only output
            report_build(compiled, build_dir, kept, options)
        args.build = str(Path(args.out or project.build()) / compiled.composed.recipe_id)
    elif args.overrides:
        print(printable(f"moeforge launch: --set applies to a recipe; {build} is already compiled "
                        "(compile it again with the overrides)"), file=sys.stderr)
        return 2
    return run_build(args)


def run_build(args) -> int:
    """Launch a compiled build on its target; no plan.json or a launch error is exit 2 with a message."""
    build = Path(args.build).absolute()  # the job runs in the project root, maybe not here
    if not (build / "plan.json").exists():
        print(printable(f"moeforge: {build} has no plan.json; run `make compile RECIPE=...` first"), file=sys.stderr)
        return 2
    try:
        if args.needs_venv312:
            print("yes" if needs_venv312(_plan(build)) else "no")
            return 0
        if args.target == "print":
            return print_commands(build, args.timeout)
        return run_local(build) if args.target == "local" else run_slurm(build, args.timeout)
    except LaunchError as exc:
        print("\n".join(printable(f"moeforge: {line}") for line in str(exc).split("\n")), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
