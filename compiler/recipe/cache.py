"""Remember which documents a schema already accepted, and what a YAML file parsed to, across runs, so a
cold check of an unchanged recipe skips jsonschema and PyYAML.

Why: importing jsonschema and building a validator is half of a cold `moeforge check`; a recipe that
has not changed since it last validated does not need either. Only acceptances are stored (a refusal is
validated again, for its diagnostics), and only documents that parsed without error.

Why it cannot be forged: an entry is a verdict that `check` acts on, so it counts only when this user's
moeforge wrote it. The cache directory is private (made 0700; one owned by another user is not used, one
that others could write is made private and gets a new secret), and every entry is keyed with a per-user
secret (32 random bytes in <cache>/secret, 0600, made once) by BLAKE2b's keyed mode (from the
interpreter's built-in _blake2: hashlib would load OpenSSL, a few milliseconds of a cold start). A
validity entry's name is the keyed digest of this moeforge's version, the schema file's bytes and the
document's canonical JSON; it is empty, or, for a document with an integral float, holds the keyed digest
of its name and content and then the paths the schema wants as integers. A parse entry's name is the
keyed digest of the version, the parser's and the text, and it holds the keyed digest of its name and
content before the content.
So an entry written by anyone without the secret, by another moeforge version, for other content, or
cut short is a miss, and the document is validated or parsed again; a poisoned cache never changes
what `check` says.

Entries are written under a name of their own (pid and random suffix, O_EXCL) and then renamed into
place (atomic): two processes writing the same entry both succeed, and a reader sees no entry or a whole
one. The cache lives in $MOEFORGE_CACHE_DIR, else $XDG_CACHE_HOME/moeforge, else ~/.cache/moeforge;
MOEFORGE_NO_CACHE=1 turns it off, and a directory that cannot be used just means no cache.
"""
from __future__ import annotations

import json
import os
import stat
from functools import lru_cache
from pathlib import Path

from moeforge.compiler import __version__

try:
    from _blake2 import blake2b
except ImportError:  # an interpreter without the built-in module: the same function from hashlib
    from hashlib import blake2b

SECRET_BYTES = 32


@lru_cache(maxsize=1)
def _directory() -> tuple[Path, bytes] | None:
    """(the private cache directory, this user's secret), or None: no cache this run."""
    if os.environ.get("MOEFORGE_NO_CACHE"):
        return None
    base = Path(os.environ.get("MOEFORGE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "moeforge"))
    try:
        try:
            st = os.stat(base)
        except FileNotFoundError:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.stat(base)
        if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
            return None  # another user's directory: what it holds is theirs to claim, not ours to trust
        shared = bool(st.st_mode & 0o022)  # others could have written in it, a secret included
        if st.st_mode & 0o077:
            os.chmod(base, 0o700)
        return base, _secret(base / "secret", renew=shared)
    except OSError:
        return None


def _secret(path: Path, renew: bool) -> bytes:
    """This user's key: read when it is a private file of ours of the right size; else a new one (renew:
    always), made whole beside it and linked into place (a concurrent run's wins, and both then use it)."""
    if not renew:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not block the open
        except FileNotFoundError:
            fd = None
        if fd is not None:
            try:
                st = os.fstat(fd)
                key = os.read(fd, SECRET_BYTES + 1) if stat.S_ISREG(st.st_mode) else b""
            finally:
                os.close(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077 \
                    and len(key) == SECRET_BYTES:
                return key
            renew = True  # not ours, readable by others, or cut short: replaced
    tmp = path.with_name(f".secret-{os.getpid()}-{os.urandom(6).hex()}")
    key = os.urandom(SECRET_BYTES)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, key)
    finally:
        os.close(fd)
    try:
        if renew:
            os.replace(tmp, path)
            return key
        try:
            os.link(tmp, path)
            return key
        except FileExistsError:  # another run made it first: use that one
            return _secret(path, renew=False)
    finally:
        if tmp.exists():
            tmp.unlink()


def _digest(secret: bytes, text: str | bytes) -> str:
    return blake2b(text.encode() if isinstance(text, str) else text, key=secret, digest_size=32).hexdigest()


@lru_cache(maxsize=None)
def _schema_digest(schema_file: Path) -> str:
    return blake2b(schema_file.read_bytes(), digest_size=32).hexdigest()


def key(schema_file: Path, data) -> str | None:
    """The entry name for `data` under this schema (None: no cache, or the data is not plain JSON)."""
    cache = _directory()
    if cache is None:
        return None
    try:
        text = json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return _digest(cache[1], f"valid\n{__version__}\n{_schema_digest(schema_file)}\n{text}")


def valid(entry: str | None, detailed: bool) -> list | None:
    """What remember_valid() kept for this entry: the accepted document's integer paths (moeforge.compiler.recipe.
    integers), [] when there are none; None for a miss. detailed: the document holds an integral float, so
    only an entry that lists its paths will do (an empty one, cut short or not ours, is a miss)."""
    cache = _directory()
    if not (entry and cache):
        return None
    if detailed:
        paths = _recall("valid", entry)
        return [tuple(p) for p in paths] if isinstance(paths, list) and all(isinstance(p, list) for p in paths) \
            else None
    folder = _folder(cache[0], "valid", entry, create=False)
    if folder is None:
        return None
    try:
        st = os.lstat(folder / entry)
    except OSError:
        return None
    ours = stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077
    return [] if ours and st.st_size == 0 else None  # an empty file of ours, else a miss


def remember_valid(entry: str | None, paths: list | None = None) -> None:
    """The schema accepted this entry's document: an empty file, or (paths given) the keyed list of them."""
    cache = _directory()
    if entry and cache:
        if paths is None:
            _write(cache[0] / "valid", entry, b"")
        else:
            _store("valid", entry, [list(p) for p in paths])


def _private_dir(path: Path, create: bool) -> bool:
    """Whether ``path`` is a directory of ours that only we can use, never following a link: a link, a file
    or a FIFO planted there (before the cache directory was made private) is removed, and the directory
    made again when ``create``; one owned by someone else, or open to others, means no cache."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        try:
            os.mkdir(path, 0o700)
            st = os.lstat(path)
        except OSError:
            return False
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):  # a planted link or file: in our private directory, so ours to remove
        try:
            os.unlink(path)
        except OSError:
            return False
        return _private_dir(path, create)
    if st.st_uid != os.getuid():
        return False
    if st.st_mode & 0o077:
        try:
            os.chmod(path, 0o700, follow_symlinks=False)
        except (OSError, NotImplementedError):
            return False
    return True


def _folder(base: Path, kind: str, entry: str, create: bool) -> Path | None:
    """<cache>/<kind>/<xx>/, each level checked by _private_dir (None: not there, or not usable)."""
    directory, folder = base / kind, base / kind / entry[:2]
    if _private_dir(directory, create) and _private_dir(folder, create):
        return folder
    return None


def _write(directory: Path, entry: str, payload: bytes) -> None:
    """The entry, whole or not at all: written under a name of its own, then renamed into place."""
    try:
        folder = _folder(directory.parent, directory.name, entry, create=True)
        if folder is None:
            return
        tmp = folder / f".tmp-{os.getpid()}-{os.urandom(6).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, payload)
        finally:
            os.close(fd)
        os.replace(tmp, folder / entry)
    except OSError:
        pass  # no cache is only slower


def parse_key(parser: str, text: str) -> str | None:
    """The parse entry's name for `text` read by parser version `parser` (None: no cache)."""
    cache = _directory()
    return None if cache is None else _digest(cache[1], f"parse\n{__version__}\n{parser}\n{text}")


def _refuse_constant(name):
    raise ValueError(f"{name} in a cache entry")


def recall(entry: str | None):
    """What store() kept under this entry (None: a miss, an entry this user's moeforge did not write, or one
    that cannot be read)."""
    return _recall("parsed", entry)


def store(entry: str | None, value) -> None:
    """Keep a parse result for recall() under its entry (None: no cache); a failed write only costs speed."""
    _store("parsed", entry, value)


def _recall(kind: str, entry: str | None):
    cache = _directory()
    if not (entry and cache):
        return None
    folder = _folder(cache[0], kind, entry, create=False)
    if folder is None:
        return None
    try:
        raw = _read_entry(folder / entry)
        if raw is None:
            return None
        mac, _, payload = raw.partition(b"\n")
        if mac.decode("ascii") != _digest(cache[1], entry.encode() + b"\n" + payload):
            return None
        return json.loads(payload, parse_constant=_refuse_constant)
    except (OSError, ValueError):
        return None


MAX_ENTRY = 16 << 20  # a parse entry holds one recipe's data (a recipe is at most 1 MB)


def _read_entry(path: Path) -> bytes | None:
    """An entry's bytes when it is a regular file of ours, not a link (O_NOFOLLOW) and not a FIFO (O_NONBLOCK:
    opening one must not wait for a writer), at most MAX_ENTRY bytes; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        chunks, size = [], 0
        while size <= MAX_ENTRY:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return None if size > MAX_ENTRY else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _store(kind: str, entry: str | None, value) -> None:
    cache = _directory()
    if not (entry and cache):
        return
    try:
        payload = json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return  # not plain JSON: computed again next time
    mac = _digest(cache[1], entry.encode() + b"\n" + payload)
    _write(cache[0] / kind, entry, mac.encode() + b"\n" + payload)
