"""compiler/targets/emit.py's launch context (what the templates get) and compiler/commands/launch.py (`make launch`).

The context is computed from the compiled plan (runtime.entrypoint, checkpoint, data, logging,
platform, layout) and the recipe's launch.* keys; the templates only print it. Checked here:
the runtime module, requeue/signal only with checkpointing, --exclusive on GPU platforms, --segment
on NVL72 only, the container mounts and Kubernetes volumes (order, dedupe, ${NAME} kept), the logs
directory, and the job's python and logs directory in moeforge.compiler.commands.launch.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from moeforge.compiler.targets import emit, job
from moeforge.compiler.commands import launch as L
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.targets.plan import build

ROOT = Path(__file__).resolve().parents[2]
MEGATRON_LM = ["platform.software.megatron_core=0.19.2", "runtime.entrypoint=megatron-lm"]


def compiled(rid: str, sets=()):
    r = resolve(load(rid, list(sets)))
    return build(r), r.composed.data


def ctx_of(rid: str, sets=(), **launch):
    plan, data = compiled(rid, sets)
    data = {**data, "launch": {**(data.get("launch") or {}), **launch}}
    return emit.context(plan, data, f"build/{rid}")


def sbatch_directives(text: str) -> list[str]:
    out = []
    for line in text.split("\n"):
        if line.startswith("#SBATCH "):
            out.append(line[len("#SBATCH "):])
        elif line.strip() and not line.startswith("#"):
            break
    return out


# --- the runtime module -------------------------------------------------------------------------


def test_runtime_module_follows_the_entrypoint():
    assert ctx_of("tiny-moe/cpu")["runtime_module"] == "moeforge.runtime.train"
    ctx = ctx_of("tiny-moe/cpu", MEGATRON_LM)
    assert ctx["runtime_module"] == "moeforge.runtime.megatron"
    plan, data = compiled("tiny-moe/cpu", MEGATRON_LM)
    files = emit.render(plan, data, "build/tiny-moe/cpu")
    for name in ("torchrun.sh", "launch.sbatch"):
        assert "runtime_module=moeforge.runtime.megatron\n" in files[name]
        assert "moeforge.runtime.train" not in files[name]
    command = yaml.safe_load(files["pytorchjob.yaml"])["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"][0]["command"]
    assert command[command.index("-m", 3) + 1] == "moeforge.runtime.megatron"


def test_unknown_entrypoint_is_a_compile_error():
    plan, data = compiled("tiny-moe/cpu")
    plan["runtime"]["entrypoint"] = "elsewhere"
    with pytest.raises(CompileError) as err:
        emit.context(plan, data, "build/x")
    assert err.value.diagnostics[0].code == "E_PLAN_ENTRYPOINT"


def test_plans_without_the_new_sections():
    """The launch parts read the sections with .get(): a plan without them means the defaults."""
    plan, _ = compiled("tiny-moe/cpu")
    for key in ("checkpoint", "data", "tokenizer", "logging"):
        plan.pop(key, None)
    plan["runtime"].pop("entrypoint", None)
    assert emit.runtime_module(plan) == "moeforge.runtime.train"
    assert emit.mount_dirs(plan) == [] and emit.required_env(plan) == []


# --- checkpointing: requeue, signal, restarts ---------------------------------------------------


@pytest.mark.parametrize("save", [None, "/ckpt/run"])
def test_requeue_and_signal_iff_checkpoint_save(save):
    sets = MEGATRON_LM + ([f"checkpoint.save={save}", "checkpoint.interval=10"] if save else [])
    plan, data = compiled("tiny-moe/cpu", sets)
    data = {**data, "launch": {"signal_margin_s": 300}}
    ctx = emit.context(plan, data, "build/tiny-moe/cpu")
    on = save is not None
    assert ctx["checkpointing"] is on
    assert ctx["slurm"]["signal"] == ("B:USR1@300" if on else None)
    directives = sbatch_directives(emit.render(plan, data, "build/tiny-moe/cpu")["launch.sbatch"])
    assert ("--requeue" in directives) is on
    assert ('--signal="B:USR1@300"' in directives) is on
    assert ctx["k8s"]["restart_policy"] == ("OnFailure" if on else "Never")
    assert ctx["k8s"]["backoff_limit"] == (emit.K8S_BACKOFF_LIMIT if on else 0)


def test_default_signal_margin_is_120():
    ctx = ctx_of("tiny-moe/cpu", MEGATRON_LM + ["checkpoint.save=/ckpt", "checkpoint.interval=5"])
    assert ctx["signal_margin_s"] == 120 and ctx["slurm"]["signal"] == "B:USR1@120"


# --- exclusive, segment ---------------------------------------------------------------------------


def test_exclusive_on_gpu_platforms_by_default():
    assert ctx_of("tiny-moe/cpu")["slurm"]["exclusive"] is False
    assert ctx_of("qwen3-30b-a3b/h100-bf16")["slurm"]["exclusive"] is True
    assert ctx_of("qwen3-30b-a3b/h100-bf16", exclusive=False)["slurm"]["exclusive"] is False
    assert ctx_of("tiny-moe/cpu", exclusive=True)["slurm"]["exclusive"] is True
    plan, data = compiled("qwen3-30b-a3b/h100-bf16")
    assert "--exclusive" in sbatch_directives(emit.render(plan, data, "build/x")["launch.sbatch"])
    plan, data = compiled("tiny-moe/cpu")
    assert "--exclusive" not in sbatch_directives(emit.render(plan, data, "build/x")["launch.sbatch"])


@pytest.mark.parametrize("rid, segment", [
    ("qwen3-30b-a3b/gb200-nvl72-bf16", 2),           # 2 trays: the whole job in one domain
    ("qwen3-30b-a3b/gb300-nvl72-bf16", 2),
    ("deepseek-v3/gb200-nvl72-bf16", 16),            # 64 trays: 64 % 18 != 0; segments of 16 hold one EP64 group
    ("qwen3-235b-a22b/gb200-nvl72-bf16-x256", 16),
    ("qwen3-30b-a3b/h100-bf16", None),               # the NVLink domain is the node
    ("qwen3-30b-a3b/b200-bf16", None),
    ("tiny-moe/cpu", None),
])  # fmt: skip
def test_segment_on_nvl72_only(rid, segment):
    plan, data = compiled(rid)
    assert emit.nvlink_segment(plan) == segment
    directives = sbatch_directives(emit.render(plan, data, f"build/{rid}")["launch.sbatch"])
    assert [d for d in directives if d.startswith("--segment")] == ([f"--segment={segment}"] if segment else [])
    if segment and plan["layout"]["nnodes"] > segment:
        assert plan["layout"]["nnodes"] % segment == 0  # Slurm refuses anything else


# --- mounts and volumes -----------------------------------------------------------------------------


def _plan_with_paths():
    plan, data = compiled("tiny-moe/cpu", MEGATRON_LM)
    plan["checkpoint"].update(save="/ckpt/run/", load="/ckpt/pretrained")
    plan["data"].update(kind="indexed", paths=["${DATA_ROOT}/corpus/a_text", "/data/b_text", "rel/c_text",
                                               "/data/b2_text", "/top_level_prefix"],
                        blend=[{"weight": 1, "path": "/blend/x_text"}, {"weight": 2, "path": "/data/b_text"}],
                        cache_dir="${SCRATCH}/cache", env_vars=["DATA_ROOT", "SCRATCH", "not a name"])
    plan["logging"]["tensorboard"] = "/ckpt/run"
    data = {**data, "launch": {"container_image": "img:1",
                               "container_mounts": ["/scratch:/scratch:ro", "/data:/data", "/scratch:/scratch:ro"]}}
    return plan, data


def test_mounts_in_a_fixed_order_each_once():
    plan, data = _plan_with_paths()
    assert emit.mount_dirs(plan) == [
        ("data", "${DATA_ROOT}/corpus"), ("data", "/data"), ("data", "/blend"),
        ("cache", "${SCRATCH}/cache"), ("checkpoint", "/ckpt/run"), ("checkpoint", "/ckpt/pretrained"),
    ]  # relative paths are in the checkout (mounted whole); never the host's /; tensorboard = save: once
    ctx = emit.context(plan, data, "build/x")
    assert ctx["slurm"]["container_mounts"] == [
        "${DATA_ROOT}/corpus:${DATA_ROOT}/corpus", "/data:/data", "/blend:/blend", "${SCRATCH}/cache:${SCRATCH}/cache",
        "/ckpt/run:/ckpt/run", "/ckpt/pretrained:/ckpt/pretrained", "/scratch:/scratch:ro",
    ]
    assert ctx["required_env"] == ["DATA_ROOT", "SCRATCH"]
    assert [(v["name"], v["host_path"], v["mount_path"], v["read_only"]) for v in ctx["k8s"]["volumes"]] == [
        ("data-0", "${DATA_ROOT}/corpus", "${DATA_ROOT}/corpus", False), ("data-1", "/data", "/data", False),
        ("data-2", "/blend", "/blend", False), ("cache-0", "${SCRATCH}/cache", "${SCRATCH}/cache", False),
        ("checkpoint-0", "/ckpt/run", "/ckpt/run", False),
        ("checkpoint-1", "/ckpt/pretrained", "/ckpt/pretrained", False),
        ("mount-0", "/scratch", "/scratch", True),  # /data:/data is data-1's mount path already
        ("dshm", None, "/dev/shm", False),
    ]
    # deterministic
    assert emit.render(plan, data, "build/x") == emit.render(plan, data, "build/x")


def test_load_auto_and_none_are_not_paths():
    plan, _ = compiled("tiny-moe/cpu", MEGATRON_LM + ["checkpoint.save=/ckpt", "checkpoint.interval=5"])
    assert plan["checkpoint"]["load"] == "auto"
    assert emit.mount_dirs(plan) == [("checkpoint", "/ckpt")]
    plan["checkpoint"]["load"] = "none"
    assert emit.mount_dirs(plan) == [("checkpoint", "/ckpt")]


def test_mounts_keep_env_references_expandable(tmp_path):
    plan, data = _plan_with_paths()
    text = emit.render(plan, data, "build/x")["launch.sbatch"]
    assert "container_mounts+=,\"${DATA_ROOT}\"/corpus:\"${DATA_ROOT}\"/corpus\n" in text
    # qenv: only ${NAME} expands; the rest is one literal word
    script = tmp_path / "t.sh"
    word = emit.quote_keeping_env("${A}/x y'$B`c`$(d);${A}")
    script.write_text(f"set -u\nA='/a b'\nprintf '%s' {word}\n")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert out.stdout == "/a b/x y'$B`c`$(d);/a b"
    assert emit.quote_keeping_env("") == "''" and emit.quote_keeping_env("${A}") == '"${A}"'


# --- logs ---------------------------------------------------------------------------------------------


def test_logs_dir_default_and_override():
    ctx = ctx_of("tiny-moe/cpu")
    assert ctx["logs_dir"] == "logs/tiny-moe-cpu"
    assert ctx["slurm"]["output"] == "logs/tiny-moe-cpu/%x-%j.out"
    assert ctx["slurm"]["error"] == "logs/tiny-moe-cpu/%x-%j.err"
    ctx = ctx_of("tiny-moe/cpu", logs_dir="/var/log/my 100%/")
    assert ctx["slurm"]["output"] == "/var/log/my 100%%/%x-%j.out"  # sbatch reads %% as %
    assert ctx_of("tiny-moe/cpu", logs_dir="/")["slurm"]["error"] == "/%x-%j.err"


# --- moeforge.compiler.commands.launch ----------------------------------------------------------------------------------


def _build(tmp_path: Path, sets=(), **launch) -> Path:
    plan, data = compiled("tiny-moe/cpu", sets)
    data = {**data, "launch": {**(data.get("launch") or {}), **launch}}
    build_dir = tmp_path / "build" / "tiny-moe" / "cpu"
    emit.write_atomically(build_dir, emit.render(plan, data, str(build_dir)))
    return build_dir


def test_job_python_by_megatron_core(tmp_path, monkeypatch):
    assert job.job_python({"platform": {"software": {"megatron_core": "0.16.1"}}}) == Path(sys.executable)
    assert not job.needs_venv312({"platform": {"software": {"megatron_core": "0.16.1"}}})
    plan = {"platform": {"software": {"megatron_core": "0.19.2"}}}
    assert job.needs_venv312(plan)
    monkeypatch.setattr(job, "VENV312", tmp_path / "no-venv")
    with pytest.raises(job.LaunchError, match="make setup312"):
        job.job_python(plan)
    fake = tmp_path / "venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    monkeypatch.setattr(job, "VENV312", tmp_path / "venv")
    assert job.job_python(plan) == fake


def test_needs_venv312_flag(tmp_path):
    for sets, answer in (((), "no"), (MEGATRON_LM, "yes")):
        build_dir = _build(tmp_path / answer, sets)
        proc = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--needs-venv312", str(build_dir)],
                              cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0 and proc.stdout == f"{answer}\n", proc.stderr


def test_logs_dir_read_back_as_sbatch_reads_it(tmp_path):
    logs = tmp_path / "lo gs" / "x'y\"z 100%"
    build_dir = _build(tmp_path, logs_dir=str(logs))
    assert L.logs_dir(build_dir) == logs
    assert L.logs_dir(_build(tmp_path / "rel")) == Path("logs/tiny-moe-cpu")


def test_slurm_target_creates_the_logs_dir_and_submits(tmp_path):
    """With a fake sbatch on PATH: the logs directory exists before sbatch is called; sbatch gets
    --wait and the script, and no --output (the script's #SBATCH lines name the logs)."""
    logs = tmp_path / "job logs" / "a'b"
    build_dir = _build(tmp_path, logs_dir=str(logs))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "sbatch-call"
    (bin_dir / "sbatch").write_text(
        "#!/bin/bash\n"
        f"printf '%s\\n' \"$@\" >{json.dumps(str(record))}\n"
        f"if [[ -d {json.dumps(str(logs))} ]]; then echo logs-dir-existed >>{json.dumps(str(record))}; fi\n"
        "echo 77\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "slurm", str(build_dir)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    lines = record.read_text().splitlines()
    assert "logs-dir-existed" in lines
    assert "--wait" in lines and f"--chdir={ROOT}" in lines and str(build_dir / "launch.sbatch") in lines
    assert not any(a.startswith("--output") for a in lines)
    assert "slurm job 77 exited with 0" in proc.stdout
    assert proc.returncode == 1 and "left no" in proc.stderr  # the fake job wrote no report
    # an earlier run's report (a recompile keeps it) is not shown as this run's
    (build_dir / "report.json").write_text('{"steps": 3}\n')
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "slurm", str(build_dir)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip() == \
        f"moeforge: the run left no {build_dir / 'report.json'} (the one there is an earlier run's)"


def test_print_target_shows_the_exact_commands(tmp_path):
    build_dir = _build(tmp_path, logs_dir=str(tmp_path / "L"))
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler.commands.launch", "--target", "print", str(build_dir)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("local: cd ") and lines[0].endswith(f"bash {build_dir / 'torchrun.sh'}")
    assert f"PATH={Path(sys.executable).parent}:" in lines[0]
    assert f"mkdir -p {tmp_path / 'L'} && " in lines[1]
    assert f"sbatch --wait --parsable --chdir={ROOT} {build_dir / 'launch.sbatch'}" in lines[1]
    assert lines[2].startswith("k8s:   kubectl apply -f ")
    assert not (tmp_path / "L").exists()  # printing creates nothing


def test_missing_venv312_is_a_clear_error(tmp_path, monkeypatch):
    build_dir = _build(tmp_path, MEGATRON_LM)
    monkeypatch.setattr(job, "VENV312", tmp_path / "absent")
    assert L.main(["--target", "local", str(build_dir)]) == 2
