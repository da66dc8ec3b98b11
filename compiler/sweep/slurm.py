"""`sweep launch --target slurm`: one job array (templates/sweep.sbatch.j2) whose task index is the point's
number, `--array=<indices>%<concurrency>`, submitted with sbatch and followed with `scontrol show job`
(progress on a terminal). A task Slurm ended before its script could record the run (cancelled while
pending, out of memory, time limit, node failure) gets its record from the job state."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from moeforge.compiler import __version__, project
from moeforge.compiler.targets import emit
from moeforge.compiler.sweep import status
from moeforge.compiler.sweep.progress import Progress

SCRIPT = "sweep.sbatch"
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                          "DEADLINE", "PREEMPTED"})


class SlurmError(Exception):
    """A sweep that cannot go out as one array, or an sbatch that refused it: one line for the user."""


def array_spec(indices: list[int], concurrency: int) -> str:
    """0,1,2,5 and 2 -> '0-2,5%2' (sbatch --array)."""
    parts, run = [], []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts) + f"%{concurrency}"


def seconds(text: str) -> int:
    """A Slurm time limit ([D-]HH:MM:SS, as the recipe schema allows it) in seconds."""
    days, _, rest = text.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def limit(total: int) -> str:
    """Seconds as Slurm's --time (D-HH:MM:SS), the form sbatch reads."""
    days, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{h:02d}:{m:02d}:{s:02d}"


def context(sweep, tasks: list[dict], contexts: dict, logs_dir: str, concurrency: int) -> dict:
    """The template's values. tasks: {index, point, build_dir, repeats, fingerprint}; contexts: point id ->
    compiler.emit.context of its build (what its own launch.sbatch asks Slurm for)."""
    ctxs = [contexts[t["point"]] for t in tasks]
    same = {}
    for key in ("partition", "account", "extra_args"):
        values = {repr(c["slurm"][key]) for c in ctxs}
        if len(values) > 1:
            raise SlurmError(f"the points ask for different launch.{'extra_sbatch_args' if key == 'extra_args' else key}"
                             f" ({', '.join(sorted(values))}): one job array takes one; set it in the sweep's `set:`")
        same[key] = ctxs[0]["slurm"][key]
    signals = [c["slurm"]["signal"] for c in ctxs if c["slurm"]["signal"]]
    most_repeats = max(len(t["repeats"]) for t in tasks)
    return {"moeforge_version": __version__, "sweep_file": sweep.file, "job_name": sweep.name,
            "concurrency": concurrency, "array": array_spec([t["index"] for t in tasks], concurrency),
            "nnodes": max(c["nnodes"] for c in ctxs), "ntasks_per_node": max(c["nproc_per_node"] for c in ctxs),
            "gpus_per_node": max(c["gpus_per_node"] for c in ctxs),
            "time": limit(max(seconds(c["slurm"]["time"]) for c in ctxs) * most_repeats),
            "output": emit.sbatch_pattern(logs_dir, "%x-%A_%a.out"), "logs_dir": logs_dir,
            "exclusive": any(c["slurm"]["exclusive"] for c in ctxs), "signal": signals[0] if signals else None,
            "partition": same["partition"], "account": same["account"], "extra_args": same["extra_args"],
            "tasks": tasks}


def render(ctx: dict) -> str:
    """The job array script from templates/sweep.sbatch.j2, rendered with the sweep's context."""
    return emit.template_env().get_template(f"{SCRIPT}.j2").render(**ctx)


def submit(script: Path, env: dict) -> str:
    """sbatch the array; its job id."""
    proc = subprocess.run(["sbatch", "--parsable", f"--chdir={project.root()}", str(script)], cwd=project.root(),
                          env=env, capture_output=True, text=True, timeout=120)
    job = proc.stdout.strip().split(";")[0]
    if proc.returncode != 0 or not job.isdigit():
        raise SlurmError(f"sbatch refused {script} (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return job


def tasks_state(job: str, env: dict) -> dict[int, dict] | None:
    """Array task -> {state, exit_code, signal} from `scontrol show job --oneliner`; None when Slurm has
    forgotten the job (all tasks ended a while ago). Pending tasks still folded into one record
    (ArrayTaskId=3-5%2) are each listed as PENDING."""
    proc = subprocess.run(["scontrol", "--oneliner", "show", "job", job], env=env, capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        return None
    out = {}
    for line in proc.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        ids = fields.get("ArrayTaskId", "")
        state = fields.get("JobState", "UNKNOWN")
        code, _, sig = fields.get("ExitCode", "0:0").partition(":")
        for i in _expand(ids.split("%")[0]):
            out[i] = {"state": state, "exit_code": int(code) if code.isdigit() else None,
                      "signal": int(sig) if sig.isdigit() and sig != "0" else None}
    return out


def _expand(text: str) -> list[int]:
    out = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        if a.isdigit():
            out += list(range(int(a), int(b) + 1)) if b.isdigit() else [int(a)]
    return out


def follow(job: str, tasks: list[dict], env: dict, timeout_s: float, poll_s: float = 1.0, stream=None) -> dict:
    """Wait for the array's tasks to end (at most timeout_s), with progress; the last states seen. Tasks
    Slurm ended without their run recorded get the record from the job state."""
    progress = Progress(len(tasks), f"sweep array {job}", stream)
    deadline, states = time.monotonic() + timeout_s, {}
    try:
        while True:
            seen = tasks_state(job, env)
            if seen is not None:
                states.update(seen)
            done = sum(1 for t in tasks if states.get(t["index"], {}).get("state") == "COMPLETED"
                       and states[t["index"]]["exit_code"] == 0)
            ended = sum(1 for t in tasks if states.get(t["index"], {}).get("state") in FINAL_STATES)
            running = sum(1 for t in tasks if states.get(t["index"], {}).get("state") == "RUNNING")
            progress.update(done, running, ended - done)
            if seen is None or ended == len(tasks) or time.monotonic() > deadline:
                break
            time.sleep(poll_s)
    finally:
        progress.close()
    for t in tasks:
        record_from_slurm(t, states.get(t["index"]), job)
    return states


def record_from_slurm(task: dict, state: dict | None, job: str) -> None:
    """Where the task's script could not record a run's end (killed, never started), Slurm's verdict."""
    if not state or state["state"] not in FINAL_STATES or state["state"] == "COMPLETED":
        return
    build = project.root() / task["build_dir"]
    for repeat in task["repeats"]:
        path = status.run_dir(build, repeat) / "status.json"
        record = status.read_json(path) or {"point": task["point"], "repeat": repeat,
                                            "fingerprint": task["fingerprint"], "array_task_id": task["index"],
                                            "array_job_id": job}
        if record.get("state") == "ended":
            continue
        record.update(state="ended", slurm_state=state["state"], ended=time.time(),
                      exit_code=state["exit_code"] if not state["signal"] else 128 + state["signal"],
                      signal=status.signal_name(128 + state["signal"]) if state["signal"] else None)
        status.write(path, record)
        break  # the repeats after it never began


def log_path(logs_dir: str, job_name: str, record: dict) -> str | None:
    """The array task's log (the template's --output, %x-%A_%a.out) for a run it recorded."""
    if not record.get("array_job_id") or record.get("array_task_id") is None:
        return None
    return f"{logs_dir}/{job_name}-{record['array_job_id']}_{record['array_task_id']}.out"
