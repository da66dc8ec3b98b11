"""The measurements a report holds (peak memory per rank, installed versions) and how it is written.

Why: each number states how it was measured (the allocator on GPU, max RSS on CPU), and the report
is written atomically, so a crash never leaves half a report for `moeforge calibrate` to read.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

import torch

from ..preflight import probes


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


def versions() -> dict:
    """The software that ran: the same facts the preflight reads (preflight/probes.py, one reader of
    installed versions), from package metadata, never importing TE or DeepEP."""
    return probes.software()


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
