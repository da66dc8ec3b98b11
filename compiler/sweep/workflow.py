"""`moeforge sweep check` and `sweep launch`, end to end: read the sweep, compile every point, collapse the
duplicates, write the builds and the manifest, then hand the points still to run to a target."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.targets import emit
from moeforge.compiler.targets.job import LaunchError, job_env, job_python, local_command
from moeforge.compiler.sweep import builds, document, inputs, k8s, local, points, slurm, status
from moeforge.compiler.sweep.collapse import Collapsed, collapse
from moeforge.compiler.sweep.document import Sweep
from moeforge.compiler.sweep.points import Compiled

TARGETS = ("local", "slurm", "k8s", "print")


class SweepError(Exception):
    """A sweep that cannot be launched as asked: one line for the user, exit 2."""


@dataclass
class Checked:
    sweep: Sweep
    compiled: list[Compiled]
    collapsed: dict[str, Collapsed]

    @property
    def launchable(self) -> list[Compiled]:
        """The points to launch: compiled, not refused, and not collapsed into a twin."""
        return [c for c in self.compiled if not c.refused and c.point.id not in self.collapsed]

    @property
    def refused(self) -> list[Compiled]:
        """The points the compile refused, which check reports and launch skips."""
        return [c for c in self.compiled if c.refused]


def check(name: str) -> Checked:
    """Read the sweep, compile every point, collapse identical launches: what check and launch both start from."""
    sweep = document.load(name)
    compiled = points.compile_all(sweep, points.expand(sweep))
    return Checked(sweep, compiled, collapse(compiled))


def write(checked: Checked, out: str | None = None) -> tuple[Path, dict]:
    """Write every launchable point's build and the manifest under the sweep's directory; returns both."""
    top = builds.sweep_dir(checked.sweep.name, out)
    manifest = builds.write_builds(checked.sweep, checked.compiled, checked.collapsed, top)
    return top, manifest


def jobs(checked: Checked, top: Path, resume: bool) -> list[dict]:
    """The launchable points with the repeats each still has to run: {index, point, build_dir, repeats,
    fingerprint} (repeats: all of them, or with resume those without a successful run)."""
    out = []
    for c in checked.launchable:
        build = top / c.point.id
        todo = status.todo(build, checked.sweep.repeats, c.fingerprint, resume)
        if todo:
            out.append({"index": c.point.index, "point": c.point.id, "build_dir": builds.relative(build),
                        "repeats": todo, "fingerprint": c.fingerprint[:16]})
    return out


def launch_sweep(checked: Checked, target: str, resume: bool, out: str | None = None, concurrency: int | None = None,
                 timeout_s: float | None = None, wait: bool = True, stream=None) -> tuple[Path, list[dict], list]:
    """Write the builds and run what is still to run on `target`: (the sweep's build directory, the jobs
    launched, the local results)."""
    sweep = checked.sweep
    if target == "k8s" and sweep.repeats > 1:
        raise SweepError(f"{sweep.file}: --target k8s runs each point once (one PyTorchJob per point): set "
                         "repeats: 1, or launch on slurm or local")
    top = builds.sweep_dir(sweep.name, out)
    for c in checked.launchable:  # before a build is rewritten: no point's run may still be going
        try:
            status.settle(top / c.point.id, sweep.repeats)
        except (status.RunAlive, inputs.InputError) as exc:
            raise SweepError(f"{exc}; nothing was launched") from None
    top, _ = write(checked, out)
    try:
        todo = jobs(checked, top, resume)
    except inputs.InputError as exc:
        raise SweepError(f"{exc}; nothing was launched") from None
    if not todo:
        return top, todo, []
    concurrency = concurrency or sweep.launch["concurrency"]
    if target == "local":
        builds.record_launch(top, {"target": "local", "points": [t["point"] for t in todo]})
        results = local.run([local.Job(t["point"], project.root() / t["build_dir"], r, t["fingerprint"])
                             for t in todo for r in t["repeats"]], stream)
        return top, todo, results
    if target in ("slurm", "print"):
        script = _write_array(checked, top, todo, concurrency)
    if target in ("k8s", "print"):
        jobs_file = k8s.gather(top, [(t["point"], project.root() / t["build_dir"]) for t in todo])
    env = _env(checked, todo)
    if target == "print":
        _print(top, todo, script, jobs_file)
        return top, todo, []
    if target == "k8s":
        k8s.apply(jobs_file, [(t["point"], project.root() / t["build_dir"], t["fingerprint"]) for t in todo], env)
        builds.record_launch(top, {"target": "k8s", "points": [t["point"] for t in todo], "file": str(jobs_file)})
        return top, todo, []
    (project.root() / _logs_dir(top)).mkdir(parents=True, exist_ok=True)  # sbatch opens the logs first
    job = slurm.submit(script, env)
    builds.record_launch(top, {"target": "slurm", "points": [t["point"] for t in todo], "array_job_id": job,
                               "logs_dir": _logs_dir(top)})
    print(printable(f"sweep {sweep.name}: job array {job} ({len(todo)} point(s), at most {concurrency} at a time); "
          f"logs in {_logs_dir(top)}/"), flush=True)
    if wait:
        slurm.follow(job, todo, env, timeout_s or sweep.launch["timeout_s"], stream=stream)
    return top, todo, []


def _logs_dir(top: Path) -> str:
    return builds.relative(top / "logs")


def _write_array(checked: Checked, top: Path, todo: list[dict], concurrency: int) -> Path:
    by_id = {c.point.id: c for c in checked.compiled}
    contexts = {t["point"]: emit.context(by_id[t["point"]].plan, by_id[t["point"]].composed.data, t["build_dir"])
                for t in todo}
    try:
        text = slurm.render(slurm.context(checked.sweep, todo, contexts, _logs_dir(top), concurrency))
    except slurm.SlurmError as exc:
        raise SweepError(f"{checked.sweep.file}: {exc}") from None
    path = top / slurm.SCRIPT
    write_file_atomically(path, text)
    return path


def _env(checked: Checked, todo: list[dict]) -> dict:
    """The jobs' environment (moeforge.compiler.targets.job.job_env): one Python for the whole sweep."""
    by_id = {c.point.id: c for c in checked.compiled}
    try:
        pythons = {job_python(by_id[t["point"]].plan) for t in todo}
    except LaunchError as exc:
        raise SweepError(str(exc)) from None
    if len(pythons) > 1:
        raise SweepError(f"{checked.sweep.file}: the points need different Pythons ({', '.join(map(str, sorted(pythons)))}:"
                         " their megatron-core releases differ); split the sweep by platform.software.megatron_core")
    return job_env(pythons.pop())


def _print(top: Path, todo: list[dict], script: Path, jobs_file: Path) -> None:
    """The commands, each line through printable(): a path with a newline or an escape stays one line."""
    root = shlex.quote(str(project.root()))
    lines = [f"local {t['point']} repeat {r}: cd {root} && {shlex.join(local_command(project.root() / t['build_dir']))}"
             for t in todo for r in t["repeats"]]
    logs = shlex.quote(str(project.root() / _logs_dir(top)))
    lines.append(f"slurm: cd {root} && mkdir -p {logs} && sbatch --chdir={root} {shlex.quote(str(script))}")
    lines.append(f"k8s:   kubectl apply -f {shlex.quote(str(jobs_file))}")
    print("\n".join(map(printable, lines)), flush=True)
