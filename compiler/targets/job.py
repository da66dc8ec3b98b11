"""How a compiled build runs as a job: which interpreter (by the plan's megatron-core release), the job's
environment, and the command that runs it on this machine.

Why here, below every command: `moeforge launch` (compiler/commands/launch.py) and a sweep's points run builds
the same way. The job's python: plans for megatron-core >= 0.17 (the wheels that ship megatron/training, which
moeforge.runtime.megatron needs) run with .venv312's (`make setup312`), the others with the interpreter running this
module (.venv); an installed moeforge runs every plan with its own interpreter.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.knobs.versions import megatron_core_release, version_int
from moeforge.compiler.resources import CHECKOUT

VENV312 = (CHECKOUT / ".venv312") if CHECKOUT is not None else None
MCORE_WITH_TRAINING = "0.17.0"  # the first megatron-core wheels with megatron/training (Megatron-LM's loop)


class LaunchError(Exception):
    """A launch that cannot start, with the message to print."""


def needs_venv312(plan: dict) -> bool:
    """Does the plan's megatron-core ship megatron/training (>= 0.17.0), so that the job runs with .venv312?"""
    mcore = megatron_core_release(plan)
    return mcore is not None and version_int(mcore) >= version_int(MCORE_WITH_TRAINING)


def job_python(plan: dict) -> Path:
    """The interpreter the job runs with, by the plan's megatron-core version (see the module doc)."""
    if VENV312 is None or not needs_venv312(plan):
        return Path(sys.executable)
    python = VENV312 / "bin" / "python"
    if not python.exists():
        raise LaunchError(f"this plan is for megatron-core {megatron_core_release(plan)}: it runs with {python} "
                          "(Python 3.12, megatron-core with megatron/training), which does not exist: run "
                          "`make setup312`")
    return python


def job_env(python: Path) -> dict:
    """The job's interpreter first on PATH, so the scripts' python3 has torch and megatron."""
    env = dict(os.environ)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MOEFORGE_ROOT", str(project.root()))
    # megatron-core's import-time notices (no Apex, deprecations) drown the summary
    env.setdefault("PYTHONWARNINGS", "ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning")
    return env


def local_command(build: Path) -> list[str]:
    """What a local run (launch, sweep) starts from the project root: the build's torchrun.sh under bash."""
    return ["bash", str(build / "torchrun.sh")]
