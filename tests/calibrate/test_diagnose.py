"""`moeforge diagnose` on real CPU runs: each names the wall the run was built to hit, and the fixes it offers
compile.

Three short runs of tiny-moe/cpu on 2 CPU ranks (moeforge.runtime.train --profile, module fixture: each trained
once): a tiny model with no expert parallelism (host overhead: Python and operator dispatch around
arithmetic that takes microseconds), many all-to-alls with EP overlap off over a slow network
(communication), and full recompute on a platform whose memory budget (platform.memory_budget_gb) the run
sits at (memory).  The split comes from the profiler trace; nothing asserts on a time, only on which wall
is largest and on what the fixes compile to.

The communication run gets a network as slow as a congested link (a namespace whose loopback a token
bucket holds to 20 Mbit/s): over the open loopback of a 2-core machine the all-to-alls' few ms of latency
were as long as the Python around them, and which of the two came out larger depended on what else ran.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moeforge.compiler.diagnose import trace

# which wall dominates depends on what else uses the CPUs: these runs train alone, after the parallel workers
pytestmark = pytest.mark.serial
ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
LEAN = ["model.architecture.hidden_dropout=0", "model.architecture.attention_dropout=0",
        "model.moe.router_load_balancing_type=none"]
CASES = {
    "host overhead": ["parallelism.ep=1", "moe.overlap.ep_comm=false", "training.micro_batch_size=1",
                      "training.global_batch_size=16", "training.seq_length=16", *LEAN],
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
    return subprocess.run([sys.executable, "-m", "moeforge.compiler", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


SLOW_NETWORK = ("ip link set lo mtu 1500 up && tc qdisc add dev lo root tbf rate 20mbit burst 16kb latency 1s"
                ' && exec "$@"')


def slow_network() -> list[str] | None:
    """The command prefix that runs a command in a network namespace with a 20 Mbit/s loopback, or None where
    this machine cannot make one (not root, no namespaces, no tbf queueing discipline)."""
    probe = ["unshare", "-n", "sh", "-c", SLOW_NETWORK, "sh", "true"]
    try:
        ok = subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return probe[:-1] if ok else None


def train(root: Path, name: str, sets: list[str], steps: str, prefix: tuple[str, ...] | list[str] = ()) -> Path:
    cmd = ["compile", "tiny-moe/cpu", "--out", str(root / name), "--quiet", "--set", "training.train_iters=5"]
    for s in sets:
        cmd += ["--set", s]
    proc = moeforge(*cmd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    build = root / name / "tiny-moe" / "cpu"
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from runtime_testlib import free_port, subprocess_env

    run = subprocess.run([*prefix, TORCHRUN, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                          str(free_port()), "-m", "moeforge.runtime.train", str(build / "plan.json"), "--profile", steps],
                         cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return build


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    root = tmp_path_factory.mktemp("walls")
    out = {}
    slow = slow_network()
    for wall, sets in CASES.items():
        if wall == "communication" and slow is None:
            continue
        build = train(root, wall.split()[0], sets, "4" if wall == "communication" else "4-5",  # its trace: 20 MB a step
                      slow if wall == "communication" else ())
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
    if wall not in diagnosed:
        pytest.skip("a slow network needs root, network namespaces and tc's tbf: " + SLOW_NETWORK)
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
    if wall not in diagnosed:
        pytest.skip("a slow network needs root, network namespaces and tc's tbf: " + SLOW_NETWORK)
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


def test_a_wait_on_gloo_s_own_thread_is_communication(tmp_path):
    """gloo runs an asynchronous all-reduce on its own thread; the caller's wait for it is no operator, so
    the main thread shows a gap there: communication, not host overhead.  Arithmetic that overlaps it is
    compute, as a GEMM kernel overlapping NCCL is on a GPU."""
    main, gloo = 1, 2
    events = [{"ph": "X", "name": "moeforge.step 4", "ts": 0, "dur": 1000, "tid": main, "cat": "user_annotation"},
              {"ph": "X", "name": "aten::mm", "ts": 0, "dur": 300, "tid": main, "cat": "cpu_op"},
              {"ph": "X", "name": "gloo:all_reduce", "ts": 200, "dur": 600, "tid": gloo, "cat": "user_annotation"},
              {"ph": "X", "name": "aten::add_", "ts": 900, "dur": 50, "tid": main, "cat": "cpu_op"}]
    path = tmp_path / "rank0.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    s = trace.split(path)
    assert s.device == "cpu" and s.steps == 1
    assert s.compute_s == pytest.approx(350e-6)           # the two operators' self time
    assert s.communication_s == pytest.approx(500e-6)     # 200..800 less the 100 us the mm overlaps
    assert s.host_s == pytest.approx(150e-6)              # 800..900 and 950..1000: Python


def test_the_split_is_the_rank_the_others_waited_for(tmp_path):
    """Rank 1 reached the all-reduce 400 us late (a busy host), so rank 0 waited there: that wait is rank 1's
    work, not the network.  The diagnosis reads the rank with the least communication."""
    def rank(path: Path, arrive: int) -> Path:
        events = [{"ph": "X", "name": "moeforge.step 4", "ts": 0, "dur": 1000, "tid": 1, "cat": "user_annotation"},
                  {"ph": "X", "name": "aten::mm", "ts": 0, "dur": 100, "tid": 1, "cat": "cpu_op"},
                  {"ph": "X", "name": "gloo:all_reduce", "ts": arrive, "dur": 900 - arrive, "tid": 2,
                   "cat": "user_annotation"}]
        path.write_text(json.dumps({"traceEvents": events}))
        return path

    early, late = trace.split(rank(tmp_path / "rank0.json", 400)), trace.split(rank(tmp_path / "rank1.json", 800))
    assert early.communication_s == pytest.approx(500e-6) and late.communication_s == pytest.approx(100e-6)
    assert trace.critical([early, late]) is late and trace.critical([]) is None
