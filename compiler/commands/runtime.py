"""The commands that run the runtime: `moeforge dryrun` and `moeforge data prepare`.

Why a module of their own: they need torch and megatron-core, which the compiler never imports, so
each runs `python -m moeforge.runtime.MODULE` in a subprocess of this interpreter (signals passed on, the
exit code returned); `dryrun` then adds the compiler's memory estimate to the runtime's report.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from moeforge.compiler.bounded import LIMITS, read_json
from moeforge.compiler.commands.dryrun_report import with_estimates
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.estimate.calibration import CalibrationError
from moeforge.compiler.files import write_file_atomically

ROOT = Path(__file__).resolve().parents[2]  # where the compiler and runtime packages are


def cmd_dryrun(args) -> int:
    """`python -m moeforge.runtime.dryrun` in this interpreter, as a subprocess (torch and megatron-core stay out
    of the compiler); a build directory stands for its plan.json."""
    plans = [str(Path(p) / "plan.json") if Path(p).is_dir() else p for p in args.plan]
    with tempfile.TemporaryDirectory(prefix="moeforge-dryrun-") as tmp:
        raw = Path(tmp) / "dryrun.json"
        rest = [*plans, "--rank", args.rank, *(["--local-spec"] if args.local_spec else []), "--out", str(raw)]
        rc = _run_runtime("moeforge.runtime.dryrun", rest, "moeforge dryrun", quiet=True)
        if not raw.is_file():
            return rc
        try:
            text = json.dumps(with_estimates(read_json(raw, LIMITS["report"]), getattr(args, "calibration", None)),
                              indent=2, allow_nan=False) + "\n"
        except CalibrationError as exc:  # one line, as explain, plan-layout and diagnose say it
            print("\n".join(printable(f"moeforge dryrun: error: {line}") for line in str(exc).split("\n")),
                  file=sys.stderr)
            return 1
    if args.out:
        write_file_atomically(Path(args.out), text)
    sys.stdout.write(text)
    return rc


def cmd_data_prepare(rest: list[str]) -> int:
    """Run `python -m moeforge.runtime.data_prepare REST` in this interpreter, as a subprocess: tokenizing
    needs megatron-core (and torch), which the compiler never imports."""
    return _run_runtime("moeforge.runtime.data_prepare", rest, "moeforge data prepare",
                        {"MOEFORGE_DATA_PREPARE_PROG": "moeforge data prepare"})


def _run_runtime(module: str, rest: list[str], prog: str, extra_env: dict | None = None, quiet: bool = False) -> int:
    """`python -m MODULE REST` in this interpreter, as a subprocess. Termination signals are
    passed on, so the child removes its temporaries; its exit code is returned (128+N when a
    signal N ended it). ``quiet``: its stdout is dropped (the caller reads what it wrote)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra_env or {})
    env["MOEFORGE_PARENT_PID"] = str(os.getpid())  # moeforge.runtime.launch.ranks.die_with_parent: it dies with us
    cmd = [sys.executable, "-m", module, *rest]
    child: list[subprocess.Popen] = []

    def forward(signum, frame):
        if child:
            child[0].send_signal(signum)

    handled = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    old = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers: the main thread's only
        old = {s: signal.signal(s, forward) for s in handled}
    try:
        try:
            child.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL if quiet else None))
        except (OSError, ValueError) as exc:  # ValueError: an argument with a NUL byte
            print(printable(f"{prog}: cannot start {sys.executable}: {getattr(exc, 'strerror', None) or exc}"),
                  file=sys.stderr)
            return 2
        while True:  # in steps: a signal landing just before one blocking wait began would reach the child late
            try:
                rc = child[0].wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc
