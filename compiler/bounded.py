"""One bounded reader for what the compiler reads from a user: recipes, plans, launch scripts, args files,
Hugging Face configs, tokenizer vocabularies, reports (stdin included).

Why one: each reader had its own idea of what a file may be (one read a FIFO and blocked, one read
/dev/zero until the kernel killed it at 22 GB, one took a 3000-level JSON nest into a RecursionError).
Here a file is a regular file (or stdin) of at most `limit` bytes, UTF-8 text, and JSON nested at most
MAX_JSON_DEPTH levels with integers of at most INT_DIGITS digits; anything else is an Unreadable with
one line saying why, which each command reports in its own format.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import sys

MB = 1 << 20
LIMITS = {"recipe": MB, "plan": 16 * MB, "launch": 4 * MB, "report": 64 * MB, "vocabulary": 256 * MB,
          "trace": 1024 * MB}  # a profiler trace: about 20 MB per profiled step of a small model
MAX_JSON_DEPTH = 64    # a plan nests about 5 levels; Python's json gives up near 1000, as a RecursionError
INT_DIGITS = 4300      # Python's own int/str conversion limit (sys.get_int_max_str_digits())


class Unreadable(ValueError):
    """The input cannot be read as asked: str(exc) is one line saying why (without the file's name); kind
    is what went wrong: io, size, encoding or json."""

    def __init__(self, message: str, kind: str = "io", where: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.where = where     # LINE:COL of a JSON syntax error
        self.detail = detail   # json's own words for it, without the position


def read_bytes(name, limit: int, head: bool = False) -> bytes:
    """The bytes of a regular file, or of stdin for '-', at most `limit` of them (with `head`, its first
    `limit` bytes, however long it is: enough to tell a file's kind). A FIFO, a device or a directory is
    not read (a read could block, or never end)."""
    if str(name) == "-":
        stream = getattr(sys.stdin, "buffer", None)  # a text stream without one (a test's StringIO): its text
        data = stream.read(limit + 1) if stream is not None else sys.stdin.read(limit + 1).encode()
    else:
        try:  # O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores the flag
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Unreadable("not a regular file (a FIFO, a device or a directory is not read)")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(limit + 1)
        except OSError as exc:
            raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
    if head:
        return data[:limit]
    if len(data) > limit:
        raise Unreadable(f"larger than {limit} bytes, the limit for this kind of input", "size")
    return data


def read_tail(name, limit: int) -> bytes:
    """The last `limit` bytes of a regular file (a log: its end says why a run stopped), however long it is;
    a FIFO, a device or a directory is not read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable("not a regular file (a FIFO, a device or a directory is not read)")
        os.lseek(fd, max(0, info.st_size - limit), os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit)
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def decode(data: bytes) -> str:
    """UTF-8 text (a BOM dropped); Unreadable names the first bad byte and its line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise Unreadable(f"not valid UTF-8 (byte 0x{data[exc.start]:02x} on line {line})", "encoding") from None


def read_text(name, limit: int) -> str:
    """A file (or stdin for '-') as UTF-8 within `limit` bytes; Unreadable, never a traceback, for size or encoding."""
    return decode(read_bytes(name, limit))


def parse_json(text: str | bytes):
    """JSON as Python values, bounded: finite numbers, integers of at most INT_DIGITS digits, at most
    MAX_JSON_DEPTH levels of nesting."""
    def constant(name):
        raise Unreadable(f"{name} is not a number JSON allows", "json")

    def finite(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):  # 1e400: JSON allows it, Python reads it as infinity
            where = _locate(text, literal)
            raise Unreadable(f"{literal} is too large for a 64-bit float (it would read as infinity): "
                             "write a finite number", "json", where, f"number {literal} out of range")
        return value

    try:
        value = json.loads(text, parse_constant=constant, parse_float=finite)
    except RecursionError:
        raise Unreadable(f"nested deeper than {MAX_JSON_DEPTH} levels", "json") from None
    except Unreadable:
        raise
    except json.JSONDecodeError as exc:
        raise Unreadable(f"not JSON: {exc}"[:200], "json", f"{exc.lineno}:{exc.colno}", exc.msg) from None
    except ValueError as exc:  # not UTF-8, an integer past the conversion limit
        raise Unreadable(str(exc).split(";")[0][:200], "json") from None
    if too_deep(value, MAX_JSON_DEPTH):
        raise Unreadable(f"nested deeper than {MAX_JSON_DEPTH} levels", "json")
    return value


def _locate(text: str | bytes, literal: str) -> str | None:
    """LINE:COL of the first number token ``literal`` in ``text`` (for a message; None if not found)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    m = re.search(r"(?<![\w.+-])" + re.escape(literal) + r"(?![\w.])", text)
    if m is None:
        return None
    line = text.count("\n", 0, m.start()) + 1
    return f"{line}:{m.start() - (text.rfind(chr(10), 0, m.start()) + 1) + 1}"


def read_json(name, limit: int):
    """A JSON file within `limit` bytes, parsed under parse_json's bounds (finite numbers, limited depth)."""
    return parse_json(read_bytes(name, limit))


def too_deep(value, limit: int) -> bool:
    """Whether lists and mappings nest more than `limit` levels (iteratively: no recursion to exhaust)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth >= limit:
            return True
        stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return False
