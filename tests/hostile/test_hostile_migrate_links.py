"""`moeforge migrate` of a recipe with hard links (issue 46 item 8): os.replace gave the migrated name a new
inode, so the second link kept the old version. Now the file is rewritten in place: one inode, every link
migrated, its mode kept, nothing left beside it; a full disk leaves it as it was."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import hostilelib as H
from moeforge.compiler.cli import main

V2 = H.TINY.replace("schema: moeforge/recipe/v3", "schema: moeforge/recipe/v2")


def test_migrate_keeps_hard_links(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    first, second = work / "a.yaml", work / "b.yaml"
    first.write_text(V2)
    first.chmod(0o640)
    os.link(first, second)
    inode = first.stat().st_ino
    assert main(["migrate", str(first)]) == 0, capsys.readouterr()
    assert first.stat().st_ino == second.stat().st_ino == inode and first.stat().st_nlink == 2
    assert "schema: moeforge/recipe/v3" in second.read_text() and second.read_text() == first.read_text()
    assert stat.S_IMODE(first.stat().st_mode) == 0o640
    assert sorted(p.name for p in work.iterdir()) == ["a.yaml", "b.yaml"]
    assert main(["migrate", "--check", str(second)]) == 0  # the other name is current too


def test_a_full_disk_leaves_a_linked_file_as_it_was(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    first, second = work / "a.yaml", work / "b.yaml"
    first.write_text(V2)
    os.link(first, second)
    real = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **kw: Full(real(fd, mode, *a, **kw)) if "w" in mode
                        else real(fd, mode, *a, **kw))
    assert main(["migrate", str(first)]) == 1
    assert "cannot rewrite it: No space left on device" in capsys.readouterr().out
    assert first.read_text() == second.read_text() == V2
    assert sorted(p.name for p in work.iterdir()) == ["a.yaml", "b.yaml"]
