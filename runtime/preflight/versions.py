"""Version strings as the platform states them and as a node reports them, compared without packaging.

Why: the runtime never imports the compiler, and a node needs nothing beyond megatron-core's own
dependencies, so the two comparisons preflight needs are written here: "the same version at the
precision the platform states" ("2.13" is 2.13.0+cpu) and a hazard's range ("<0.18.0", ">=3.5.19,<3.6").
"""

from __future__ import annotations

import re

_RELEASE = re.compile(r"^v?(\d+(?:\.\d+)*)(.*)$")
_PRE = re.compile(r"^[.-]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.IGNORECASE)
_OPS = ("<=", ">=", "==", "!=", "<", ">")


def parse(version: str) -> tuple[tuple[int, ...], bool] | None:
    """(release numbers, is a pre-release) of ``version``; a local label (+cpu, +cu128) is ignored;
    None when it does not start with a number."""
    match = _RELEASE.match(str(version).strip())
    if not match:
        return None
    rest = match.group(2).split("+", 1)[0]
    return tuple(int(p) for p in match.group(1).split(".")), bool(_PRE.match(rest))


def same_at_stated_precision(stated: str, installed: str) -> bool:
    """``installed`` agrees with every number ``stated`` gives ("2.13" matches 2.13.0+cpu and 2.13.1,
    "0.16.1" does not match 0.16.0); a version that is not numeric must be equal as text."""
    want, have = parse(stated), parse(installed)
    if want is None or have is None or want[1]:  # "0.18.0rc1" is one exact build
        return str(stated).strip() == str(installed).strip().split("+", 1)[0]
    return have[0][:len(want[0])] == want[0] and not have[1]


def _key(parsed: tuple[tuple[int, ...], bool], width: int) -> tuple:
    release, pre = parsed
    return (*release, *([0] * (width - len(release))), 0 if pre else 1)


def satisfies(installed: str, spec: str) -> bool:
    """``installed`` meets every comma-separated comparison of ``spec``; ValueError names a bad one."""
    have = parse(installed)
    if have is None:
        raise ValueError(f"installed version {installed!r} is not a version number")
    for part in (p.strip() for p in spec.split(",")):
        op = next((o for o in _OPS if part.startswith(o)), None)
        bound = parse(part[len(op):]) if op else None
        if op is None or bound is None:
            raise ValueError(f"{part!r} is not a comparison such as '<0.18.0' or '>=3.5.19' (in {spec!r})")
        width = max(len(have[0]), len(bound[0]))
        a, b = _key(have, width), _key(bound, width)
        if not {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]:
            return False
    return True
