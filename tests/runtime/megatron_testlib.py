"""Run ``python -m moeforge.runtime.megatron`` the way launch.sbatch does: one process per rank, no torchrun.

Why: Megatron-LM's loop needs megatron-core >= 0.17 (its wheel ships megatron/training), which is
the Python 3.12 environment (.venv312, `make setup312`); the compiler runs in this interpreter.
Ranks are plain processes with RANK/WORLD_SIZE/MASTER_PORT, as srun starts them, so a test can
signal each rank directly, as srun forwards a signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from runtime_testlib import ROOT, free_port

PY312 = ROOT / ".venv312" / "bin" / "python"
MEGATRON_LM_RECIPE = ("runtime.entrypoint=megatron-lm", "platform.software.megatron_core=0.19.2",
                      "model.architecture.vocab_size=384")  # byte tokenizer: 257 ids fit


def have_megatron_training() -> bool:
    return PY312.exists() and subprocess.run(
        [str(PY312), "-c", "import megatron.training"], capture_output=True).returncode == 0


def compile_tiny(out_root: Path, *sets: str) -> Path:
    """Compile tiny-moe/cpu for Megatron-LM's loop with extra ``--set`` values; the build dir."""
    cmd = [sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(out_root)]
    for item in (*MEGATRON_LM_RECIPE, *sets):
        cmd += ["--set", item]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out_root / "tiny-moe" / "cpu"


def prepare_corpus(tmp: Path, documents: int = 400) -> Path:
    """A small English corpus tokenised by `moeforge data prepare` with the byte tokenizer."""
    corpus = tmp / "corpus.jsonl"
    lines = []
    for i in range(documents):
        text = (f"Document {i}: the quick brown fox jumps over the lazy dog. "
                f"Experts route tokens; the router picks {i % 4} and {(i + 1) % 4}.")
        lines.append(json.dumps({"text": text}))
    corpus.write_text("\n".join(lines) + "\n")
    prefix = tmp / "data" / "corpus_text_document"
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", "data", "prepare", str(corpus),
                           "--tokenizer", "byte", "--output", str(prefix)],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return prefix


@dataclass
class Ranks:
    returncodes: list[int]
    output: str
    report: dict | None


def _env(rank: int, world: int, port: int) -> dict:
    env = dict(os.environ)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    return env


def start(build: Path, world: int, extra: list[str] = (), flags: list[str] = (), log: Path | None = None):
    """Start ``world`` rank processes; their combined output goes to ``log``."""
    port = free_port()
    log = log or build / "ranks.log"
    sink = open(log, "w")
    argv = [str(PY312), "-m", "moeforge.runtime.megatron", str(build / "plan.json"), *flags]
    if extra:
        argv += ["--", *extra]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=_env(r, world, port), stdout=sink,
                              stderr=subprocess.STDOUT) for r in range(world)]
    return procs, sink, log


def finish(build: Path, procs, sink, log: Path, timeout: int = 600) -> Ranks:
    codes = []
    try:
        for p in procs:
            codes.append(p.wait(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        sink.close()
    path = build / "report.json"
    report = json.loads(path.read_text()) if path.exists() else None
    return Ranks(codes, log.read_text(errors="replace"), report)


def run(build: Path, world: int = 2, extra: list[str] = (), flags: list[str] = ()) -> Ranks:
    (build / "report.json").unlink(missing_ok=True)
    procs, sink, log = start(build, world, extra, flags)
    return finish(build, procs, sink, log)


def wait_for(log: Path, text: str, procs, limit_s: int = 600) -> None:
    """Poll the ranks' log until ``text`` appears (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if any(p.poll() is not None for p in procs):
            raise AssertionError(f"a rank exited before {text!r}:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared in {log}")


def signal_ranks(procs, sig=signal.SIGUSR1) -> None:
    for p in procs:
        p.send_signal(sig)


def losses(report: dict) -> dict[int, float]:
    return {s["step"]: s["loss"] for s in report["steps"]}
