"""Publishing a prepared dataset: PREFIX.bin, .idx and .json become visible together or not at all.

Megatron's indexed dataset opens PREFIX.bin and PREFIX.idx by name, so three renames (one per
file) would show a new .bin beside an old .idx to a run that starts between them.  Instead the
three files of one run live in one directory, and the visible names are fixed links into a
pointer that one rename switches:

    DIR/NAME.bin  -> .NAME.current/NAME.bin        (likewise NAME.idx and NAME.json; relative links)
    DIR/.NAME.current -> .NAME.gen-XXXXXXXX        (the generation: the directory of one run's files)
    DIR/.NAME.lock                                 (flock'ed by the run writing this prefix)

A run builds in ``.NAME.tmp-XXXXXXXX/``, renames it to ``.NAME.gen-XXXXXXXX``, and replaces
``.NAME.current`` (the one rename that switches all three files); then the previous generation goes.
A prefix of regular files (moeforge before this layout, or Megatron-LM's preprocess_data.py) is
converted once: its .idx is removed first, so until the new .idx link appears no dataset is visible
(never a torn one).  Holding the prefix's lock, a run removes what dead runs left (temporaries and
generations nothing points to); a second run on the same prefix meanwhile is refused.

``MOEFORGE_DATA_PREPARE_KILL_AT=STEP`` (a test hook) SIGKILLs the run right after STEP, one of
STEPS, so tests can kill it at every rename deterministically.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal

from moeforge.runtime.data_prepare.tokenizers import DataError

EXTS = (".bin", ".idx", ".json")
KILL_ENV = "MOEFORGE_DATA_PREPARE_KILL_AT"
# after: the files are built | the build directory is a generation | the old .idx is gone (a prefix of regular
# files) | the visible links exist | .NAME.current points to the new generation | the old generation is gone
STEPS = ("built", "generation", "unlinked-idx", "linked", "committed", "retired")


def step(name: str) -> None:
    """The kill hook: SIGKILL this process right after ``name`` when the test asks for it."""
    assert name in STEPS, name
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _suffix() -> str:
    return "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))


class Prefix:
    """The names of one dataset prefix DIR/NAME."""

    def __init__(self, outdir: str, name: str):
        self.outdir, self.name = outdir, name
        self.current = self.at(f".{name}.current")
        self.lock_path = self.at(f".{name}.lock")
        self._ours = re.compile(rf"^\.{re.escape(name)}\.(tmp|gen)-[a-z0-9_]{{8}}$")

    def at(self, entry: str) -> str:
        return os.path.join(self.outdir, entry)

    def visible(self, ext: str) -> str:
        return self.at(self.name + ext)

    def link_target(self, ext: str) -> str:
        return os.path.join(f".{self.name}.current", self.name + ext)

    def temporary(self) -> str:
        return self.at(f".{self.name}.tmp-{_suffix()}")

    def make_build_dir(self) -> str:
        """A new, empty .NAME.tmp-XXXXXXXX/ (readable like the files it will hold: it becomes their home)."""
        while True:
            path = self.temporary()
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                continue

    def generation(self) -> str | None:
        """The generation .NAME.current points to (a name in DIR), or None."""
        try:
            return os.readlink(self.current)
        except OSError:
            return None

    def is_link(self, ext: str) -> bool:
        try:
            return os.readlink(self.visible(ext)) == self.link_target(ext)
        except OSError:
            return False

    def ours(self, entry: str) -> bool:
        """A temporary or generation of this prefix (by its exact name pattern)."""
        return bool(self._ours.match(entry))

    def leftovers(self) -> list[str]:
        """Temporaries and generations of this prefix that .NAME.current does not point to."""
        live = self.generation()
        return sorted(self.at(e) for e in os.listdir(self.outdir) if self.ours(e) and e != live)


def lock(prefix: Prefix, display: str) -> int:
    """The prefix's lock (an open descriptor, released when it is closed or the process dies)."""
    import fcntl

    fd = os.open(prefix.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataError(f"--output {display}: another data prepare is writing this prefix (fix: wait for it "
                        f"to finish, or choose another --output)") from None
    return fd


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def clean_stale(prefix: Prefix) -> list[str]:
    """Remove what dead runs left (call holding the lock: no live run owns any of it)."""
    stale = prefix.leftovers()
    for path in stale:
        remove(path)
    return stale


def _link(prefix: Prefix, target: str, name: str) -> None:
    """``name`` becomes a symlink to ``target`` in one rename (a temporary link replaces it)."""
    tmp = prefix.temporary()
    os.symlink(target, tmp)
    try:
        os.replace(tmp, name)
    except BaseException:
        remove(tmp)
        raise


def fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    try:
        fsync(path)
    except OSError:  # some filesystems cannot fsync a directory; the data files are synced
        pass


def publish(prefix: Prefix, built: str) -> None:
    """Make the three files in ``built`` (NAME.bin/.idx/.json) the prefix's dataset, in one rename."""
    fsync_dir(built)
    step("built")
    gen = prefix.at(f".{prefix.name}.gen-{os.path.basename(built)[-8:]}")  # the same 8 characters
    os.replace(built, gen)
    committed = False
    try:
        step("generation")
        if not all(prefix.is_link(ext) for ext in EXTS):
            # another layout: no .idx (nothing visible) until every name is a link, the .idx link last
            if os.path.lexists(prefix.visible(".idx")):
                os.unlink(prefix.visible(".idx"))
                step("unlinked-idx")
            for ext in (".bin", ".json", ".idx"):
                if ext == ".idx" or not prefix.is_link(ext):
                    _link(prefix, prefix.link_target(ext), prefix.visible(ext))
            fsync_dir(prefix.outdir)
            step("linked")
        old = prefix.generation()
        _link(prefix, os.path.basename(gen), prefix.current)  # the switch: all three files at once
        committed = True
        fsync_dir(prefix.outdir)
        step("committed")
        if old and old != os.path.basename(gen) and prefix.ours(old):
            remove(prefix.at(old))
            step("retired")
    finally:
        if not committed:
            remove(gen)
