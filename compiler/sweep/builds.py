"""build/sweeps/NAME/: one build directory per point (the same files `moeforge compile` writes, written
atomically by compiler/emit.py, keeping what earlier runs left there) and the manifest, sweep.json: the
sweep, each point's values, verdict (planned, refused, duplicate), build directory, launch fingerprint and
estimate, and the launches so far. `moeforge results` starts from the manifest."""
from __future__ import annotations

import json
import time
from pathlib import Path

from moeforge.compiler import __version__, project
from moeforge.compiler.targets import emit
from moeforge.compiler.sweep import estimates
from moeforge.compiler.sweep.collapse import Collapsed
from moeforge.compiler.sweep.document import Sweep
from moeforge.compiler.sweep.points import Compiled
from moeforge.compiler.sweep.status import read_json, write

MANIFEST = "sweep.json"
LABEL_SWEEP, LABEL_POINT = "moeforge.dev/sweep", "moeforge.dev/point"


def sweep_dir(sweep_name: str, out: str | None = None) -> Path:
    """build/sweeps/NAME (or under --out): one place for where a sweep's builds, manifest and results live."""
    return Path(out or project.build()) / "sweeps" / sweep_name


def relative(path: Path) -> str:
    """A path as the scripts and results name it: relative to the project root when inside it."""
    try:
        return str(path.resolve().relative_to(project.root().resolve()))
    except ValueError:
        return str(path.resolve())


def write_builds(sweep: Sweep, compiled: list[Compiled], collapsed: dict[str, Collapsed], top: Path) -> dict:
    """Write every launchable point's build and the manifest; return the manifest."""
    points = []
    for c in compiled:
        pid = c.point.id
        entry = {"id": pid, "index": c.point.index, "values": c.point.values, "overrides": c.overrides}
        if c.refused:
            entry.update(verdict="refused", diagnostics=[d.to_json() for d in c.errors])
        elif pid in collapsed:
            col = collapsed[pid]
            entry.update(verdict="duplicate", duplicate_of=col.twin, collapsed=[k.to_json() for k in col.knobs],
                         reason=col.text(), fingerprint=c.fingerprint)
        else:
            build = top / pid
            files = emit.render(c.plan, c.composed.data, relative(build),
                                {LABEL_SWEEP: sweep.name, LABEL_POINT: pid})
            emit.write_atomically(build, files)
            entry.update(verdict="planned", build_dir=relative(build), fingerprint=c.fingerprint,
                         world_size=c.plan["layout"]["world_size"], device=c.plan["platform"]["device"],
                         warnings=[d.to_json() for d in c.warnings])
        if not c.refused:
            entry["estimate"] = estimates.of_plan(c.plan, sweep.repeats)
        points.append(entry)
    previous = read_json(top / MANIFEST) or {}
    manifest = {"moeforge_version": __version__,
                "sweep": {"name": sweep.name, "file": sweep.file, "recipe": sweep.recipe,
                          "description": sweep.description, "repeats": sweep.repeats,
                          "warmup_steps": sweep.warmup_steps, "swept": [".".join(p) for p in sweep.swept],
                          "set": {k.name: k.value for k in sweep.fixed}},
                "points": points, "launches": previous.get("launches", [])}
    write(top / MANIFEST, manifest)
    return manifest


def record_launch(top: Path, launch: dict) -> None:
    """Add a launch (target, points, when; the Slurm array's job id) to the manifest."""
    manifest = read_json(top / MANIFEST) or {}
    manifest.setdefault("launches", []).append({"at": int(time.time()), **launch})
    write(top / MANIFEST, manifest)


def update_launch(top: Path, index: int, **fields) -> None:
    """Record a launch's outcome in the manifest (read, updated, rewritten atomically), keeping the other entries."""
    manifest = read_json(top / MANIFEST) or {}
    manifest["launches"][index].update(fields)
    write(top / MANIFEST, manifest)


def planned(manifest: dict) -> list[dict]:
    """The manifest's points that are to run: refused and collapsed points never launch."""
    return [p for p in manifest["points"] if p["verdict"] == "planned"]


def dumps(manifest: dict) -> str:
    """The manifest as written: sorted keys, so an unchanged sweep rewrites the same bytes."""
    return json.dumps(manifest, indent=2, sort_keys=True)
