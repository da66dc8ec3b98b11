"""torchrun.sh with Megatron-LM's loop (moeforge.runtime.megatron, .venv312): USR1 -> checkpoint -> exit 75 -> resume.

The tiny recipe compiled for megatron-core 0.19.2 with the megatron-lm entrypoint and a checkpoint
directory (with a blank and a quote in it). A USR1 sent to torchrun.sh once training runs reaches the
ranks (torchrun's children); they save and stop, the report says "preempted" and the script exits
75. Run again, the job resumes from that checkpoint (checkpoint.load: auto) and finishes.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV312 = Path(os.environ.get("MOEFORGE_VENV312", ROOT / ".venv312"))
READY = (VENV312 / ".installed").exists() and (VENV312 / "bin" / "python").exists()

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not READY, reason=".venv312 is not built (`make setup312`): moeforge.runtime.megatron "
                                                   "needs megatron-core >= 0.17 with megatron/training")]


def _compile(out: Path, ckpt: Path, iters: int) -> Path:
    sets = ["platform.software.megatron_core=0.19.2", "runtime.entrypoint=megatron-lm", f"checkpoint.save={ckpt}",
            "checkpoint.interval=100000", f"training.train_iters={iters}"]
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(out),
                           *[a for s in sets for a in ("--set", s)]],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "tiny-moe" / "cpu"


def _env(home: Path) -> dict:
    return {"PATH": f"{VENV312 / 'bin'}:/usr/bin:/bin", "MOEFORGE_ROOT": str(ROOT), "OMP_NUM_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore", "HOME": str(home)}


def test_usr1_saves_exits_75_and_the_next_run_resumes(tmp_path):
    ckpt = tmp_path / "ck pt's"
    build = _compile(tmp_path / "out", ckpt, iters=400)
    log = tmp_path / "first.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(["bash", str(build / "torchrun.sh")], cwd=tmp_path, env=_env(tmp_path),
                                stdout=fh, stderr=subprocess.STDOUT)
        try:
            # Megatron-LM's training log line (the handler for USR1 is in place by then); polled at most
            # 1200 times: a hang guard, not a timing check
            for _ in range(1200):
                if re.search(r"iteration\s+\d+/\s*\d+", log.read_text(errors="replace")):
                    break
                assert proc.poll() is None, log.read_text()[-4000:]
                time.sleep(0.5)
            else:
                raise AssertionError("training never started")
            proc.send_signal(signal.SIGUSR1)
            rc = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text(errors="replace")
    assert rc == 75, text[-4000:]
    report = json.loads((build / "report.json").read_text())
    assert report["status"] == "preempted"
    saved = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    assert 0 < saved < 400

    again = subprocess.run(["bash", str(build / "torchrun.sh")], cwd=tmp_path, env=_env(tmp_path),
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    report = json.loads((build / "report.json").read_text())
    assert report["status"] == "ok"
    assert report["checkpoint"].get("resumed_from"), report["checkpoint"]  # checkpoint.load auto: the save dir
    steps = [s["step"] for s in report["steps"]]
    assert steps and min(steps) > saved and max(steps) == 400, (saved, steps[:3], steps[-3:])
