"""Render moeforge's launch templates the way compiler/targets/emit.py does (the contract of the brief).

Kept in one place so that tests/launch and tests/slurm render identically. Loaded by path (see
``load()`` in the test modules), so it works whatever pytest's import mode or rootdir.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jinja2

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = REPO_ROOT / "templates"
SCHEMAS = REPO_ROOT / "schemas"

# Generated file name -> template file name.
OUTPUTS = {
    "torchrun.sh": "torchrun.sh.j2",
    "launch.sbatch": "launch.sbatch.j2",
    "pytorchjob.yaml": "pytorchjob.yaml.j2",
    "env.sh": "env.sh.j2",
}


def quote(value: Any) -> str:
    """The `q` filter: shlex.quote of the value's text. Numbers go through it too."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"q: refusing to shell-quote {value!r}")
    return shlex.quote(str(value))


ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def quote_keeping_env(value: Any) -> str:
    """The `qenv` filter: one shell word in which each ${NAME} is expanded at run time and all else
    is literal (shlex.quote'd pieces around "${NAME}")."""
    text, out, last = str(value), [], 0
    for m in ENV_REF.finditer(text):
        if m.start() > last:
            out.append(shlex.quote(text[last : m.start()]))
        out.append(f'"${{{m.group(1)}}}"')
        last = m.end()
    if last < len(text) or not out:
        out.append(shlex.quote(text[last:]))
    return "".join(out)


def expand_env(text: str, env: dict[str, str]) -> str:
    """What the shell makes of `qenv`'s word: each ${NAME} replaced by env[NAME]."""
    return ENV_REF.sub(lambda m: env[m.group(1)], text)


def environment(*, trim: bool = True) -> jinja2.Environment:
    """The Environment of compiler/targets/emit.py: the brief's settings (StrictUndefined,
    keep_trailing_newline, no autoescape) plus trim_blocks/lstrip_blocks, `q` and a plain
    json.dumps `tojson`. trim=False gives the brief's settings alone: the launch templates must
    render byte for byte the same under both (test_whitespace_settings_do_not_matter)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=trim,
        lstrip_blocks=trim,
    )
    env.filters["q"] = quote
    env.filters["qenv"] = quote_keeping_env
    env.filters["tojson"] = json.dumps
    return env


def tojson(value: Any) -> str:
    return environment().filters["tojson"](value)


def render(output: str, context: dict[str, Any], *, trim: bool = True) -> str:
    return environment(trim=trim).get_template(OUTPUTS[output]).render(**context)


def render_all(context: dict[str, Any], build_dir: Path) -> dict[str, Path]:
    """Render every launch file into build_dir (created); return output name -> path."""
    build_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for output in OUTPUTS:
        path = build_dir / output
        path.write_text(render(output, context), encoding="utf-8")
        if output.endswith((".sh", ".sbatch")):
            path.chmod(0o755)
        paths[output] = path
    return paths


BENIGN_CONTEXT: dict[str, Any] = {
    "recipe_id": "tiny-moe/cpu",
    "job_name": "tiny-moe-cpu",
    "build_dir": "build/tiny-moe/cpu",
    "plan_file": "plan.json",
    "report_file": "report.json",
    "nnodes": 1,
    "nproc_per_node": 2,
    "world_size": 2,
    "gpus_per_node": 0,
    "device": "cpu",
    "master_port": None,  # the default: torchrun picks a free port, launch.sbatch derives one from the job id
    "python": "python3",
    "runtime_module": "moeforge.runtime.train",
    "checkpointing": False,
    "exit_saved_on_signal": 75,
    "signal_margin_s": 120,
    "rank_exit_grace_s": 60,
    "required_env": [],
    "logs_dir": "logs/tiny-moe-cpu",
    "slurm": {
        "partition": None,
        "account": None,
        "time": "00:30:00",
        "container_image": None,
        "container_mounts": [],
        "container_moeforge": "mounted",
        "extra_args": [],
        "output": "logs/tiny-moe-cpu/%x-%j.out",
        "error": "logs/tiny-moe-cpu/%x-%j.err",
        "node_output": "logs/tiny-moe-cpu/%x-%j-%N.out",
        "node_error": "logs/tiny-moe-cpu/%x-%j-%N.err",
        "exclusive": False,
        "segment": None,
        "signal": None,
    },
    "k8s": {"name": "tiny-moe-cpu", "namespace": "default", "image": "ghcr.io/example/moeforge:0.1.0",
            "service_account": None, "port": 29517, "restart_policy": "Never", "backoff_limit": 0,
            "volumes": [{"name": "dshm", "host_path": None, "host_path_type": None, "mount_path": "/dev/shm",
                         "read_only": False}]},
    "env": [
        {
            "name": "CUDA_DEVICE_MAX_CONNECTIONS",
            "value": "1",
            "reason": "EP/TP comm overlap needs kernels queued in issue order",
        },
        {"name": "OMP_NUM_THREADS", "value": "1", "reason": "one thread per rank on CPU"},
    ],
    "moeforge_version": "0.1.0",
}


def benign_context() -> dict[str, Any]:
    return copy.deepcopy(BENIGN_CONTEXT)


def with_checkpointing(ctx: dict[str, Any], margin: int = 120) -> dict[str, Any]:
    """ctx with checkpointing on, as compiler/targets/emit.py sets it: Megatron-LM's loop, requeue on signal."""
    ctx.update(checkpointing=True, runtime_module="moeforge.runtime.megatron", signal_margin_s=margin)
    ctx["slurm"]["signal"] = f"B:USR1@{margin}"
    ctx["k8s"].update(restart_policy="OnFailure", backoff_limit=3)
    return ctx


def full_context() -> dict[str, Any]:
    """Benign, with every optional part on: two GPU nodes of an NVL72 rack, partition, account,
    container, mounts (one naming ${DATA_ROOT}), checkpointing."""
    ctx = with_checkpointing(benign_context())
    ctx.update(nnodes=2, nproc_per_node=8, world_size=16, gpus_per_node=8, device="cuda", required_env=["DATA_ROOT"])
    ctx["slurm"].update(
        partition="batch",
        account="proj-42",
        container_image="nvcr.io/nvidia/pytorch:25.01-py3",
        container_mounts=["${DATA_ROOT}/corpus:${DATA_ROOT}/corpus", "/ckpt/run:/ckpt/run", "/data:/data",
                          "/scratch:/scratch:ro"],
        extra_args=["--exclusive", "--qos=high"],
        exclusive=True,
        segment=2,
    )
    ctx["k8s"].update(namespace="training", service_account="trainer")
    ctx["k8s"]["volumes"] = [
        {"name": "data-0", "host_path": "${DATA_ROOT}/corpus", "host_path_type": "Directory",
         "mount_path": "${DATA_ROOT}/corpus", "read_only": False},
        {"name": "checkpoint-0", "host_path": "/ckpt/run", "host_path_type": "DirectoryOrCreate",
         "mount_path": "/ckpt/run", "read_only": False},
        {"name": "mount-0", "host_path": "/scratch", "host_path_type": None, "mount_path": "/scratch",
         "read_only": True},
        *ctx["k8s"]["volumes"],
    ]
    return ctx


def hostile_context(marker: str) -> dict[str, Any]:
    """Every user string carries shell metacharacters; running `$(...)`/backticks would touch marker."""
    # $(MASTER_ADDR) and $$ are for Kubernetes, which expands them in command, args and env values.
    evil = f"x'\"$(touch {marker})`touch {marker}`;touch {marker}\n#SBATCH --wrap=touch {marker} $(MASTER_ADDR)$$ \\"
    ctx = with_checkpointing(benign_context())
    ctx.update(
        recipe_id=f"tiny-moe/cpu{evil}",
        job_name=f"tiny {evil}",
        build_dir=f"build/ti ny'{evil}/cpu",
        plan_file="pl an'$(x).json",
        report_file="re port`x`.json",
        master_port=29517,
        moeforge_version=f"0.1.0{evil}",
        logs_dir=f"logs/l o'g 100%{evil}",
        required_env=["HOME"],
    )
    ctx["slurm"].update(
        partition=f"part{evil}",
        account=f"acct{evil}",
        time=f"00:30:00{evil}",
        container_image=f"nvcr.io/nvidia/pytorch:25.01-py3{evil}",
        # ${HOME} is expanded at launch (the point of a ${NAME} in a mount); nothing else is
        container_mounts=[f"/data:/data{evil}", "/scratch:/scratch", f"${{HOME}}/ck pt{evil}:${{HOME}}/ck pt{evil}"],
        extra_args=[f"--comment={evil}", "--exclusive"],
        output=f"logs/l o'g 100%%{evil}/%x-%j.out",  # compiler/targets/emit.py doubles a % of the directory
        error=f"logs/l o'g 100%%{evil}/%x-%j.err",
        node_output=f"logs/l o'g 100%%{evil}/%x-%j-%N.out",
        node_error=f"logs/l o'g 100%%{evil}/%x-%j-%N.err",
    )
    ctx["k8s"].update(image=f"img{evil}", service_account=f"sa{evil}")
    ctx["k8s"]["volumes"] = [
        {"name": "checkpoint-0", "host_path": f"/ck pt{evil}", "host_path_type": "DirectoryOrCreate",
         "mount_path": f"/ck pt{evil}", "read_only": False},
        *ctx["k8s"]["volumes"],
    ]
    ctx["env"] = [
        {"name": "CUDA_DEVICE_MAX_CONNECTIONS", "value": f"1{evil}", "reason": f"why{evil}"},
        {"name": "NCCL_DEBUG", "value": "WARN", "reason": "plain"},
    ]
    return ctx


# --- what the rendered scripts should hand over ---------------------------------------------------


def sbatch_sees(value: Any) -> str:
    """What sbatch makes of `{{ value | tojson }}` on an #SBATCH line: the JSON text, quotes off,
    each backslash dropped and the next character kept (\\" is ", \\\\ is \\, \\n is n, \\u00e9 is u00e9)."""
    text = tojson(value)
    if text.startswith('"'):
        text = text[1:-1]
    out, chars = [], iter(text)
    for c in chars:
        out.append(next(chars) if c == "\\" else c)
    return "".join(out)


def expected_torchrun_argv(ctx: dict[str, Any], port: int | str | None, node: tuple[int, str] | None = None
                           ) -> list[str]:
    """argv after "$python" in torchrun.sh; port None: no MASTER_PORT given, torchrun --standalone
    binds a free one. Several nodes: node is (NODE_RANK, MASTER_ADDR), as given to the script."""
    plan = f"{ctx['build_dir']}/{ctx['plan_file']}"
    if ctx["nnodes"] > 1:
        rendezvous = [f"--node_rank={node[0]}", f"--master_addr={node[1]}", f"--master_port={port}"]
    else:
        rendezvous = ["--standalone"] if port is None else ["--master_addr=127.0.0.1", f"--master_port={port}"]
    return [
        "-m", "torch.distributed.run",
        f"--nnodes={ctx['nnodes']}",
        f"--nproc_per_node={ctx['nproc_per_node']}",
        *rendezvous,
        "--max_restarts=0",
        "-m", ctx["runtime_module"], plan, "--out", ctx["build_dir"],
    ]  # fmt: skip


def expected_job_port(ctx: dict[str, Any], job_id: str) -> int:
    """launch.sbatch's rendezvous port without MASTER_PORT: the recipe's, else one from the job id."""
    return ctx["master_port"] or 15000 + int(job_id) % 15000


def expected_srun_argv(ctx: dict[str, Any], root: str, master_addr: str, port: int | str, job_id: str,
                       env: dict[str, str] | None = None, cpus_on_node: int | None = None) -> list[str]:
    """argv after `srun` in launch.sbatch: one task per rank, the runtime module directly. `env`: the
    job's environment, for the ${NAME} in container mounts; cpus_on_node: SLURM_CPUS_ON_NODE."""
    del master_addr, port, job_id  # one task per rank: the rendezvous is in the environment, not argv
    per_node = ctx["nproc_per_node"]
    cpus = max(1, (cpus_on_node if cpus_on_node is not None else per_node) // per_node)
    argv = [f"--nodes={ctx['nnodes']}", f"--ntasks-per-node={per_node}", f"--cpus-per-task={cpus}",
            "--distribution=block"]
    if ctx["checkpointing"]:
        argv += ["--kill-on-bad-exit=0", f"--wait={ctx['rank_exit_grace_s']}"]
    else:
        argv += ["--kill-on-bad-exit=1"]
    if ctx["nnodes"] > 1:  # each node's ranks in files of their own
        argv += [f"--output={ctx['slurm']['node_output']}", f"--error={ctx['slurm']['node_error']}",
                 "--open-mode=append"]
    slurm = ctx["slurm"]
    if slurm["container_image"] is not None:
        mounts = [f"{root}:{root}"] + [expand_env(m, env or {}) for m in slurm["container_mounts"]]
        argv += [f"--container-image={slurm['container_image']}", f"--container-workdir={root}",
                 "--container-mounts=" + ",".join(mounts)]
    plan = f"{ctx['build_dir']}/{ctx['plan_file']}"
    argv += [ctx["python"], "-m", ctx["runtime_module"], plan, "--out", ctx["build_dir"]]
    return argv


# --- recording fakes of torchrun / srun / python ------------------------------------------------

# A fake program: records its argv (NUL-separated), working directory and environment under
# $SHIM_OUT/<hex of its own name>/, then exits with $SHIM_RC (default 0).
RECORDER = r"""out="$SHIM_OUT/$(printf '%s' "${0##*/}" | od -An -tx1 | tr -d ' \n')"
mkdir -p -- "$out"
printf '%s\0' "$@" >"$out/argv"
pwd >"$out/cwd"
env -0 >"$out/env"
exit "${SHIM_RC:-0}"
"""


def write_shim(path: Path, body: str = RECORDER) -> None:
    path.write_text("#!/bin/bash\n" + body, encoding="utf-8")
    path.chmod(0o755)


def recorded(shim_out: Path, program: str) -> dict[str, Any]:
    """What the fake named `program` recorded: {"argv": [...], "cwd": str, "env": {...}}; {} if it never ran."""
    d = shim_out / program.encode().hex()
    if not d.is_dir():
        return {}
    env = {}
    for item in (d / "env").read_bytes().split(b"\0"):
        if item:
            name, _, value = item.decode().partition("=")
            env[name] = value
    return {
        "argv": [a.decode() for a in (d / "argv").read_bytes().split(b"\0")[:-1]],
        "cwd": (d / "cwd").read_text().rstrip("\n"),
        "env": env,
    }
