"""Release numbers as integers, so rules and tables compare megatron-core, TE and torch versions with `>=`."""
from __future__ import annotations

import re

_VERSION = re.compile(r"([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?", re.ASCII)


def version_int(text: str | None) -> int:
    """'2.12.0' -> 2012000; None (absent) -> 0. Pre-release suffixes are ignored."""
    if text is None:
        return 0
    match = _VERSION.match(str(text))
    if not match:
        return 0
    parts = [int(p) if p else 0 for p in match.groups()]
    return parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2]


def version_text(v):
    """version_int's inverse, as Megatron prints a release: 2012000 -> '2.12.0' (anything else as it is)."""
    if not isinstance(v, int) or isinstance(v, bool):
        return v
    return f"{v // 1_000_000}.{v // 1_000 % 1_000}.{v % 1_000}"


def megatron_core_release(plan: dict) -> str | None:
    """The megatron-core release a plan is for (platform.software.megatron_core); None when a plan
    written by hand names none."""
    return ((plan.get("platform") or {}).get("software") or {}).get("megatron_core")
