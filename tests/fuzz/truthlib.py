"""Run-time truth: compile a recipe override set, then train one step of its plan with megatron-core.

Why: the compiler's promise is that a recipe it accepts runs. Its rules mirror what Megatron validates;
this helper checks the promise itself, so a configuration that compiles and then fails at run time shows
up as a failing example (a missing rule, compiler/rules/).

Cost: megatron-core takes seconds to import, so the test process imports the runtime once (`warm()`)
and every example forks from it: one child per rank (gloo over loopback), warm, its parallel state and
CPU stand-ins private to it. The runtime is reached through one name, RUNTIME_ENTRY (its `main(argv)`),
so a reorganisation of runtime/ touches this file only.
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RUNTIME_ENTRY = "moeforge.runtime.train"  # `main(argv) -> int`, the module torchrun and srun start
STEP_TIMEOUT_S = 240.0  # a hang guard, never a speed check


@dataclass
class Step:
    """What one training step of a compiled plan did: every rank's exit code, their output, the report."""
    codes: list[int]
    output: str
    report: dict | None

    @property
    def ok(self) -> bool:
        return all(c == 0 for c in self.codes) and self.report is not None and self.report.get("status") == "ok"


def _main():
    return importlib.import_module(RUNTIME_ENTRY).main


def warm() -> None:
    """Import the runtime and megatron-core's model classes once, in this process, before any fork."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _main()
    importlib.import_module("megatron.core.models.gpt")


def compile_plan(overrides: list[str], root: Path | None = None, explain: bool = True):
    """(plan dict, None), or (None, CompileError) when the compiler refuses the overrides on tiny-moe/cpu;
    explain=False skips the minimal pins and fixes of a refusal (most of its cost; the rule ids stay)."""
    from moeforge.compiler.diagnostics import CompileError
    from moeforge.compiler.driver import compile as compile_recipe

    try:
        return compile_recipe("tiny-moe/cpu", overrides, root, explain_errors=explain).plan, None
    except CompileError as err:
        return None, err


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(plan_path: Path, rank: int, world: int, port: int, log: Path) -> None:
    """The forked child: the environment torchrun would give rank `rank`, then the runtime's main; never returns."""
    code = 70
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)  # not pytest's capture
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="",
                          PYTHONWARNINGS="ignore")
        try:
            code = _main()([str(plan_path), "--out", str(plan_path.parent)]) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child must never return into pytest
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def train_one_step(plan: dict, out: Path) -> Step:
    """Write `plan` (one step, synthetic data) under `out` and train it on its world size of forked ranks."""
    plan = json.loads(json.dumps(plan))
    plan["training"]["train_iters"] = 1
    plan["training"]["report_window"] = [1, 1]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "plan.json"
    path.write_text(json.dumps(plan, indent=1))
    world = plan["layout"]["world_size"]
    port = _free_port()
    logs = [out / f"rank{r}.log" for r in range(world)]
    pids = []
    for r in range(world):
        pid = os.fork()
        if pid == 0:
            _rank(path, r, world, port, logs[r])
        pids.append(pid)
    codes = _wait(pids)
    output = "\n".join(f"[rank {r}] " + log.read_text(errors="replace") for r, log in enumerate(logs)
                       if log.exists())
    report = out / "report.json"
    return Step(codes, output, json.loads(report.read_text()) if report.exists() else None)


def _wait(pids: list[int]) -> list[int]:
    """Every rank's exit code; past STEP_TIMEOUT_S the ones still running are killed (a hang is a failure)."""
    codes: dict[int, int] = {}
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while len(codes) < len(pids):
        for pid in pids:
            if pid in codes:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[pid] = os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            for pid in pids:
                if pid not in codes:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    codes[pid] = -signal.SIGKILL
        time.sleep(0.05)
    return [codes[p] for p in pids]
