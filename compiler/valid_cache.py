"""Remember which documents a schema already accepted, across runs, so a cold check skips jsonschema.

Why: importing jsonschema and building a validator is half of a cold `moeforge check`; a recipe that
has not changed since it last validated does not need either. An entry's name is the hash of the
schema file's bytes and of the document's canonical JSON, so any change to either misses. Only
acceptances are stored (a refusal is validated again, for its diagnostics). Entries are empty files
written by atomic rename, so two processes writing at once cannot corrupt anything. The cache lives
in $MOEFORGE_CACHE_DIR, else $XDG_CACHE_HOME/moeforge, else ~/.cache/moeforge; MOEFORGE_NO_CACHE=1
turns it off, and an unwritable directory just means no cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def _directory() -> Path | None:
    if os.environ.get("MOEFORGE_NO_CACHE"):
        return None
    base = os.environ.get("MOEFORGE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "moeforge")
    return Path(base) / "valid"


@lru_cache(maxsize=None)
def _schema_digest(schema_file: Path) -> str:
    return hashlib.sha256(schema_file.read_bytes()).hexdigest()


def key(schema_file: Path, data) -> str | None:
    """The entry name for `data` under this schema (None: the data is not plain JSON)."""
    try:
        text = json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(f"{_schema_digest(schema_file)}\n{text}".encode()).hexdigest()


def known_valid(entry: str | None) -> bool:
    directory = _directory()
    return bool(entry and directory and (directory / entry[:2] / entry).exists())


def remember_valid(entry: str | None) -> None:
    directory = _directory()
    if not (entry and directory):
        return
    try:
        folder = directory / entry[:2]
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        os.close(fd)
        os.replace(tmp, folder / entry)
    except OSError:
        pass  # no cache is only slower
