"""Megatron-LM training logs, read line by line (a log of any length): the per-iteration line, the memory
report and the theoretical-memory line that Megatron-LM's training loop prints.

The formats are the release's own (megatron/training/training.py ``training_log``; the same text in
Megatron-LM core_v0.16.1 and in the megatron-core 0.19.2 wheel, only the line numbers differ):

  per iteration  training.py 0.16.1:2033-2083, 0.19.2:2844-2897, printed by print_rank_last:
                 `` [<%Y-%m-%d %H:%M:%S.%f>] iteration {:8d}/{:8d} | consumed samples: {:12d} | ...
                 elapsed time per iteration (ms): {:.1f} | [throughput per GPU (TFLOP/s/GPU): {:.1f} |]
                 ... global batch size: {:5d} | <loss>: {:.6E} | ... number of nan iterations: {:3d} |``
  memory         utils.py 0.16.1:283-291 (0.19.2 utils/common_utils.py:321-334), on every rank with DP rank 0:
                 ``[Rank R] <name> memory (MB) | allocated: {:.2f} | max allocated: {:.2f} | reserved:
                 {:.2f} | max reserved: {:.2f}[ | total device memory used: {:.2f}]``
  theoretical    theoretical_memory_usage.py 0.16.1:365-368, 0.19.2:481-484 (rank 0):
                 ``Theoretical memory footprints: weight and optimizer={:.2f} MB, activation={:.2f} MB,
                 total={:.2f} MB``

"elapsed time per iteration" averages the iterations since the previous printed line, and the first
printed line is not reset, so the second one averages over the first iteration too (training.py
0.19.2:2594, 2824-2825): the steady state drops both.  A launcher's own prefix (srun's ``0:``, a
timestamp) before a line is allowed.  Nothing here imports torch, megatron or the rest of moeforge.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import stat
import statistics
from dataclasses import dataclass, field
from pathlib import Path

MB = 1024 * 1024
_ITERATION = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6})\] iteration\s+(\d+)/\s*(\d+) \|(.*)$")
_MEMORY = re.compile(r"\[Rank (\d+)\] (.*?) memory \(MB\) \| (.*)$")
_THEORETICAL = re.compile(r"Theoretical memory footprints: weight and optimizer=([\d.]+) MB, "
                          r"activation=([\d.]+) MB, total=([\d.]+) MB")
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
# fragment label -> our key (training.py training_log; labels may contain spaces: "lm loss")
_FIELDS = {"consumed samples": "consumed_samples", "skipped samples": "skipped_samples",
           "elapsed time per iteration (ms)": "elapsed_ms", "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
           "learning rate": "learning_rate", "global batch size": "global_batch_size", "loss scale": "loss_scale",
           "grad norm": "grad_norm", "number of skipped iterations": "skipped_iterations",
           "number of nan iterations": "nan_iterations", "energy per GPU (J/iter/GPU)": "energy_j",
           "power per GPU (W/GPU)": "power_w", "num zeros": "num_zeros", "params norm": "params_norm"}


MAX_LINE = 64 * 1024          # a training_log line is under 1 KB; a longer one is not Megatron-LM's: skipped
MAX_BYTES = 2.0 ** 50         # a memory report above a petabyte is not a rank's
MAX_LOG_BYTES = 16 * 1024 ** 3  # a month of printed iterations is a few hundred MB
# elapsed time per iteration (ms): positive and at most a day (a longer step is a hung or misread one)
ELAPSED_MS = (0.0, 86_400_000.0)


class LogError(ValueError):
    """A log that holds no training iteration: one line saying which file and why."""


@dataclass
class Iteration:
    iteration: int
    train_iters: int
    timestamp: str
    values: dict = field(default_factory=dict)   # elapsed_ms, tflops_per_gpu, global_batch_size, ...
    losses: dict = field(default_factory=dict)   # "lm loss", "load_balancing_loss", "mtp_1 loss", ...


@dataclass
class Log:
    """What one log says, with the sha256 of its bytes (how a calibration names the run)."""

    path: str
    digest: str
    iterations: list = field(default_factory=list)
    memory: list = field(default_factory=list)         # (rank, name, {allocated, max_allocated, ...} in bytes)
    theoretical: dict | None = None                     # bytes
    finished: bool = False                              # "[after training is done]"
    lines: int = 0

    def steady_iterations(self) -> list[Iteration]:
        """The printed lines that average steady iterations only: the first two printed lines of every
        start (or resume: the iteration counter restarts below the previous one) dropped."""
        out, starts, previous = [], 0, None
        for it in self.iterations:
            if previous is not None and it.iteration <= previous:
                starts = 0  # a resumed run prints its first iteration again
            starts += 1
            previous = it.iteration
            if starts > 2 and not it.values.get("skipped_iterations") and "elapsed_ms" in it.values:
                out.append(it)
        return out

    def step_time_s(self) -> tuple[float, int]:
        """(median steady elapsed time per iteration in seconds, printed lines it is the median of); with
        fewer than three printed lines, the last one's (it still averages over the first iteration)."""
        steady = self.steady_iterations()
        if not steady:
            timed = [it for it in self.iterations if "elapsed_ms" in it.values]
            if not timed:
                raise LogError(f"{self.path}: no 'elapsed time per iteration' line (Megatron-LM's training_log): "
                               "is this a Megatron-LM training log?")
            return timed[-1].values["elapsed_ms"] / 1e3, 1
        return statistics.median(it.values["elapsed_ms"] for it in steady) / 1e3, len(steady)

    def peak_memory(self) -> dict | None:
        """The largest ``max allocated`` and ``max reserved`` any rank reported, in bytes (None when no
        report or every report is zero: a CPU run's stand-ins report nothing)."""
        best = {}
        for _, _, values in self.memory:
            for key in ("max_allocated", "max_reserved"):
                if values.get(key):
                    best[key] = max(best.get(key, 0), values[key])
        return best or None

    def global_batch_size(self) -> int | None:
        """The batch every logged iteration agrees on; None when the log shows none or several (no run to calibrate)."""
        sizes = {it.values.get("global_batch_size") for it in self.iterations} - {None}
        return sizes.pop() if len(sizes) == 1 else None


def _number(text: str):
    text = text.strip()
    if not _NUMBER.match(text):
        return None
    value = float(text)
    return int(value) if re.fullmatch(r"[-+]?\d+", text) else value


def parse_iteration(line: str) -> Iteration | None:
    """One per-iteration line, or None when ``line`` is not one."""
    m = _ITERATION.search(line)
    if not m:
        return None
    it = Iteration(int(m.group(2)), int(m.group(3)), m.group(1))
    for fragment in m.group(4).split("|"):
        label, sep, value = fragment.strip().rpartition(": ")
        if not sep:
            continue
        number = _number(value)
        if number is None:
            continue
        if label in _FIELDS:
            it.values[_FIELDS[label]] = number
        elif "loss" in label:
            it.losses[label] = number
        else:
            it.values[label] = number  # MoE metrics (0.18+), RL toks/s: kept under their own names
    return it


def _check(log: Log, it: Iteration, number: int) -> None:
    """Every number an iteration line gives is finite, its elapsed time in ELAPSED_MS: a log whose clock went
    backwards or printed 1e308 would calibrate to nonsense."""
    for key, value in it.values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise LogError(f"{log.path}:{number}: {key} is {value}: not a finite number; is the log corrupted?")
    elapsed = it.values.get("elapsed_ms")
    if elapsed is not None and not ELAPSED_MS[0] < elapsed <= ELAPSED_MS[1]:
        raise LogError(f"{log.path}:{number}: elapsed time per iteration (ms) {elapsed:g} is outside "
                       f"({ELAPSED_MS[0]:g}, {ELAPSED_MS[1]:g}] (more than 0, at most a day): is the log corrupted? "
                       "pass the log Megatron-LM wrote")


def parse_memory(line: str) -> tuple[int, str, dict] | None:
    """A `[Rank N] ... memory (MB) | ...` line as (rank, stage, bytes by label); refuses an MB value out of range."""
    m = _MEMORY.search(line)
    if not m:
        return None
    values = {}
    for part in m.group(3).split("|"):
        label, sep, value = part.strip().partition(": ")
        number = _number(value) if sep else None
        if number is not None:
            if not 0 <= number * MB <= MAX_BYTES:  # also NaN; 1e308 MB is inf bytes, which int() refuses
                raise ValueError(f"{label.strip()} {number:g} MB is outside [0, {MAX_BYTES / MB:g}] MB")
            values[label.replace(" ", "_")] = int(round(number * MB))
    return int(m.group(1)), m.group(2), values


def _lines(f, digest, path):
    """(line number, text) of each line, at most MAX_LINE bytes kept of one (the rest read and hashed, never
    held: a log without newlines is not read into memory whole), MAX_LOG_BYTES in all."""
    number, total, piece, long = 0, 0, b"", False
    while True:
        chunk = f.readline(MAX_LINE)
        if not chunk:
            break
        total += len(chunk)
        if total > MAX_LOG_BYTES:
            raise LogError(f"{path}: larger than {MAX_LOG_BYTES >> 30} GiB: pass the last rank's log of one run")
        digest.update(chunk)
        if not chunk.endswith(b"\n"):
            if not long and len(piece) + len(chunk) > MAX_LINE:
                piece, long = b"", True
            elif not long:
                piece += chunk
            continue
        number += 1
        line, piece, skip = piece + chunk, b"", long
        long = False
        if not skip and len(line) <= MAX_LINE:
            yield number, line.decode("utf-8", errors="replace").rstrip("\r\n")
    if piece and not long:
        yield number + 1, piece.decode("utf-8", errors="replace").rstrip("\r\n")


def read(path: Path | str) -> Log:
    """Read a log line by line (never whole; a regular file only: a FIFO or a device could block or never
    end): iterations, memory reports, the theoretical line."""
    path = Path(path)
    digest = hashlib.sha256()
    log = Log(str(path), "")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise LogError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LogError(f"{path}: not a regular file (a FIFO, a device or a directory is not read): "
                           "pass the training log itself")
        with os.fdopen(fd, "rb", closefd=False) as f:
            for number, line in _lines(f, digest, path):
                log.lines = number
                _take(log, line, number)
    except OSError as exc:
        raise LogError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    log.digest = digest.hexdigest()
    if not log.iterations:
        raise LogError(f"{path}: no Megatron-LM iteration line (' [date] iteration N/M | ... |') in "
                       f"{log.lines} line(s): is this the log of the last rank, which prints them?")
    return log


def _take(log: Log, line: str, number: int = 0) -> None:
    if "iteration" in line and "|" in line:
        it = parse_iteration(line)
        if it is not None:
            _check(log, it, number)
            log.iterations.append(it)
            return
    if "memory (MB)" in line:
        try:
            mem = parse_memory(line)
        except ValueError as exc:
            raise LogError(f"{log.path}:{number}: {exc}: is the log corrupted? pass the log Megatron-LM wrote") from None
        if mem is not None:
            log.memory.append(mem)
            return
    if line.startswith("Theoretical memory footprints") or "Theoretical memory footprints:" in line:
        m = _THEORETICAL.search(line)
        if m and all(_number(g) is not None for g in m.groups()):  # [\d.]+ also matches "1.2.3"
            log.theoretical = {"weight_and_optimizer": float(m.group(1)) * MB,
                               "activation": float(m.group(2)) * MB, "total": float(m.group(3)) * MB}
    elif "[after training is done]" in line:
        log.finished = True
