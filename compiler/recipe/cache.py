"""Remember which documents a schema already accepted, and what a YAML file parsed to, across runs, so a
cold check of an unchanged recipe skips jsonschema and PyYAML.

Why: importing jsonschema and building a validator is half of a cold `moeforge check`; a recipe that
has not changed since it last validated does not need either. An entry's name is the hash (BLAKE2b,
from the interpreter's built-in _blake2: hashlib would load OpenSSL, a few milliseconds of a cold
start) of the schema file's bytes and of the document's canonical JSON, so any change to either
misses. Only acceptances are stored (a refusal is validated again, for its diagnostics). Entries are
empty files, each created under a name of its own (pid and random suffix, O_EXCL) and then renamed
into place (os.replace, atomic): two processes writing the same entry at once both succeed, and a
reader sees either no entry or a whole one. The cache lives
in $MOEFORGE_CACHE_DIR, else $XDG_CACHE_HOME/moeforge, else ~/.cache/moeforge; MOEFORGE_NO_CACHE=1
turns it off, and an unwritable directory just means no cache.

Parsed documents (compiler.recipe.load) are entries too, under parsed/: named by the hash of the parser's
version and the file's text, holding the values and positions as JSON, written the same atomic way.
Only a document that parsed without error is stored; an entry that cannot be read is a miss.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

try:
    from _blake2 import blake2b
except ImportError:  # an interpreter without the built-in module: the same function from hashlib
    from hashlib import blake2b


@lru_cache(maxsize=1)
def _directory() -> Path | None:
    if os.environ.get("MOEFORGE_NO_CACHE"):
        return None
    base = os.environ.get("MOEFORGE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "moeforge")
    return Path(base) / "valid"


@lru_cache(maxsize=None)
def _schema_digest(schema_file: Path) -> str:
    return blake2b(schema_file.read_bytes(), digest_size=32).hexdigest()


def key(schema_file: Path, data) -> str | None:
    """The entry name for `data` under this schema (None: the data is not plain JSON)."""
    try:
        text = json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return blake2b(f"{_schema_digest(schema_file)}\n{text}".encode(), digest_size=32).hexdigest()


def known_valid(entry: str | None) -> bool:
    directory = _directory()
    return bool(entry and directory and (directory / entry[:2] / entry).exists())


def remember_valid(entry: str | None) -> None:
    _write(_directory(), entry, b"")


def _write(directory: Path | None, entry: str | None, payload: bytes) -> None:
    """The entry, whole or not at all: written under a name of its own, then renamed into place."""
    if not (entry and directory):
        return
    try:
        folder = directory / entry[:2]
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".tmp-{os.getpid()}-{os.urandom(6).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, payload)
        finally:
            os.close(fd)
        os.replace(tmp, folder / entry)
    except OSError:
        pass  # no cache is only slower


def _parsed() -> Path | None:
    directory = _directory()
    return directory.parent / "parsed" if directory else None


def parse_key(parser: str, text: str) -> str:
    return blake2b(f"{parser}\n{text}".encode(), digest_size=32).hexdigest()


def recall(entry: str):
    """What store() kept under this entry (None: a miss, or an entry that cannot be read)."""
    directory = _parsed()
    if directory is None:
        return None
    try:
        return json.loads((directory / entry[:2] / entry).read_bytes())
    except (OSError, ValueError):
        return None


def store(entry: str, value) -> None:
    try:
        payload = json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return  # not plain JSON: parsed again next time
    _write(_parsed(), entry, payload)
