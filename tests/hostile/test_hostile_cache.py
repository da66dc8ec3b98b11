"""Issue 46, item 3, the validity and parse caches (compiler/recipe/cache.py): with MOEFORGE_CACHE_DIR in a
place others could write, links planted for `parsed`/`valid` (or any of their two-letter folders) are not
followed, so no entry lands where another user can read it; a FIFO swapped in for an entry is a miss, not a
`check` that waits forever.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from test_hostile_state import cli

RECIPE = "recipes/tiny-moe/cpu.yaml"


def _entries(cache: Path) -> list[Path]:
    return [p for kind in ("parsed", "valid") if (cache / kind).is_dir() for p in (cache / kind).rglob("*")
            if p.is_file() and not p.is_symlink()]


def test_planted_links_are_not_followed(sandbox, tmp_path):
    cache, elsewhere = tmp_path / "shared" / "cache", tmp_path / "theirs"
    cache.mkdir(parents=True)
    os.chmod(cache, 0o777)  # world-writable, as a shared scratch directory is: anyone could plant in it
    for kind in ("parsed", "valid"):
        (elsewhere / kind).mkdir(parents=True)
        (cache / kind).symlink_to(elsewhere / kind)
    first = cli(sandbox, "check", RECIPE, cache=cache)
    assert first.returncode == 0, first.stdout + first.stderr
    assert not any(elsewhere.rglob("*.*")) and not [p for p in elsewhere.rglob("*") if p.is_file()]
    for kind in ("parsed", "valid"):
        st = os.lstat(cache / kind)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700, kind
    entries = _entries(cache)
    assert entries and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in entries)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_planted_links_one_level_down_are_not_followed(sandbox, tmp_path):
    """Every two-letter folder an entry could land in is a link to another user's directory."""
    cache, elsewhere = tmp_path / "cache", tmp_path / "theirs"
    elsewhere.mkdir()
    for kind in ("parsed", "valid"):
        (cache / kind).mkdir(parents=True)
        for i in range(256):
            (cache / kind / f"{i:02x}").symlink_to(elsewhere)
    os.chmod(cache, 0o777)
    assert cli(sandbox, "check", RECIPE, cache=cache).returncode == 0
    assert not [p for p in elsewhere.iterdir()], list(elsewhere.iterdir())
    assert _entries(cache)


def test_a_fifo_for_an_entry_is_a_miss_not_a_hang(sandbox, tmp_path):
    cache = tmp_path / "cache"
    honest = cli(sandbox, "check", RECIPE, cache=cache)
    entries = _entries(cache)
    assert honest.returncode == 0 and entries
    for p in entries:  # what another process (or a planted link before) could swap in
        p.unlink()
        os.mkfifo(p, 0o600)
    again = cli(sandbox, "check", RECIPE, cache=cache)  # cli runs it under a timeout: a hang fails the test
    assert (again.returncode, again.stdout) == (honest.returncode, honest.stdout)
