"""Megatron-LM's training log, as both releases in use print it, read by compiler/calibrate/megatron_log.py.

The log lines are made here by evaluating Megatron-LM's own format strings (quoted with their file and line:
Megatron-LM core_v0.16.1, and the megatron-core 0.19.2 wheel's megatron/training, which matches
core_v0.19.0's lines), so the parser is tested against the text the releases print, not against a copy
of its own regular expressions.  The real log moeforge.runtime.megatron writes on CPU is read in
tests/runtime/test_megatron_training.py (the training there is not repeated here).
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from moeforge.compiler.calibrate import megatron_log, runs

STAMP = datetime(2026, 1, 2, 3, 4, 5, 678901)


def iteration_line(release: str, iteration: int, train_iters: int, elapsed_s: float, *, throughput=None,
                   skipped_samples: int = 0, lr: float | None = 3e-4, gbs: int = 256, losses=None,
                   moe_metrics=None, grad_norm: float | None = 1.234, skipped: int = 0) -> str:
    """training_log's line, fragment by fragment, in emission order."""
    consumed = iteration * gbs
    # core_v0.16.1 megatron/training/training.py:2033-2035 / 0.19.2 :2844-2846
    s = f" [{STAMP.strftime('%Y-%m-%d %H:%M:%S.%f')}]"
    s += ' iteration {:8d}/{:8d} |'.format(iteration, train_iters)
    s += ' consumed samples: {:12d} |'.format(consumed)
    if skipped_samples > 0:  # 0.16.1 :2039 / 0.19.2 :2850
        s += ' skipped samples: {:12d} |'.format(skipped_samples)
    # 0.16.1 :2040 / 0.19.2 :2851
    s += ' elapsed time per iteration (ms): {:.1f} |'.format(elapsed_s * 1000.0)
    if throughput is not None:  # 0.16.1 :2044 / 0.19.2 :2855 (--log-throughput)
        s += f' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |'
    if release == "0.16.1" or lr is not None:  # 0.16.1 :2062 always; 0.19.2 :2873-2874 only if not None
        s += f' learning rate: {lr:.6E} |'
    s += f' global batch size: {gbs:5d} |'  # 0.16.1 :2063 / 0.19.2 :2875
    for key, avg in (losses or {"lm loss": 6.5432}).items():  # 0.16.1 :2069-2070 (avg > 0) / 0.19.2 :2881-2882
        if (avg > 0.0) if release == "0.16.1" else (avg >= 0.0):
            s += ' {}: {:.6E} |'.format(key, avg)
    if release != "0.16.1" and moe_metrics:  # 0.19.2 :2886 moe_log_string, moe_logging.py: " {k}: {v:.2f} |"
        s += "".join(f" {k}: {v:.2f} |" for k, v in moe_metrics.items())
    s += f' loss scale: {1.0:.1f} |'  # 0.16.1 :2073 / 0.19.2 :2887
    if grad_norm is not None:
        s += f' grad norm: {grad_norm:.3f} |'  # 0.16.1 :2075 / 0.19.2 :2889
    s += ' number of skipped iterations: {:3d} |'.format(skipped)  # 0.16.1 :2080 / 0.19.2 :2894
    s += ' number of nan iterations: {:3d} |'.format(0)  # 0.16.1 :2083 / 0.19.2 :2897
    return s


def memory_line(rank: int, iteration: int, allocated_mb: float, reserved_mb: float, device_used: bool) -> str:
    """report_memory: 0.16.1 megatron/training/utils.py:283-291, 0.19.2 utils/common_utils.py:321-334."""
    string = f'(after {iteration} iterations)' + ' memory (MB)'
    string += f" | allocated: {allocated_mb * 0.8:.2f}"  # torch.cuda.memory_allocated() / mega_bytes
    string += f" | max allocated: {allocated_mb:.2f}"
    string += f" | reserved: {reserved_mb * 0.9:.2f}"
    string += f" | max reserved: {reserved_mb:.2f}"
    if device_used:  # --log-device-memory-used
        string += f" | total device memory used: {reserved_mb * 1.1:.2f}"
    return "[Rank {}] {}".format(rank, string)


def theoretical_line() -> str:
    """theoretical_memory_usage.py 0.16.1:365-368 / 0.19.2:481-484 (rank 0)."""
    return (f"Theoretical memory footprints: weight and optimizer={12345.678:.2f} MB, "
            f"activation={23456.789:.2f} MB, total={35802.467:.2f} MB\n")


def timers_block() -> str:
    """megatron/core/timers.py:344-354 (--timing-log-level >= 1): not a per-iteration line."""
    return "(min, max) time across ranks (ms):" + "\n    {}: ({:.2f}, {:.2f})".format(
        ("forward-backward" + " ").ljust(48, "."), 1201.23, 1203.45)


def write_log(path, release: str, prefix: str = "") -> None:
    lines = ["[after megatron is initialized] datetime: 2026-01-02 03:04:05.678901 ", "some unrelated line | with: 3 |"]
    elapsed = [9.0, 5.0, 1.20, 1.22, 1.18, 1.21, 1.19]  # first two printed lines include the first iteration
    for i, e in enumerate(elapsed, 1):
        lines.append(iteration_line(release, i * 10, 70, e, throughput=410.0 + i, skipped_samples=512 if i == 3 else 0,
                                    lr=None if (release != "0.16.1" and i == 4) else 3e-4,
                                    losses={"lm loss": 6.5 - i * 0.1, "load_balancing_loss": 1.01, "mtp_1 loss": 7.0},
                                    moe_metrics={"tokens_per_expert_max": 1.5}))
        if i == 1:
            lines.append(theoretical_line())
            lines += [memory_line(r, 10, 40000 + r, 52224 + r, release != "0.16.1") for r in (0, 4)]
            lines.append(timers_block())
    lines.append(" validation loss at iteration 70 | lm loss value: 2.345600E+00 | lm loss PPL: 1.043953E+01 | ")
    lines.append("[after training is done] datetime: 2026-01-02 03:04:05.678901 ")
    path.write_text("\n".join(prefix + line for line in lines) + "\n")


@pytest.mark.parametrize("release", ["0.16.1", "0.19.2"])
@pytest.mark.parametrize("prefix", ["", "3: "])  # srun --label prefixes each line with the task
def test_both_releases_formats_are_read(tmp_path, release, prefix):
    path = tmp_path / "train.log"
    write_log(path, release, prefix)
    log = megatron_log.read(path)
    assert [it.iteration for it in log.iterations] == [10, 20, 30, 40, 50, 60, 70]
    first = log.iterations[0]
    assert first.train_iters == 70 and first.timestamp == "2026-01-02 03:04:05.678901"
    assert first.values["elapsed_ms"] == 9000.0 and first.values["tflops_per_gpu"] == 411.0
    assert first.values["global_batch_size"] == 256 and first.values["consumed_samples"] == 2560
    assert first.losses == pytest.approx({"lm loss": 6.4, "load_balancing_loss": 1.01, "mtp_1 loss": 7.0})
    assert log.iterations[2].values["skipped_samples"] == 512
    if release == "0.19.2":  # the MoE metric fragment exists from 0.18 on; the learning rate may be absent
        assert first.values["tokens_per_expert_max"] == 1.5
        assert "learning_rate" not in log.iterations[3].values
    else:
        assert "tokens_per_expert_max" not in first.values
    # the first two printed lines average over the first iteration: the steady state leaves them out
    step_s, lines = log.step_time_s()
    assert lines == 5 and step_s == pytest.approx(1.20)
    assert log.global_batch_size() == 256
    mib = 1024 * 1024
    assert log.peak_memory() == {"max_allocated": round(40004 * mib), "max_reserved": round(52228 * mib)}
    assert log.theoretical["total"] == pytest.approx(35802.47 * mib)
    assert log.finished and len(log.digest) == 64


def test_resumed_run_drops_the_first_lines_of_each_start(tmp_path):
    path = tmp_path / "resumed.log"
    lines = [iteration_line("0.19.2", i, 40, e) for i, e in ((1, 7.0), (2, 3.0), (3, 1.0), (4, 1.0))]
    lines += [iteration_line("0.19.2", i, 40, e) for i, e in ((3, 8.0), (4, 4.0), (5, 1.1), (6, 1.1))]
    path.write_text("\n".join(lines) + "\n")
    log = megatron_log.read(path)
    assert [it.values["elapsed_ms"] for it in log.steady_iterations()] == [1000.0, 1000.0, 1100.0, 1100.0]


def test_cpu_memory_reports_of_zero_are_no_measurement(tmp_path):
    """moeforge.runtime.megatron on CPU prints the memory report with the CUDA stand-ins' zeros."""
    path = tmp_path / "cpu.log"
    zero = "[Rank 0] (after 1 iterations) memory (MB) | allocated: 0.00 | max allocated: 0.00 | reserved: 0.00 | max reserved: 0.00"
    path.write_text(iteration_line("0.19.2", 1, 4, 0.5) + "\n" + zero + "\n")
    log = megatron_log.read(path)
    assert log.memory and log.peak_memory() is None
    assert log.step_time_s() == (0.5, 1)  # one printed line: its value, which includes the first iteration


def test_a_file_that_is_not_a_training_log_is_one_line(tmp_path):
    path = tmp_path / "other.log"
    path.write_text("hello\nworld | x: 1 |\n")
    with pytest.raises(megatron_log.LogError) as err:
        megatron_log.read(path)
    assert "other.log" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(megatron_log.LogError, match="cannot read"):
        megatron_log.read(tmp_path / "missing.log")


def test_a_log_paired_with_the_wrong_launch_is_refused(tmp_path):
    path = tmp_path / "train.log"
    write_log(path, "0.19.2")
    plan = json.loads((Path(__file__).parents[1] / "data" / "tiny-plan.example.json").read_text())
    with pytest.raises(runs.RunError, match="global batch size 256"):
        runs.from_log(path, plan, "tiny-moe/cpu")
    plan["training"]["global_batch_size"] = 256
    run = runs.from_log(path, plan, "tiny-moe/cpu")
    assert run.step_s == pytest.approx(1.20) and run.peak_source == "reserved"
    assert run.peak_bytes == round(52228 * 1024 * 1024) and run.kind == "megatron-log"


def test_calibrate_takes_a_log_with_the_plan_it_ran(tmp_path):
    """`moeforge calibrate --log LOG SOURCE`: the log's steady step time, fitted through the step-time model."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "train.log"
    write_log(log, "0.16.1")
    plan = json.loads((root / "tests" / "data" / "tiny-plan.example.json").read_text())
    plan["training"]["global_batch_size"] = 256
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assumed = [f"--assume={k}=0.5" for k in ("achievable_fraction", "a2a_efficiency", "collective_efficiency")]
    assumed += [f"--assume={k}=1" for k in ("bf16_dense_tflops", "hbm_gbps", "nvlink_gbps", "internode_gbps")]
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", "calibrate", "--log", str(log), str(tmp_path / "plan.json"),
                           "--fit", "host_step_s", "--fix", "activation_scale", *assumed, "--dry-run", "--format", "json"],
                          cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (run,) = doc["runs"]
    assert run["kind"] == "megatron-log" and run["measured_step_s"] == pytest.approx(1.20)
    assert run["estimate_after_s"] == pytest.approx(1.20, rel=1e-3) and run["peak_source"] == "reserved"
    assert doc["time"]["constants"]["host_step_s"]["value"] > 1.0
    # one run determines the allowance alone: its max reserved (52228 MiB) less the model's states and activations
    allowance = doc["memory"]["constants"]["allowance_gib"]["value"]
    assert 45 < allowance < 52228 / 1024 and run["estimate_peak_after_bytes"] == pytest.approx(52228 * 2 ** 20, rel=1e-6)
