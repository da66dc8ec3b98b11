"""Issue 46 (items 3, 6, 7) for the Megatron-LM logs `calibrate --log` reads: a FIFO is refused, not waited
on; a device (/dev/zero) is not read; a log without newlines is read in bounded memory; an elapsed time that
is negative, zero or 1e308 is one line naming the log's line, never a negative step time or a traceback.
"""
from __future__ import annotations

import json
import os
import re
import tracemalloc

import pytest

from moeforge.compiler import driver
from moeforge.compiler.calibrate import megatron_log


def line(iteration: int, elapsed_ms: str) -> str:
    return (f" [2026-11-28 10:00:0{iteration}.000000] iteration {iteration:8d}/      10 | consumed samples: "
            f"{iteration * 8:12d} | elapsed time per iteration (ms): {elapsed_ms} | global batch size:     8 | "
            "lm loss: 1.000000E+01 |\n")


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(driver.compile("tiny-moe/cpu", []).plan))
    return path


def test_a_fifo_log_is_refused_not_waited_on(sandbox, moeforge_cli, tmp_path, plan_json):
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)  # nobody writes: a plain open() for reading waits forever
    proc = moeforge_cli(sandbox, "calibrate", "--log", str(fifo), str(plan_json), "--dry-run", timeout=60)
    assert proc.returncode == 1 and f"{fifo}: not a regular file" in proc.stderr, proc.stderr


def test_a_device_log_is_not_read(sandbox, moeforge_cli, plan_json):
    proc = moeforge_cli(sandbox, "calibrate", "--log", "/dev/zero", str(plan_json), "--dry-run", timeout=60)
    assert proc.returncode == 1 and "/dev/zero: not a regular file" in proc.stderr, proc.stderr


def test_a_log_without_newlines_is_read_in_bounded_memory(tmp_path):
    """256 MB of one line (sparse: no disk) then a real iteration: the reader holds at most MAX_LINE of it."""
    log = tmp_path / "train.log"
    with open(log, "wb") as fh:
        fh.truncate(256 << 20)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n" + "".join(line(i, "100.0") for i in range(1, 5)).encode())
    tracemalloc.start()
    try:
        got = megatron_log.read(log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * megatron_log.MAX_LINE, peak  # the old reader held the whole 256 MB line
    assert got.step_time_s() == (0.1, 2) and got.lines == 5


@pytest.mark.parametrize("elapsed", ["-1.0", "0.0", "1e308", "1e400"])
def test_an_impossible_elapsed_time_names_its_line(tmp_path, elapsed):
    log = tmp_path / "train.log"
    log.write_text("starting\n" + line(1, "100.0") + line(2, elapsed) + line(3, "100.0"))
    if elapsed == "1e400":  # Python reads it as inf
        with pytest.raises(megatron_log.LogError, match=rf"train\.log:3: elapsed_ms is inf"):
            megatron_log.read(log)
        return
    with pytest.raises(megatron_log.LogError, match=rf"train\.log:3: elapsed time per iteration \(ms\) {re.escape(format(float(elapsed), 'g'))} "):
        megatron_log.read(log)


@pytest.mark.parametrize("elapsed", ["-1.0", "1e308"])
def test_calibrate_refuses_an_impossible_log_in_one_line(sandbox, moeforge_cli, tmp_path, plan_json, elapsed):
    log = tmp_path / "train.log"
    log.write_text("".join(line(i, elapsed if i == 4 else "100.0") for i in range(1, 6)))
    proc = moeforge_cli(sandbox, "calibrate", "--log", str(log), str(plan_json), "--dry-run", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{log}:4: elapsed time per iteration" in proc.stderr and "-1.0 ms" not in proc.stdout, proc.stderr


@pytest.mark.parametrize("memory", ["1e308", "-5.00", "nan"])
def test_an_impossible_memory_report_names_its_line(tmp_path, memory):
    log = tmp_path / "train.log"
    log.write_text(line(1, "100.0") + f"[Rank 0] (after 1 iterations) memory (MB) | allocated: 1.00 | max allocated: "
                   f"{memory} | reserved: 2.00 | max reserved: 2.00\n"
                   "Theoretical memory footprints: weight and optimizer=1.2.3 MB, activation=1.0 MB, total=2.0 MB\n")
    if memory == "nan":  # not a number Megatron-LM prints: the field is skipped, the line read
        assert megatron_log.read(log).peak_memory() == {"max_reserved": 2 * megatron_log.MB}
        return
    with pytest.raises(megatron_log.LogError, match=r"train\.log:2: max allocated .* MB is outside"):
        megatron_log.read(log)


@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
def test_a_fifo_or_device_source_is_refused(sandbox, moeforge_cli, tmp_path, source):
    log = tmp_path / "train.log"
    log.write_text(line(1, "100.0"))
    if source == "fifo":
        source = str(tmp_path / "launch.sh")
        os.mkfifo(source)
    proc = moeforge_cli(sandbox, "calibrate", "--log", str(log), source, "--dry-run", timeout=60)
    assert proc.returncode == 1 and f"{source}: not a regular file" in proc.stderr, proc.stderr
