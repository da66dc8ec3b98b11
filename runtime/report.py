"""report.json: what ran, how fast, how much memory, and with which software.

Why: the report is the runtime's only output and the input to tuning decisions, so it carries
the realised configuration and the schedule actually taken next to the timings, and states how
each number was measured (steady-state window, memory source) instead of leaving it implicit.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import resource
import statistics
import sys
from pathlib import Path

import torch


def peak_memory_bytes() -> tuple[int, str]:
    """(bytes, how measured): CUDA allocator peak on GPU, process max RSS on CPU."""
    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated()), "torch.cuda.max_memory_allocated"
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux reports KiB
    return int(kib) * 1024, "resource.getrusage(RUSAGE_SELF).ru_maxrss (process max RSS)"


def peak_memory_per_rank(device) -> tuple[list[int], str]:
    """Every rank's peak memory (an all-gather: each rank calls it) and how it was measured."""
    peak, how = peak_memory_bytes()
    mine = torch.tensor([peak], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(every, mine)
    return [int(t.item()) for t in every], how


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """Installed versions, read from package metadata (never imports TE or DeepEP)."""
    from .model import megatron_version

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "megatron_core": megatron_version(),
        "transformer_engine": _dist_version("transformer_engine")
        or _dist_version("transformer-engine"),
        "deep_ep": _dist_version("deep_ep") or _dist_version("deep-ep"),
        "cuda": torch.version.cuda,
    }


def steady_state(step_times: list[float], window: list[int], skip: tuple[int, int] | None = None) -> dict:
    """Mean/median/min/max step time over the 1-based inclusive ``window``, leaving out the steps ``skip``
    (first, last) names: profiled steps run slower."""
    first, last = window
    sample = [t for i, t in enumerate(step_times[first - 1:last], first)
              if skip is None or not skip[0] <= i <= skip[1]] or step_times[first - 1:last]
    return {
        "window": [first, last],
        **({"left_out_profiled": list(skip)} if skip else {}),
        "steps": len(sample),
        "mean_s": statistics.fmean(sample),
        "median_s": statistics.median(sample),
        "min_s": min(sample),
        "max_s": max(sample),
    }


def write(out_dir: Path, report: dict) -> Path:
    """Write ``report.json`` atomically (a crash never leaves half a report)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.json"
    tmp = out_dir / f".report.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def step_line(step: int, total: int, loss: float, seconds: float, tokens: int,
              grad_norm) -> str:
    gn = f"{grad_norm:.4f}" if isinstance(grad_norm, float) else "n/a"
    return (f"step {step:>4}/{total} | loss {loss:.6f} | {seconds * 1e3:9.1f} ms | "
            f"{tokens / seconds:10.1f} tok/s | grad-norm {gn}")


def echo(line: str) -> None:
    print(line, file=sys.stdout, flush=True)
