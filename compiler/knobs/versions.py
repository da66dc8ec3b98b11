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
