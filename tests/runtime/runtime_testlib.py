"""Helpers for the runtime tests: write a plan variant, launch it, read the report.

megatron-core's parallel state and the CPU stand-ins are process-global, so every training
configuration runs in its own torchrun (or python) subprocess.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
EXAMPLE_PLAN = ROOT / "tests" / "data" / "tiny-plan.example.json"
PYTHON = sys.executable
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def free_port() -> int:
    """A currently free TCP port (never pass 0 to torchrun: gloo workers hang)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    report: dict | None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    # These are CPU (gloo) checks by design: on a GPU host they must not grab one GPU per rank.
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONWARNINGS"] = "ignore"
    return env


def launch(plan: dict, out_dir: Path, nproc: int | None = None, timeout: int = 240) -> Run:
    """Write ``plan`` under ``out_dir`` and run moeforge.runtime.train on it (torchrun when nproc > 1)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plan_path = out_dir / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    nproc = nproc or plan["layout"]["world_size"]
    port = free_port()
    if nproc > 1:
        cmd = [TORCHRUN, "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
               "--master_port", str(port), "-m", "moeforge.runtime.train", str(plan_path)]
        env = subprocess_env()
    else:
        cmd = [PYTHON, "-m", "moeforge.runtime.train", str(plan_path)]
        env = dict(subprocess_env(), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    report_path = out_dir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return Run(proc.returncode, proc.stdout, proc.stderr, report)


def run_module(module: str, *args: str, timeout: int = 240) -> Run:
    proc = subprocess.run([PYTHON, "-m", module, *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, None)


def micro_batch_losses(report: dict) -> list[list[float]]:
    return [step["micro_batch_losses"] for step in report["steps"]]
