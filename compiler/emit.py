"""Render a plan into build/<recipe>/ through Jinja2 templates, atomically.

Templates get a flat, prepared view (every name decided here or in compiler/knobs.py); every
value that reaches a shell goes through the `q` filter. All files are rendered in memory
first and the build directory is swapped in whole, so a failed compile leaves the
previous build intact and concurrent compiles never see a half-written one.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import tempfile
import zlib
from functools import lru_cache
from pathlib import Path

from . import __version__
from .explain import ORDER
from .bridge_overrides import bridge_overrides
from .megatron_args import arguments, release_for

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
OUTPUTS = ("torchrun.sh", "launch.sbatch", "pytorchjob.yaml", "env.sh", "megatron-lm.args",
           "bridge.overrides", "EXPLAIN.md")
EXECUTABLE = {"torchrun.sh", "launch.sbatch"}


@lru_cache(maxsize=1)
def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    env.filters["tojson"] = lambda v: json.dumps(v)
    return env


def k8s_port(recipe_id: str) -> int:
    """The PyTorchJob's rendezvous port: deterministic (every pod must agree); pods have their own
    network namespace, so no other job on the machine can hold it."""
    return 20000 + zlib.crc32(recipe_id.encode()) % 20000


def context(plan: dict, composed_data: dict, build_dir: str) -> dict:
    launch = composed_data.get("launch", {}) or {}
    layout, platform = plan["layout"], plan["platform"]
    device = platform["device"]
    image = launch.get("container_image") or platform.get("container_image")
    args, unsupported = arguments(plan)
    overrides, not_overridden = bridge_overrides(plan)
    return {
        "recipe_id": plan["recipe"]["id"], "job_name": plan["recipe"]["name"], "build_dir": build_dir,
        "plan_file": "plan.json", "report_file": "report.json",
        "nnodes": layout["nnodes"], "nproc_per_node": layout["nproc_per_node"], "world_size": layout["world_size"],
        "gpus_per_node": layout["nproc_per_node"] if device == "cuda" else 0, "device": device,
        # None: torchrun.sh lets torchrun pick a free port, launch.sbatch derives one from the job id
        "master_port": launch.get("master_port"),
        "python": "python3",
        "slurm": {"partition": launch.get("partition"), "account": launch.get("account"),
                  "time": launch.get("time", "00:30:00"), "container_image": image,
                  "container_mounts": list(launch.get("container_mounts", [])),
                  "extra_args": list(launch.get("extra_sbatch_args", []))},
        "k8s": {"name": k8s_name(plan["recipe"]["name"]), "namespace": launch.get("k8s_namespace", "default"),
                "image": image or "moeforge-runtime:latest", "service_account": None,
                "port": launch.get("master_port") or k8s_port(plan["recipe"]["id"])},
        "env": [{"name": k, "value": v["value"], "reason": v["reason"]} for k, v in plan["env"].items()],
        "moeforge_version": __version__,
        "megatron_args": args, "megatron_unsupported": unsupported,
        "megatron_release": release_for(plan["platform"]["software"]["megatron_core"]),
        "bridge_overrides": overrides, "bridge_not_overridden": not_overridden,
        "plan": plan,
        "decisions": sorted((d for d in plan["decisions"] if d["source"] != "default"),
                            key=lambda d: (ORDER.get(d["source"], 9), d["knob"])),
    }


def k8s_name(name: str) -> str:
    """A DNS-1123 label: lowercase alphanumerics and '-', at most 63 characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].rstrip("-")
    return label or "moeforge-job"


def render(plan: dict, composed_data: dict, build_dir: str) -> dict[str, str]:
    ctx = context(plan, composed_data, build_dir)
    files = {"plan.json": json.dumps(plan, indent=2, sort_keys=True) + "\n"}
    for name in OUTPUTS:
        files[name] = _env().get_template(f"{name}.j2").render(**ctx)
    return files


def write_atomically(target: Path, files: dict[str, str]) -> None:
    """Write into a staging directory, then swap it in; on any failure the previous build stays."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    retired = None
    try:
        for name, text in files.items():
            path = staging / name
            path.write_text(text, encoding="utf-8")
            os.chmod(path, 0o755 if name in EXECUTABLE else 0o644)
        os.chmod(staging, 0o755)
        with open(target.parent / f".{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent compiles of one recipe swap in turn
            if target.exists():
                retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
                os.replace(target, retired / "build")
            try:
                os.replace(staging, target)
            except BaseException:
                if retired is not None and (retired / "build").exists():
                    os.replace(retired / "build", target)  # put the previous build back
                raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
        raise
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)


def write_file_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
