"""The node's facts against the plan: its platform's software and GPU, its env, its hazards.

Why: a plan is only known to work on the stack it was compiled for; a node with another
megatron-core, a smaller GPU, an overridden CUDA_DEVICE_MAX_CONNECTIONS or versions that a field
hazard names would fail (or silently train differently) hours in. Each finding is one line: what the
plan expected, what this node has, and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlanError
from .versions import parse, same_at_stated_precision, satisfies

RECOMPILE = "or recompile the recipe for this node's platform"
# platform.software key -> what to install to get it
INSTALL = {"python": "use a Python {v} environment", "torch": "pip install torch=={v}",
           "transformer_engine": "pip install transformer_engine[pytorch]=={v}",
           "megatron_core": "pip install megatron-core=={v}", "megatron_bridge": "pip install megatron-bridge=={v}",
           "deep_ep_version": "install DeepEP {v}", "nvshmem": "install NVSHMEM {v}",
           "cuda": "install a torch built for CUDA {v}", "nccl": "install NCCL {v}",
           "deep_ep": "DeepEP (deep_ep)", "hybrid_ep": "DeepEP's hybrid-ep branch (HybridEPBuffer)",
           "grouped_gemm": "Transformer Engine or grouped_gemm"}
BOOLEAN = ("deep_ep", "hybrid_ep", "grouped_gemm")
# Every version is the platform's at the precision it states, except python: a newer minor of the same
# major passes (the platform's python is the oldest its code needs; a wheel built for another ABI fails at
# import, which the gate reports), so the cpu platform's "3.11" runs on .venv312 for plans that need core 0.19.
MEMORY_SLACK = 0.9  # a GPU reports a little less than its marketed size (80 GB H100: 79.1 GiB)


@dataclass(frozen=True)
class Finding:
    kind: str  # software | gpu | env | hazard
    key: str  # the plan path or hazard id it is about
    line: str  # what was expected, what is here, how to fix

    def as_dict(self) -> dict:
        return {"kind": self.kind, "key": self.key, "message": self.line}


def software(stated: dict, installed: dict) -> list[Finding]:
    """Each platform.software fact that is present and non-null, against the node's."""
    out = []
    for key, want in stated.items():
        if want is None or key not in installed:
            continue  # null: the platform states nothing; unknown key: nothing to probe it with
        have, path = installed[key], f"platform.software.{key}"
        if key in BOOLEAN or isinstance(want, bool):
            if want is True and not have:
                out.append(Finding("software", path, f"{path}: the plan was compiled for a platform with "
                                   f"{INSTALL.get(key, key)}, which this node lacks: install it, {RECOMPILE}"))
            continue
        if key == "python" and have is not None and parse(str(have)) and parse(str(want)) \
                and parse(str(have))[0][:1] == parse(str(want))[0][:1] and satisfies(str(have), f">={want}"):
            continue  # a newer Python of the same major runs the platform's code (.venv312 runs cpu plans for core 0.19)
        if have is None:
            out.append(Finding("software", path, f"{path}: the plan was compiled for {key} {want}, which is not "
                               f"installed here: {INSTALL[key].format(v=want)}, {RECOMPILE}"))
        elif not same_at_stated_precision(str(want), str(have)):
            out.append(Finding("software", path, f"{path}: the plan was compiled for {key} {want}, this node has "
                               f"{have}: {INSTALL[key].format(v=want)}, {RECOMPILE}"))
    return out


def gpu(stated: dict | None, node: dict | None) -> list[Finding]:
    """The GPU model (torch.cuda.get_device_name) and memory the platform states, against GPU 0."""
    if not stated:
        return []
    if node is None:
        return [Finding("gpu", "platform.gpu", f"platform.gpu: the plan was compiled for {stated.get('name')}, "
                        f"but no GPU is visible here (torch.cuda.is_available() is False): check "
                        f"CUDA_VISIBLE_DEVICES and the driver, {RECOMPILE}")]
    out = []
    name = stated.get("name")
    if name and name.strip().lower() != str(node["name"]).strip().lower():
        out.append(Finding("gpu", "platform.gpu.name", f"platform.gpu.name: the plan was compiled for {name}, "
                           f"this node has {node['name']}: run on {name} nodes, {RECOMPILE}"))
    memory = stated.get("memory_gb")
    if isinstance(memory, (int, float)) and node["memory_gb"] < MEMORY_SLACK * memory:
        out.append(Finding("gpu", "platform.gpu.memory_gb", f"platform.gpu.memory_gb: the plan was compiled "
                           f"for {memory} GB per GPU, this node's GPU has {node['memory_gb']:.1f} GiB: its memory "
                           f"estimate does not hold here; {RECOMPILE}"))
    return out


def environment(planned: dict, environ) -> list[Finding]:
    """Each variable of the plan's ``env`` must have the planned value in this rank's environment
    (env.sh exports them; a launcher or user that set another value wins over the plan, so it is caught here)."""
    out = []
    for name, spec in (planned or {}).items():
        want = str(spec.get("value") if isinstance(spec, dict) else spec)
        why = spec.get("reason") if isinstance(spec, dict) else None
        have = environ.get(name)
        if have != want:
            now = "is unset" if have is None else f"is {have!r}"
            out.append(Finding("env", f"env.{name}", f"env.{name}: the plan needs {name}={want}"
                               + (f" ({' '.join(str(why).split())})" if why else "")
                               + f", but it {now} here: export {name}={want} (env.sh does) or unset it"))
    return out


def hazards(listed: list | None, installed: dict) -> tuple[list[Finding], list[str]]:
    """(findings, hazards not checkable here): a hazard applies when every package its ``applies_when``
    names is installed and its version meets the spec there."""
    out, unchecked = [], []
    for i, hazard in enumerate(listed or []):
        where = f"hazards[{i}]"
        if not isinstance(hazard, dict) or not isinstance(hazard.get("applies_when"), dict) \
                or not hazard["applies_when"]:
            raise PlanError(f"{where}: a hazard needs a non-empty applies_when mapping "
                            f"(recompile the recipe with this moeforge)")
        hid = str(hazard.get("id", where))
        met = []
        for package, spec in hazard["applies_when"].items():
            have = installed.get(package)
            if package not in installed:
                unchecked.append(f"{hid} ({package} is not a fact preflight can read)")
                met = None
                break
            if have is None or isinstance(have, bool) or parse(str(have)) is None:
                met = None
                break
            try:
                ok = satisfies(str(have), str(spec))
            except ValueError as exc:
                raise PlanError(f"{where}.applies_when.{package}: {exc}") from None
            if not ok:
                met = None
                break
            met.append(f"{package} {have} ({spec})")
        if met:
            out.append(Finding("hazard", hid, f"hazard {hid} ({hazard.get('symptom', '?')}): "
                               f"{' '.join(str(hazard.get('summary', '')).split())}; it applies with "
                               f"{', '.join(met)} on this node: {' '.join(str(hazard.get('fix', '')).split())}, "
                               f"or install versions outside that range"))
    return out, unchecked
