"""The one guarded reader of the runtime's input files: plan.json, megatron-lm.args, a dataset's
PREFIX.json, a JSONL line of a corpus.

Why: every runtime entry point (moeforge.runtime.train, moeforge.runtime.megatron, moeforge.runtime.dryrun, data prepare)
must stop on a hostile or damaged file with one line naming the file and what is wrong, never a
ValueError, RecursionError or UnicodeDecodeError traceback.  The limits are far beyond any file
moeforge writes (a plan is a few KB and nests six levels) and far below what would exhaust
memory or the interpreter's stack.  Integers beyond 64 bits and NaN/Infinity are refused too:
no Megatron value holds them, and Python would carry them to a crash deep inside torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import PlanError

MAX_FILE_BYTES = 16 << 20  # plan.json, megatron-lm.args, PREFIX.json (moeforge writes a few KB)
MAX_DEPTH = 64             # nesting of JSON arrays/objects (a plan nests about six)
MAX_NUMBER_CHARS = 40      # digits of one JSON number (2**64 has 20; a float's repr at most 24)
INT_RANGE = (-(1 << 63), (1 << 64) - 1)  # int64 and uint64: whatever Megatron and torch can hold


class InputError(ValueError):
    """What is wrong with a file or a JSON text, in words (the caller names the file)."""


def read_bytes(path: str | Path, limit: int = MAX_FILE_BYTES, error=PlanError) -> bytes:
    """The file's bytes, or ``error`` naming it: unreadable, not a regular file, over ``limit``."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except IsADirectoryError:
        raise error(f"{p}: is a directory, not a file") from None
    except OSError as exc:
        raise error(f"cannot read {p}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{p}: larger than {limit >> 20} MiB, which no moeforge file is (a wrong or damaged "
                    f"file? recompile the recipe)")
    return data


def decode(data: bytes, where: str, error=PlanError) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{where}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                    f"moeforge writes UTF-8 (recompile the recipe)") from None


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES, error=PlanError) -> str:
    """The file as UTF-8 text, or ``error`` with one line naming the file."""
    return decode(read_bytes(path, limit, error), str(path), error)


def _number(text: str):
    if len(text) > MAX_NUMBER_CHARS:
        raise InputError(f"a number of {len(text)} characters ({text[:12]}...); no Megatron value has more "
                         f"than {MAX_NUMBER_CHARS}")
    return text


def _int(text: str) -> int:
    value = int(_number(text))
    if not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise InputError(f"the integer {value} does not fit in 64 bits")
    return value


def _float(text: str) -> float:
    value = float(_number(text))
    if not math.isfinite(value):
        raise InputError(f"the number {text} overflows a float")
    return value


def _constant(name: str):
    raise InputError(f"{name} is not a JSON number (moeforge never writes one)")


def _depth_ok(value) -> None:
    """Nesting of at most MAX_DEPTH levels, checked without recursion."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def parse_json(text: str, strict: bool = True):
    """A JSON text as Python values; InputError (or json.JSONDecodeError) for what it cannot be.

    ``strict`` (a file moeforge writes): numbers fit 64 bits, no NaN, at most MAX_DEPTH levels. Otherwise
    (a corpus line, whose other keys are someone else's) only what Python itself cannot parse is refused:
    an integer of more than 4300 digits, nesting deeper than its recursion limit."""
    try:
        if not strict:
            return json.loads(text)
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels" if strict
                         else "nested deeper than Python's recursion limit") from None
    except ValueError as exc:
        if isinstance(exc, (json.JSONDecodeError, InputError)):
            raise
        raise InputError(str(exc).split(";")[0]) from None  # "Exceeds the limit (4300 digits) for integer ..."
    _depth_ok(value)
    return value


def load_json(path: str | Path, limit: int = MAX_FILE_BYTES, error=PlanError):
    """Read and parse a JSON file; ``error`` with ``FILE:LINE:COL`` or ``FILE`` and one line otherwise."""
    text = read_text(path, limit, error)
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except InputError as exc:
        raise error(f"{path}: {exc}") from None
