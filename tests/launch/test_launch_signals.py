"""Save-on-signal in the launch scripts, run against fake programs (no Slurm, no torch).

launch.sbatch (checkpointing on): Slurm signals the batch shell with USR1 before the time limit; the
shell forwards it to srun (which forwards it to every rank); ranks that saved a checkpoint exit 75,
so srun exits 75, and the script then runs `scontrol requeue $SLURM_JOB_ID` and exits 0.
torchrun.sh (checkpointing on): USR1 or TERM to the script becomes USR1 to torchrun's children (the
ranks); when the ranks wrote report.json with "status": "preempted" the script exits 75.
Also: the 75 the scripts look for is the runtime's EXIT_SAVED_ON_SIGNAL (runtime/errors.py, read as text).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A fake scontrol: `show hostnames` gives one node; `requeue ID` is recorded (one line per call) and
# exits $SCONTROL_RC (default 0).
SCONTROL = r"""#!/bin/bash
if [[ $1 == show && $2 == hostnames ]]; then printf 'node-a\n'; exit 0; fi
if [[ $1 == requeue ]]; then printf '%s\n' "$*" >>"$SHIM_OUT/scontrol-requeue"; exit "${SCONTROL_RC:-0}"; fi
exit 1
"""

# A fake srun: records that it started, then either exits $SRUN_RC at once, or (SRUN_WAIT=1) waits
# for USR1, records it and exits $SRUN_RC_ON_USR1 (default 75), or with SRUN_AFTER_USR1=ignore keeps
# running a moment after the signal and then exits $SRUN_RC_LATER: the script must wait again.
SRUN = r"""#!/bin/bash
printf '%s\0' "$@" >"$SHIM_OUT/srun-argv"
printf '%s\n' "$$" >"$SHIM_OUT/srun-pid"
got=0
trap 'got=$((got + 1)); printf "usr1\n" >>"$SHIM_OUT/srun-usr1"' USR1
touch "$SHIM_OUT/srun-started"
if [[ ${SRUN_WAIT:-0} != 1 ]]; then exit "${SRUN_RC:-0}"; fi
for _ in $(seq 600); do
    if ((got)); then break; fi
    sleep 0.05
done
if [[ ${SRUN_AFTER_USR1:-} == ignore ]]; then
    sleep 1
    exit "${SRUN_RC_LATER:-3}"
fi
exit "${SRUN_RC_ON_USR1:-75}"
"""

# A fake torchrun (the interpreter torchrun.sh runs as `python3 -m torch.distributed.run ...`): starts
# one "rank" child and waits for it, then exits 1 when the rank failed (as torchrun does), else 0. The
# rank waits for USR1; on it, it writes the report ("status": "preempted" unless RANK_REPORT=none)
# into the --out directory (the last argument) and exits 75. RANK_WAIT=0: the rank exits 0 at once.
TORCHRUN = r"""#!/bin/bash
out_dir="${!#}"
bash -c '
    got=0
    trap "got=1" USR1
    touch "$SHIM_OUT/rank-started"
    if [[ ${RANK_WAIT:-1} != 1 ]]; then exit 0; fi
    for _ in $(seq 600); do
        if ((got)); then break; fi
        sleep 0.05
    done
    printf "usr1\n" >>"$SHIM_OUT/rank-usr1"
    if [[ ${RANK_REPORT:-preempted} == preempted ]]; then
        printf "{\"status\": \"preempted\", \"step\": 7}\n" >"$1/report.json"
    fi
    exit 75
' rank "$out_dir" &
rank=$!
status=0
wait "$rank" || status=$?
if ((status != 0)); then exit 1; fi
exit 0
"""


def _shims(tmp_path: Path, python: str) -> tuple[Path, Path]:
    bin_dir, out = tmp_path / "shim-bin", tmp_path / "shim-out"
    bin_dir.mkdir()
    out.mkdir()
    for name, body in (("srun", SRUN), ("scontrol", SCONTROL), (python, TORCHRUN)):
        (bin_dir / name).write_text(body, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    return bin_dir, out


def _env(bin_dir: Path, out: Path, cwd: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(cwd), "SHIM_OUT": str(out),
           "LC_ALL": "C.UTF-8", "DATA_ROOT": "/data root"}
    env.update(extra)
    return env


def _wait_for(path: Path, proc: subprocess.Popen, polls: int = 1500) -> None:
    """Poll for ``path`` (every 20 ms, at most ``polls`` times: a hang guard, not a timing check)."""
    for _ in range(polls):
        if path.exists():
            return
        assert proc.poll() is None, f"the script ended ({proc.returncode}) before {path.name} appeared"
        time.sleep(0.02)
    raise AssertionError(f"{path.name} never appeared")


@pytest.fixture
def job(tmp_path, rendering):
    """A checkout with launch.sbatch/torchrun.sh rendered (checkpointing on) and fakes on PATH."""

    def make(checkpointing: bool = True, full: bool = False):
        ctx = rendering.full_context() if full else rendering.benign_context()
        if checkpointing and not full:
            rendering.with_checkpointing(ctx)
        if not checkpointing:
            ctx.update(checkpointing=False, runtime_module="moeforge.runtime.train")
            ctx["slurm"]["signal"] = None
        root = tmp_path / "repo root"
        paths = rendering.render_all(ctx, root / ctx["build_dir"])
        (root / ctx["build_dir"] / ctx["plan_file"]).write_text("{}\n", encoding="utf-8")
        bin_dir, out = _shims(tmp_path, ctx["python"])
        return ctx, root, paths, bin_dir, out

    return make


SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node-a"}


def _requeues(out: Path) -> list[str]:
    path = out / "scontrol-requeue"
    return path.read_text().splitlines() if path.exists() else []


# --- launch.sbatch ------------------------------------------------------------------------------


@pytest.mark.parametrize("full", [False, True])
def test_ranks_saved_on_signal_requeue_the_job(job, full):
    ctx, root, paths, bin_dir, out = job(full=full)
    proc = subprocess.run(["bash", str(paths["launch.sbatch"])], cwd=root, capture_output=True, text=True,
                          timeout=60, env=_env(bin_dir, out, root, {**SLURM, "SRUN_RC": "75"}))
    assert proc.returncode == 0, proc.stderr
    assert _requeues(out) == ["requeue 4242"]
    assert "requeueing job 4242" in proc.stderr


@pytest.mark.parametrize("rc", [0, 1, 137])
def test_other_exits_do_not_requeue(job, rc):
    ctx, root, paths, bin_dir, out = job()
    proc = subprocess.run(["bash", str(paths["launch.sbatch"])], cwd=root, capture_output=True, text=True,
                          timeout=60, env=_env(bin_dir, out, root, {**SLURM, "SRUN_RC": str(rc)}))
    assert proc.returncode == rc, proc.stderr
    assert _requeues(out) == []


def test_without_checkpointing_75_is_just_a_failure(job):
    ctx, root, paths, bin_dir, out = job(checkpointing=False)
    proc = subprocess.run(["bash", str(paths["launch.sbatch"])], cwd=root, capture_output=True, text=True,
                          timeout=60, env=_env(bin_dir, out, root, {**SLURM, "SRUN_RC": "75"}))
    assert proc.returncode == 75
    assert _requeues(out) == []
    assert "srun exited with status 75" in proc.stderr


def test_failed_requeue_keeps_the_status(job):
    ctx, root, paths, bin_dir, out = job()
    env = _env(bin_dir, out, root, {**SLURM, "SRUN_RC": "75", "SCONTROL_RC": "1"})
    proc = subprocess.run(["bash", str(paths["launch.sbatch"])], cwd=root, capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 75
    assert _requeues(out) == ["requeue 4242"]
    assert "scontrol requeue 4242 failed" in proc.stderr


def _run_and_signal(script: Path, root: Path, env: dict, started: Path, sig: int) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(["bash", str(script)], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(started, proc)
        time.sleep(0.2)  # the script is in `wait` by now
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_usr1_to_the_batch_shell_reaches_srun_and_requeues(job):
    """Slurm's --signal=B:USR1 reaches only the batch shell: it must pass it to srun, then requeue."""
    ctx, root, paths, bin_dir, out = job()
    env = _env(bin_dir, out, root, {**SLURM, "SRUN_WAIT": "1"})
    done = _run_and_signal(paths["launch.sbatch"], root, env, out / "srun-started", signal.SIGUSR1)
    assert (out / "srun-usr1").read_text() == "usr1\n", done.stderr
    assert done.returncode == 0, done.stderr
    assert _requeues(out) == ["requeue 4242"]
    assert "forwarding it to srun" in done.stderr


def test_after_forwarding_the_script_waits_for_srun_again(job):
    """The trap cuts `wait` short; srun still runs and its own status is the job's."""
    ctx, root, paths, bin_dir, out = job()
    env = _env(bin_dir, out, root, {**SLURM, "SRUN_WAIT": "1", "SRUN_AFTER_USR1": "ignore", "SRUN_RC_LATER": "3"})
    done = _run_and_signal(paths["launch.sbatch"], root, env, out / "srun-started", signal.SIGUSR1)
    assert (out / "srun-usr1").read_text() == "usr1\n"
    assert done.returncode == 3, done.stderr
    assert _requeues(out) == []


def test_without_checkpointing_usr1_is_not_trapped(job):
    ctx, root, paths, bin_dir, out = job(checkpointing=False)
    env = _env(bin_dir, out, root, {**SLURM, "SRUN_WAIT": "1"})
    proc = subprocess.Popen(["bash", str(paths["launch.sbatch"])], cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_for(out / "srun-started", proc)
        time.sleep(0.2)
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=60) == -signal.SIGUSR1  # the default action: the shell ends
    finally:
        if proc.poll() is None:
            proc.kill()
        pid_file = out / "srun-pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGUSR1)  # let the fake srun (ours) end
            except ProcessLookupError:
                pass
    assert _requeues(out) == []


# --- torchrun.sh --------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_torchrun_sh_passes_usr1_to_the_ranks_and_exits_75(job, sig):
    ctx, root, paths, bin_dir, out = job()
    done = _run_and_signal(paths["torchrun.sh"], root, _env(bin_dir, out, root, {}), out / "rank-started", sig)
    assert (out / "rank-usr1").read_text() == "usr1\n", done.stderr
    assert done.returncode == 75, done.stderr
    assert "saved a checkpoint on a signal" in done.stderr


def test_torchrun_sh_without_a_preempted_report_keeps_torchruns_status(job):
    ctx, root, paths, bin_dir, out = job()
    env = _env(bin_dir, out, root, {"RANK_REPORT": "none"})
    done = _run_and_signal(paths["torchrun.sh"], root, env, out / "rank-started", signal.SIGUSR1)
    assert (out / "rank-usr1").exists()
    assert done.returncode == 1, done.stderr


def test_torchrun_sh_ignores_an_old_preempted_report(job):
    """A report from an earlier run (older than this launch) says nothing about this one."""
    ctx, root, paths, bin_dir, out = job()
    report = root / ctx["build_dir"] / ctx["report_file"]
    report.write_text('{"status": "preempted"}\n')
    os.utime(report, (time.time() - 3600, time.time() - 3600))
    done = subprocess.run(["bash", str(paths["torchrun.sh"])], cwd=root, capture_output=True, text=True,
                          timeout=60, env=_env(bin_dir, out, root, {"RANK_WAIT": "0"}))
    assert done.returncode == 0, done.stderr


def test_torchrun_sh_without_checkpointing_does_not_trap(job):
    ctx, root, paths, bin_dir, out = job(checkpointing=False)
    text = paths["torchrun.sh"].read_text()
    assert "trap '" not in text and "pkill" not in text
    done = subprocess.run(["bash", str(paths["torchrun.sh"])], cwd=root, capture_output=True, text=True,
                          timeout=60, env=_env(bin_dir, out, root, {"RANK_WAIT": "0"}))
    assert done.returncode == 0, done.stderr


# --- the exit code is the runtime's ---------------------------------------------------------------


def test_exit_code_agrees_with_the_runtime():
    """compiler/targets/emit.py's EXIT_SAVED_ON_SIGNAL is runtime/errors.py's (read as text: the compiler
    never imports the runtime)."""
    from moeforge.compiler.targets.emit import EXIT_SAVED_ON_SIGNAL

    text = (ROOT / "runtime" / "errors.py").read_text(encoding="utf-8")
    found = re.findall(r"^EXIT_SAVED_ON_SIGNAL\s*=\s*(\d+)\s*$", text, flags=re.M)
    assert found == [str(EXIT_SAVED_ON_SIGNAL)], f"runtime/errors.py EXIT_SAVED_ON_SIGNAL: {found}"
