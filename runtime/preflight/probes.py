"""What this node has: package versions, the GPU, read without initialising CUDA's context or NCCL.

Why: preflight runs before torch.distributed exists, so every probe is a metadata read
(importlib.metadata, never importing Transformer Engine or DeepEP, whose import can itself fail or
initialise CUDA) or a cheap torch query; a package that is absent is ``None``, never an error.
Each probe is a plain function so a test can stand in a node with other versions.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

# platform.software key -> the distributions that provide it (first one installed wins)
DISTRIBUTIONS = {
    "torch": ("torch",),
    "transformer_engine": ("transformer_engine", "transformer-engine", "transformer_engine_torch"),
    "megatron_core": ("megatron-core", "megatron_core"),
    "megatron_bridge": ("megatron-bridge", "megatron_bridge"),
    "deep_ep_version": ("deep_ep", "deep-ep"),
    "nvshmem": ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12", "nvshmem"),
}


def distribution_version(names: tuple[str, ...]) -> str | None:
    """The version of the first of ``names`` installed, else None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _torch_facts() -> dict:
    """CUDA and NCCL as torch was built with and sees them (NCCL only where CUDA is available)."""
    try:
        import torch  # lazy: a node without torch still gets its other facts reported
    except ImportError:
        return {"cuda": None, "nccl": None}
    nccl = None
    if torch.cuda.is_available():
        try:
            got = torch.cuda.nccl.version()
            nccl = ".".join(str(p) for p in got) if isinstance(got, tuple) else str(got)
        except (RuntimeError, AttributeError):
            nccl = None
    return {"cuda": torch.version.cuda, "nccl": nccl}


def software() -> dict:
    """Every platform.software fact this node can state: versions as strings, backends as booleans."""
    facts = {"python": platform.python_version()}
    facts.update({key: distribution_version(names) for key, names in DISTRIBUTIONS.items()})
    facts.update(_torch_facts())
    deep_ep = _module_present("deep_ep")
    facts["deep_ep"] = deep_ep
    facts["hybrid_ep"] = deep_ep and _has_hybrid_ep()
    facts["grouped_gemm"] = _module_present("grouped_gemm") or facts["transformer_engine"] is not None
    return facts


def _has_hybrid_ep() -> bool:
    """HybridEP ships in DeepEP's hybrid-ep branch as deep_ep.HybridEPBuffer; reading it imports deep_ep."""
    try:
        import deep_ep  # lazy: only where DeepEP is installed at all
    except Exception:  # noqa: BLE001 - an installed DeepEP that does not import has no HybridEP either
        return False
    return hasattr(deep_ep, "HybridEPBuffer")


def gpu() -> dict | None:
    """{"name", "memory_gb" (GiB), "count"} of GPU 0, or None where CUDA is not available."""
    try:
        import torch  # lazy: see _torch_facts
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gb": props.total_memory / 2**30, "count": torch.cuda.device_count()}
