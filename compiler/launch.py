"""`make launch`: run a compiled build locally, on Slurm, or just show what would run.

local runs build/<recipe>/torchrun.sh; slurm submits launch.sbatch with `sbatch --wait`
(under a timeout, since a job that can never start would wait forever) and reports the
job's exit code; both finish by summarising report.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _realised(report: dict, field: str):
    entry = report.get("realised", {}).get(field)
    return entry.get("realised") if isinstance(entry, dict) else entry


def summarize(report: dict) -> str:
    """A short, readable account of a run: steps, losses, what was really built."""
    steps = report.get("steps", [])
    losses = [s.get("loss") for s in steps if isinstance(s.get("loss"), (int, float))]
    on = {True: "on", False: "off"}
    lines = [f"ran {len(steps)} steps on {report.get('world_size', '?')} ranks, "
             f"EP={_realised(report, 'expert_model_parallel_size')}",
             "losses: " + ", ".join(f"{x:.4f}" for x in losses),
             f"dispatcher: {_realised(report, 'moe_token_dispatcher_type')}; "
             f"EP overlap: {on.get(_realised(report, 'overlap_moe_expert_parallel_comm'), '?')}; "
             f"delayed wgrad: {on.get(_realised(report, 'delay_wgrad_compute'), '?')}",
             f"schedule taken: {report.get('schedule_taken', '?')} "
             f"(combined-1F1B overlap schedule ran: {on.get(report.get('overlap_schedule_ran'), '?')})"]
    steady = report.get("steady_state") or {}
    if steady.get("mean_s") is not None:
        lines.append(f"steady-state step time: {steady['mean_s'] * 1e3:.1f} ms (steps {steady.get('window')}), "
                     f"{report.get('tokens_per_s', 0):.0f} tokens/s")
    return "\n".join(lines)


def _print_report(build: Path) -> int:
    path = build / "report.json"
    if not path.exists():
        print(f"moeforge: the run left no {path}", file=sys.stderr)
        return 1
    print(summarize(json.loads(path.read_text())))
    return 0


def _job_env() -> dict:
    """This interpreter's environment first on PATH, so the job's python3 has torch and megatron."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MOEFORGE_ROOT", str(ROOT))
    # megatron-core's import-time notices (no Apex, deprecations) drown the summary
    env.setdefault("PYTHONWARNINGS", "ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning")
    return env


def run_local(build: Path) -> int:
    rc = subprocess.call(["bash", str(build / "torchrun.sh")], cwd=ROOT, env=_job_env())
    if rc != 0:
        print(f"moeforge: the local run exited with {rc}", file=sys.stderr)
        return rc
    return _print_report(build)


def run_slurm(build: Path, timeout: int) -> int:
    cmd = ["timeout", str(timeout), "sbatch", "--wait", "--parsable", f"--chdir={ROOT}",
           f"--output={build}/slurm-%j.out", str(build / "launch.sbatch")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_job_env())
    job = proc.stdout.strip().split(";")[0] or "?"
    print(f"slurm job {job} exited with {proc.returncode}")
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return proc.returncode
    return _print_report(build)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="moeforge launch")
    p.add_argument("build", help="build/<recipe> directory made by `moeforge compile`")
    p.add_argument("--target", choices=("local", "slurm", "print"), default="local")
    p.add_argument("--timeout", type=int, default=1800, help="slurm: seconds to wait for the job")
    args = p.parse_args(argv)
    build = Path(args.build)
    if not (build / "plan.json").exists():
        print(f"moeforge: {build} has no plan.json; run `make compile RECIPE=...` first", file=sys.stderr)
        return 2
    if args.target == "print":
        print(f"local: bash {shlex.quote(str(build / 'torchrun.sh'))}")
        print(f"slurm: sbatch --wait {shlex.quote(str(build / 'launch.sbatch'))}")
        print(f"k8s:   kubectl apply -f {shlex.quote(str(build / 'pytorchjob.yaml'))}")
        return 0
    return run_local(build) if args.target == "local" else run_slurm(build, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
