"""The build directory: replaced whole, atomically, never losing what a run left in it.

A compile writes every file into a staging directory beside the build (.<name>.staging.<random>), marks
it complete by renaming it (.<name>.ready.<random>), carries into it what the build holds besides the
compile's own files (the runtime's report.json, checkpoints, logs: each one rename, however large),
retires the build (.<name>.old.<random>/build) and renames the ready one into its place. Compiles of one
recipe run in turn (the lock file .<name>.lock); a compile killed outright leaves its directories beside
the build, and the next compile of the recipe finishes or discards that work first (recover).

What a killed compile had carried aside (parked) may meet a result of the same name that a run wrote in
the build since. The rule can never prefer older results over newer ones: identical copies are kept
once; different ones are both kept, the newer (by modification time: a directory counts its newest
entry) under the name and the other beside it as NAME.parked-N, and the compile says so (a warning).
"""
from __future__ import annotations

import fcntl
import filecmp
import os
import shutil
import tempfile
from pathlib import Path

from moeforge.compiler.diagnostics import Diagnostic, Position

# Tests set this to a callable(step) to stop a compile at a named step on disk (tests/fuzz/test_fuzz_build.py
# kills the process there, one step after another); None in every real run.
at_step = None


def _step(name: str) -> None:
    if at_step is not None:
        at_step(name)


def write_atomically(target: Path, files: dict[str, str], executable=frozenset()) -> list[Diagnostic]:
    """Write `files` as the build `target`; on any failure the previous build stays as it was. The
    warnings say where two versions of a run's result were both kept."""
    target.parent.mkdir(parents=True, exist_ok=True)
    own = set(files)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # compiles of one recipe run in turn: what is left is a dead one's
        notes = recover(target, own)
        _step("staging")
        staging = Path(tempfile.mkdtemp(prefix=_prefix(target, "staging"), dir=target.parent))
        try:
            for i, (name, text) in enumerate(files.items()):
                path = staging / name
                path.write_text(text, encoding="utf-8")
                os.chmod(path, 0o755 if name in executable else 0o644)
                if not i:
                    _step("half written")  # a kill here leaves a staging directory with some of the files
            os.chmod(staging, 0o755)
            # complete: from here on a killed compile's build is swapped in by the next compile, not discarded
            ready = staging.with_name(_prefix(target, "ready") + staging.name.rsplit(".", 1)[1])
            _step("ready")
            os.replace(staging, ready)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return notes + _swap_in(ready, target, own)


def _prefix(target: Path, kind: str) -> str:
    """The names of write_atomically's directories beside the build: .<name>.<kind>.<random>."""
    return f".{target.name}.{kind}."


def _swap_in(ready: Path, target: Path, own: set) -> list[Diagnostic]:
    """Carry what the build holds besides the compile's own files into ready, then put ready in the build's
    place; on a failure every rename is undone and ready is kept if it holds a run's results."""
    moves: list = []  # (from, to) of every rename made so far, undone in reverse on a failure
    retired, notes = None, []
    try:
        try:
            if target.is_dir() and not target.is_symlink():  # a linked build's files stay where they are
                for entry in sorted(os.listdir(target)):
                    if entry not in own:
                        notes += _carry(target, ready, entry, moves, target)
            if target.exists() or target.is_symlink():
                _step("retire")
                retired = Path(tempfile.mkdtemp(prefix=_prefix(target, "old"), dir=target.parent))
                _step("retire build")
                _move(target, retired / "build", moves)
            _step("swap")
            os.replace(ready, target)
        except BaseException:
            for src, dst in reversed(moves):  # the previous build back, and what it held
                os.replace(dst, src)
            moves.clear()
            raise
    except BaseException:
        if not moves and os.path.isdir(ready) and set(os.listdir(ready)) <= own:  # a run's results never go
            shutil.rmtree(ready, ignore_errors=True)
        if retired is not None and not os.path.lexists(retired / "build"):
            shutil.rmtree(retired, ignore_errors=True)
        raise
    if retired is not None:
        notes += _carry_all(retired / "build", target, own)  # what a run wrote while the swap was under way
        _step("discard")
        shutil.rmtree(retired, ignore_errors=True)
    return notes


def recover(target: Path, own: set) -> list[Diagnostic]:
    """Put right what a compile killed inside write_atomically left (called under the recipe's lock).

    A staging directory is a partial build: removed. A ready one is a complete build, perhaps holding some
    of the run's results it was carrying: the swap is finished, as the killed compile would have. A retired
    previous build goes back when no build stands in its place, else the results in it are carried into the
    build and the rest is removed."""
    def left(kind: str) -> list[Path]:
        prefix = _prefix(target, kind)
        return [target.parent / n for n in sorted(os.listdir(target.parent)) if n.startswith(prefix)]

    notes = []
    for staging in left("staging"):
        _step("discard staging")
        shutil.rmtree(staging, ignore_errors=True)
    for ready in left("ready"):
        notes += _swap_in(ready, target, own)
    for retired in left("old"):
        build = retired / "build"
        if os.path.lexists(build):
            if not (target.exists() or target.is_symlink()):
                _step("restore")
                os.replace(build, target)
            elif target.is_dir() and build.is_dir() and not build.is_symlink():
                notes += _carry_all(build, target, own)
        _step("discard old")
        shutil.rmtree(retired, ignore_errors=True)
    return notes


def _carry_all(src_dir: Path, dst_dir: Path, own: set) -> list[Diagnostic]:
    notes: list = []
    for entry in sorted(os.listdir(src_dir)):
        if entry not in own:
            notes += _carry(src_dir, dst_dir, entry, [], dst_dir)
    return notes


def _carry(src_dir: Path, dst_dir: Path, entry: str, moves: list, shown: Path) -> list[Diagnostic]:
    """Move src_dir/entry into dst_dir. When dst_dir has one of that name already: identical, the one in
    src_dir stays (and goes with what is retired); different, both are kept, the newer under the name."""
    src, dst = src_dir / entry, dst_dir / entry
    if not os.path.lexists(dst):
        _step(f"carry {entry}")
        _move(src, dst, moves)
        return []
    if _same(src, dst):
        return []
    parked = _free_name(dst_dir, entry)
    newer, older = (src, dst) if _newest(src) > _newest(dst) else (dst, src)
    _step(f"park {entry}")
    _move(older, dst_dir / parked, moves)
    if newer is src:
        _step(f"carry {entry}")
        _move(src, dst, moves)
    return [Diagnostic("warning", "BUILD_RESULTS_KEPT_BOTH",
                       f"two versions of {entry!r} were found (an interrupted compile had set one aside): the newer "
                       f"is {entry!r}, the older was kept as {parked!r}", Position(str(shown / entry)),
                       help=f"compare them and remove the one you do not need ({shown / parked})")]


def _move(src: Path, dst: Path, moves: list) -> None:
    os.replace(src, dst)
    moves.append((src, dst))


def _free_name(directory: Path, entry: str) -> str:
    n = 1
    while os.path.lexists(directory / f"{entry}.parked-{n}"):
        n += 1
    return f"{entry}.parked-{n}"


def _same(a: Path, b: Path) -> bool:
    """Whether two results are the same: links to one target, files of equal bytes, or directories of the
    same files (names, sizes and modification times: their bytes are not read, a checkpoint is large)."""
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    if a.is_file() and b.is_file():
        return filecmp.cmp(a, b, shallow=False)
    if a.is_dir() and b.is_dir():
        return _tree(a) == _tree(b)
    return False


def _tree(top: Path) -> set:
    out = set()
    for folder, dirs, names in os.walk(top):
        for name in names + dirs:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            out.add((os.path.relpath(path, top), st.st_size if name in names else -1, st.st_mtime_ns))
    return out


def _newest(path: Path) -> int:
    """The latest modification time in a result (a directory: of anything in it)."""
    newest = os.lstat(path).st_mtime_ns
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, names in os.walk(path):
            for name in names + dirs:
                newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime_ns)
    return newest
