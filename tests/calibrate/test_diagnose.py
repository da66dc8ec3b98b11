"""`moeforge diagnose` on real CPU runs: each names the wall the run was built to hit, and the fixes it offers
compile.

Three short runs of tiny-moe/cpu on 2 CPU ranks (runtime.train --profile, module fixture: each trained
once): a tiny model with no expert parallelism (host overhead: Python and operator dispatch around
arithmetic that takes microseconds), many latency-bound all-to-alls with EP overlap off (communication:
on 2 CPU cores gloo's all-to-all moves half a GB/s against ~30 GFLOP/s of bf16 GEMM, so bytes never
outweigh the arithmetic as on a GPU cluster; a wide model at a small batch is compute-bound here, and what
the all-to-all costs is its latency, a few ms per call, paid four times per layer and micro-batch), and full
recompute on a platform whose memory budget (platform.memory_budget_gb) the run sits at (memory).  The split comes from the
profiler trace; nothing asserts on a time, only on which wall is largest and on what the fixes compile to.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.diagnose import trace

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
LEAN = ["model.architecture.hidden_dropout=0", "model.architecture.attention_dropout=0",
        "model.moe.router_load_balancing_type=none"]
CASES = {
    "host overhead": ["parallelism.ep=1", "moe.overlap.ep_comm=false", "training.micro_batch_size=1",
                      "training.global_batch_size=8", "training.seq_length=16", *LEAN],
    # one expert per rank, RoPE off the layers (learned positions): little Python per layer, four latency-bound
    # all-to-alls per layer and micro-batch (gloo over loopback: a few ms each, whatever the 32 tokens' size)
    "communication": ["moe.overlap.ep_comm=false", "model.moe.num_experts=2", "model.moe.router_topk=1",
                      "model.moe.router_pre_softmax=true", "model.architecture.num_layers=8",
                      "model.architecture.position_embedding_type=learned_absolute",
                      "training.micro_batch_size=1", "training.global_batch_size=16", "training.seq_length=32", *LEAN],
    "memory": ["moe.overlap.ep_comm=false", "recompute.granularity=full", "recompute.method=uniform",
               "recompute.num_layers=1", "training.seq_length=256", "model.architecture.max_position_embeddings=256",
               "training.micro_batch_size=4", "training.global_batch_size=8", "platform.memory_budget_gb=0.5"],
}


def moeforge(*args):
    return subprocess.run([sys.executable, "-m", "compiler", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def train(root: Path, name: str, sets: list[str], steps: str) -> Path:
    cmd = ["compile", "tiny-moe/cpu", "--out", str(root / name), "--quiet", "--set", "training.train_iters=5"]
    for s in sets:
        cmd += ["--set", s]
    proc = moeforge(*cmd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    build = root / name / "tiny-moe" / "cpu"
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from runtime_testlib import free_port, subprocess_env

    run = subprocess.run([TORCHRUN, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                          str(free_port()), "-m", "runtime.train", str(build / "plan.json"), "--profile", steps],
                         cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return build


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    root = tmp_path_factory.mktemp("walls")
    out = {}
    for wall, sets in CASES.items():
        build = train(root, wall.split()[0], sets, "4" if wall == "communication" else "4-5")  # its trace: 20 MB a step
        proc = moeforge("diagnose", str(build), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        text = moeforge("diagnose", str(build))
        out[wall] = (build, json.loads(proc.stdout), text.stdout)
    return out


def test_the_runtime_wrote_the_asked_steps_trace(diagnosed):
    build, _, _ = diagnosed["host overhead"]
    report = json.loads((build / "report.json").read_text())
    assert report["profile"]["steps"] == [4, 5]
    assert [s.get("profiled", False) for s in report["steps"]] == [False, False, False, True, True]
    assert report["steady_state"]["left_out_profiled"] == [4, 5] and report["steady_state"]["steps"] == 2
    for rank in (0, 1):
        split = trace.split(build / "profile" / f"rank{rank}.trace.json")
        assert split.steps == 2 and split.device == "cpu"
        assert split.communication_s + split.compute_s + split.host_s == pytest.approx(split.step_s, rel=1e-6)


@pytest.mark.parametrize("wall", list(CASES))
def test_diagnose_names_the_wall(diagnosed, wall):
    _, d, text = diagnosed[wall]
    shares = {k: v["share"] for k, v in d["walls"].items()}
    print(f"\n{wall}: {shares} -> {d['dominant']}")
    assert d["dominant"] == wall, (shares, d["walls"])
    assert f"dominant wall: {wall}" in text and "profiler trace" in d["source"]
    assert d["calibration"] is None and "calibration: none" in text


def test_memory_is_named_for_the_recompute_it_needs(diagnosed):
    _, d, _ = diagnosed["memory"]
    numbers = " ".join(d["walls"]["memory"]["numbers"])
    assert "recompute full" in numbers and "memory_budget_gb" in numbers and "peak / capacity" in numbers
    assert "without them the activations grow by" in numbers


@pytest.mark.parametrize("wall", list(CASES))
def test_the_fixes_offered_compile(diagnosed, wall):
    build, d, text = diagnosed[wall]
    plan = json.loads((build / "plan.json").read_text())
    offered = [f for f in d["fixes"] if f["compiles"]]
    assert offered, d["fixes"]
    for fix in offered:  # what diagnose says compiles does compile, on the run's recipe with its own --set values
        args = ["compile", plan["recipe"]["id"], "--out", str(build.parents[2] / "fix"), "--quiet"]
        for s in [*plan["recipe"]["overrides"], *fix["set"]]:
            args += ["--set", s]
        proc = moeforge(*args)
        assert proc.returncode == 0, (fix, proc.stdout + proc.stderr)
        assert fix["estimate_peak_gib"] is not None
    for fix in d["fixes"]:
        assert fix["compiles"] or fix["refused"] or fix["notes"] == ["not a recipe change"]
    refused = [f for f in d["fixes"] if f["refused"]]
    assert all(f"[refused: {f['refused']}]" in text for f in refused)


def test_a_gpu_trace_splits_kernels_from_gaps(tmp_path):
    """Kernels: NCCL overlapped by a GEMM is hidden, the rest exposed; the step's uncovered span is the host's."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "moeforge.step 3", "ts": 0, "dur": 100, "tid": 1},
              {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 10, "dur": 40, "tid": 7},
              {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllToAll", "ts": 30, "dur": 40, "tid": 8},
              {"ph": "X", "cat": "kernel", "name": "elementwise", "ts": 80, "dur": 10, "tid": 7}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    split = trace.split(path)
    assert split.device == "gpu"
    assert split.communication_s == pytest.approx(20e-6)   # 50..70 not under the GEMM
    assert split.compute_s == pytest.approx(50e-6)          # 10..50 and 80..90
    assert split.host_s == pytest.approx(30e-6)             # 0..10, 70..80, 90..100
    path.write_text(json.dumps({"traceEvents": events[1:]}))
    with pytest.raises(trace.TraceError, match="moeforge.step"):
        trace.split(path)
