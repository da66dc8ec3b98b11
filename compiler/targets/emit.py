"""Render a plan into build/<recipe>/ through Jinja2 templates, atomically.

Templates get a flat, prepared view (every name decided here or in compiler/knobs/table.py); every
value that reaches a shell goes through the `q` filter. All files are rendered in memory
first and the build directory is swapped in whole (compiler/targets/builddir.py), so a failed
compile leaves the previous build intact and concurrent compiles never see a half-written one.
"""
from __future__ import annotations

import json
import posixpath
import re
import shlex
import zlib
from functools import lru_cache
from pathlib import Path

from moeforge.compiler import __version__
from moeforge.compiler.targets.explain import ORDER
from moeforge.compiler.targets.bridge_overrides import bridge_overrides
from moeforge.compiler.diagnostics import CompileError, error
from moeforge.compiler.knobs import table as K
from moeforge.compiler.resources import TEMPLATES
from moeforge.compiler.solver.inputs import MISSING, lookup
from moeforge.compiler.targets import builddir
from moeforge.compiler.targets.megatron_args import arguments, release_for

OUTPUTS = ("torchrun.sh", "launch.sbatch", "pytorchjob.yaml", "env.sh", "megatron-lm.args",
           "bridge.overrides", "EXPLAIN.md")
EXECUTABLE = {"torchrun.sh", "launch.sbatch"}

# The exit code of the ranks after Megatron-LM's --exit-signal-handler saved a checkpoint on a signal
# (EX_TEMPFAIL). Defined once for the runtime as runtime/errors.py EXIT_SAVED_ON_SIGNAL (the compiler
# never imports the runtime); the two must agree: tests/launch/test_launch_signals.py reads that file.
EXIT_SAVED_ON_SIGNAL = 75
# plan.runtime.entrypoint -> the module every launch runs (`python -m MODULE PLAN.json --out DIR`).
RUNTIME_MODULES = {"moeforge": "moeforge.runtime.train", "megatron-lm": "moeforge.runtime.megatron"}
# Kubernetes restarts of a checkpointing job (each resumes from the last checkpoint): see pytorchjob.yaml.j2.
K8S_BACKOFF_LIMIT = 3
# launch.sbatch with checkpointing: srun --kill-on-bad-exit=0 --wait=<this>. Ranks that saved on a signal
# exit EXIT_SAVED_ON_SIGNAL a little apart; --kill-on-bad-exit=1 would SIGKILL the later ones as soon as
# the first one exits, and srun's status would be 137 (128 + SIGKILL), not EXIT_SAVED_ON_SIGNAL.
RANK_EXIT_GRACE_S = 60
# ${NAME} in a path: expanded at launch time (the only form that is; see `qenv`).
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@lru_cache(maxsize=1)
def template_env():
    """The launch templates' one Jinja2 environment (also Slurm sweeps'): strict, no autoescape (shell, not HTML)."""
    import jinja2  # lazy: only rendering needs it (plan-layout, import and matrix write files through this module)

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    env.filters["qenv"] = quote_keeping_env
    env.filters["tojson"] = lambda v: json.dumps(v)
    return env


def quote_keeping_env(value) -> str:
    """One shell word for `value` in which each ${NAME} (NAME an identifier) is expanded when the
    script runs and everything else is literal: '/a b/'"${DATA_ROOT}"'/x'. $NAME, $(...), backticks
    and every other character stay text. Under `set -u` an unset NAME stops the script, naming it."""
    text, out, last = str(value), [], 0
    for m in ENV_REF.finditer(text):
        if m.start() > last:
            out.append(shlex.quote(text[last:m.start()]))
        out.append(f'"${{{m.group(1)}}}"')
        last = m.end()
    if last < len(text) or not out:
        out.append(shlex.quote(text[last:]))
    return "".join(out)


def k8s_port(recipe_id: str) -> int:
    """The PyTorchJob's rendezvous port: deterministic (every pod must agree); pods have their own
    network namespace, so no other job on the machine can hold it."""
    return 20000 + zlib.crc32(recipe_id.encode()) % 20000


def launch_settings(data: dict, name: str) -> dict:
    """launch.logs_dir / signal_margin_s / exclusive as the composed recipe gives them, else the knob table's
    defaults (logs/<recipe name>, 120 s, whole nodes on a GPU platform): the launch templates' one source."""
    platform = data.get("platform") if isinstance(data.get("platform"), dict) else {}
    values = {"device": platform.get("device", K.FACT_BY_FIELD["device"].default)}
    out = {}
    for field in ("logs_dir", "signal_margin_s", "exclusive"):
        k = K.BY_FIELD[field]
        value = lookup(data, k.path)
        if value is MISSING:
            value = K.DEPENDENT_DEFAULTS[field](values, name) if field in K.DEPENDENT_DEFAULTS else k.default
        out[field] = value
    if out["logs_dir"] is None:
        out["logs_dir"] = K.LOGS_DIR_DEFAULT.replace("<recipe name>", name)
    return out


def context(plan: dict, composed_data: dict, build_dir: str) -> dict:
    """Every value the launch templates read, from the plan and the recipe's launch section; sweeps reuse it."""
    launch = composed_data.get("launch", {}) or {}
    layout, platform = plan["layout"], plan["platform"]
    device = platform["device"]
    image = launch.get("container_image") or platform.get("container_image")
    args, unsupported = arguments(plan)
    overrides, not_overridden = bridge_overrides(plan)
    checkpoint = plan.get("checkpoint") or {}
    checkpointing = bool(checkpoint.get("save"))
    settings = launch_settings(composed_data, plan["recipe"]["name"])
    margin, logs_dir = int(settings["signal_margin_s"]), settings["logs_dir"]
    dirs = mount_dirs(plan)
    user_mounts = list(launch.get("container_mounts", []))
    return {
        "recipe_id": plan["recipe"]["id"], "job_name": plan["recipe"]["name"], "build_dir": build_dir,
        "plan_file": "plan.json", "report_file": "report.json",
        "nnodes": layout["nnodes"], "nproc_per_node": layout["nproc_per_node"], "world_size": layout["world_size"],
        "gpus_per_node": layout["nproc_per_node"] if device == "cuda" else 0, "device": device,
        # None: torchrun.sh lets torchrun pick a free port, launch.sbatch derives one from the job id
        "master_port": launch.get("master_port"),
        "python": "python3",
        "runtime_module": runtime_module(plan),
        # checkpointing on: signal -> save -> exit EXIT_SAVED_ON_SIGNAL -> requeue / restart
        "checkpointing": checkpointing,
        "exit_saved_on_signal": EXIT_SAVED_ON_SIGNAL,
        "signal_margin_s": margin,
        # srun --wait: after the first rank ends, the others get this long before srun ends them
        "rank_exit_grace_s": RANK_EXIT_GRACE_S,
        # names the plan's paths use as ${NAME}: the scripts stop early when one is unset
        "required_env": required_env(plan),
        "logs_dir": logs_dir,
        "slurm": {"partition": launch.get("partition"), "account": launch.get("account"),
                  "time": launch.get("time", "00:30:00"), "container_image": image,
                  # the project root ($MOEFORGE_ROOT, known at launch) comes first, in the template
                  "container_moeforge": (composed_data.get("platform") or {}).get("container_moeforge", "mounted"),
                  "container_mounts": _dedupe([f"{d}:{d}" for _, d in dirs] + user_mounts),
                  "extra_args": list(launch.get("extra_sbatch_args", [])),
                  "output": sbatch_pattern(logs_dir, "%x-%j.out"), "error": sbatch_pattern(logs_dir, "%x-%j.err"),
                  # srun's, for each node's ranks (%N: the node's name)
                  "node_output": sbatch_pattern(logs_dir, "%x-%j-%N.out"),
                  "node_error": sbatch_pattern(logs_dir, "%x-%j-%N.err"),
                  "exclusive": bool(settings["exclusive"]),
                  "segment": nvlink_segment(plan),
                  "signal": f"B:USR1@{margin}" if checkpointing else None},
        "k8s": {"name": k8s_name(plan["recipe"]["name"]), "namespace": launch.get("k8s_namespace", "default"),
                "image": image or "moeforge-runtime:latest", "service_account": None,
                "port": launch.get("master_port") or k8s_port(plan["recipe"]["id"]),
                "restart_policy": "OnFailure" if checkpointing else "Never",
                "backoff_limit": K8S_BACKOFF_LIMIT if checkpointing else 0,
                "volumes": k8s_volumes(dirs, user_mounts), "labels": {}},
        "env": [{"name": k, "value": v["value"], "reason": v["reason"]} for k, v in plan["env"].items()],
        "moeforge_version": __version__,
        "megatron_args": args, "megatron_unsupported": unsupported,
        "megatron_release": release_for(plan["platform"]["software"]["megatron_core"]),
        "bridge_overrides": overrides, "bridge_not_overridden": not_overridden,
        "plan": plan,
        "decisions": sorted((d for d in plan["decisions"] if d["source"] != "default"),
                            key=lambda d: (ORDER.get(d["source"], 9), d["knob"])),
    }


def runtime_module(plan: dict) -> str:
    """The module torchrun starts for the plan's runtime.entrypoint; an unknown one is a moeforge bug."""
    entrypoint = (plan.get("runtime") or {}).get("entrypoint") or "moeforge"
    if entrypoint not in RUNTIME_MODULES:
        raise CompileError([error("E_PLAN_ENTRYPOINT", f"the plan's runtime.entrypoint {entrypoint!r} has no "
                                  f"launch module (known: {', '.join(sorted(RUNTIME_MODULES))})",
                                  help="this is a moeforge bug: please report it with the recipe")])
    return RUNTIME_MODULES[entrypoint]


def _dedupe(items) -> list:
    return list(dict.fromkeys(items))


def mountable(path) -> bool:
    """Absolute paths and paths starting with ${NAME} are mounted; relative ones lie in the checkout
    (the job's working directory), which is mounted whole."""
    return isinstance(path, str) and (path.startswith("/") or ENV_REF.match(path) is not None)


def mount_dirs(plan: dict) -> list[tuple[str, str]]:
    """(purpose, directory) the job reads or writes outside the checkout, in a fixed order, each once:
    the directory of every data path and blend path (Megatron's are file prefixes), the data cache,
    the checkpoint save and load directories, the TensorBoard directory. The host root is never one."""
    data = plan.get("data") or {}
    checkpoint = plan.get("checkpoint") or {}
    logging = plan.get("logging") or {}
    found = [("data", posixpath.dirname(p)) for p in data.get("paths") or () if isinstance(p, str)]
    found += [("data", posixpath.dirname(b.get("path"))) for b in data.get("blend") or ()
              if isinstance(b, dict) and isinstance(b.get("path"), str)]
    found += [("cache", data.get("cache_dir")), ("checkpoint", checkpoint.get("save"))]
    if checkpoint.get("load") not in (None, "auto", "none"):
        found.append(("checkpoint", checkpoint.get("load")))
    found.append(("tensorboard", logging.get("tensorboard")))
    out, seen = [], set()
    for purpose, path in found:
        if not mountable(path):
            continue
        path = path.rstrip("/") or "/"
        if path != "/" and path not in seen:
            seen.add(path)
            out.append((purpose, path))
    return out


def required_env(plan: dict) -> list[str]:
    """Environment variables the plan's paths name as ${NAME} (plus data.env_vars), sorted."""
    names = set()
    for path in _all_paths(plan):
        names.update(ENV_REF.findall(path))
    names.update(n for n in (plan.get("data") or {}).get("env_vars") or ()
                 if isinstance(n, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n))
    return sorted(names)


def _all_paths(plan: dict) -> list[str]:
    data, checkpoint = plan.get("data") or {}, plan.get("checkpoint") or {}
    tokenizer, logging = plan.get("tokenizer") or {}, plan.get("logging") or {}
    values = [*(data.get("paths") or ()), *(b.get("path") for b in data.get("blend") or () if isinstance(b, dict)),
              data.get("cache_dir"), checkpoint.get("save"), checkpoint.get("load"), tokenizer.get("path"),
              logging.get("tensorboard")]
    return [v for v in values if isinstance(v, str)]


def sbatch_pattern(directory: str, name: str) -> str:
    """An sbatch file name pattern in `directory`: '%' in the directory is written '%%' so that only
    the name's %x (job name) and %j (job id) are replaced (sbatch(1), FILENAME PATTERN)."""
    return f"{directory.rstrip('/').replace('%', '%%')}/{name}"


def ep_span(layout: dict) -> int:
    """Consecutive ranks one EP group spans: megatron-core's expert RankGenerator orders ranks
    tp-cp-ep-dp-pp with cp = 1 (parallel_state.initialize_model_parallel), so an EP group is EP ranks
    at stride ETP inside a block of ETP x EP consecutive ranks."""
    return (layout.get("etp") or layout.get("tp") or 1) * (layout.get("ep") or 1)


def nvlink_segment(plan: dict) -> int | None:
    """Nodes per Slurm segment on platforms whose NVLink domain spans nodes (NVL72), else None.

    sbatch --segment=N (Slurm >= 24.05, topology/block): the allocation is built from segments of N
    nodes, each inside one block (one NVLink domain); a job of more than N nodes must have a node
    count divisible by N. So: the job's node count when it fits one domain, else the largest divisor of
    it that fits a domain, preferring one whose segments hold whole EP groups (rule
    NVLINK_EP_GROUP_SPANS_DOMAINS warns when none can)."""
    layout, platform = plan["layout"], plan["platform"]
    domain, per_node, nodes = platform.get("nvlink_domain") or 1, layout["nproc_per_node"], layout["nnodes"]
    if platform.get("device") != "cuda" or domain <= per_node:
        return None
    per_domain = domain // per_node
    if nodes <= per_domain:
        return nodes
    divisors = [d for d in range(per_domain, 0, -1) if nodes % d == 0]
    aligned = [d for d in divisors if (d * per_node) % ep_span(layout) == 0]
    return (aligned or divisors)[0]


def k8s_volumes(dirs: list[tuple[str, str]], user_mounts: list[str]) -> list[dict]:
    """hostPath volumes named by purpose (data-0, checkpoint-0, ...), each mounted at the same path;
    launch.container_mounts ("SRC[:DST[:FLAGS]]", pyxis syntax) as mount-N; /dev/shm last. A mount
    path is used once (Kubernetes refuses two mounts at one path): a later one is left out."""
    counts: dict[str, int] = {}
    out, taken = [], set()

    def add(purpose, host, mount, read_only=False, kind=None):
        if mount in taken:
            return
        taken.add(mount)
        n = counts.get(purpose, 0)
        counts[purpose] = n + 1
        out.append({"name": f"{purpose}-{n}", "host_path": host, "host_path_type": kind, "mount_path": mount,
                    "read_only": read_only})

    for purpose, path in dirs:  # data must exist; the rest the job may create
        add(purpose, path, path, kind="Directory" if purpose == "data" else "DirectoryOrCreate")
    for spec in user_mounts:
        src, _, rest = spec.partition(":")
        dst, _, flags = rest.partition(":")
        add("mount", src, dst or src, "ro" in flags.split("+"))  # pyxis joins flags with '+'
    out.append({"name": "dshm", "host_path": None, "host_path_type": None, "mount_path": "/dev/shm",
                "read_only": False})
    return out


def k8s_name(name: str) -> str:
    """A DNS-1123 label: lowercase alphanumerics and '-', at most 63 characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].rstrip("-")
    return label or "moeforge-job"


def render(plan: dict, composed_data: dict, build_dir: str, labels: dict | None = None) -> dict[str, str]:
    """Every output file's text. labels: extra Kubernetes labels for the PyTorchJob (a sweep's point)."""
    ctx = context(plan, composed_data, build_dir)
    ctx["k8s"]["labels"] = dict(labels or {})
    files = {"plan.json": json.dumps(plan, indent=2, sort_keys=True) + "\n"}
    for name in OUTPUTS:
        files[name] = template_env().get_template(f"{name}.j2").render(**ctx)
    return files


def write_atomically(target: Path, files: dict[str, str]) -> list:
    """The build directory replaced whole (compiler/targets/builddir.py: a failed compile leaves the previous
    build, a recompile never loses a run's results); the warnings say where two versions of one were kept."""
    return builddir.write_atomically(target, files, EXECUTABLE)
