"""Issue 42, the compiler's half, what it keeps on disk: a run's results parked by a killed compile never
replace newer ones (item 5), `migrate` keeps links, modes and nothing temporary (7), and the validity and
parse caches cannot be forged into a verdict (8). The reproductions are the issue's; kill -9 at every step
of a compile is tests/fuzz/test_fuzz_build.py's.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import hostilelib as H
from moeforge.compiler import __version__
from moeforge.compiler.recipe import cache as valid_cache
from moeforge.compiler.recipe import load as L
from moeforge.compiler.resources import SCHEMAS

try:
    from _blake2 import blake2b
except ImportError:
    from hashlib import blake2b


def cli(root: Path, *args: str, cache: Path | None = None, **env) -> subprocess.CompletedProcess:
    """`python -m moeforge.compiler ARGS` in the sandbox, with its own cache directory (or none)."""
    environ = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", **env}
    environ.pop("MOEFORGE_NO_CACHE", None)
    if cache is None:
        environ["MOEFORGE_NO_CACHE"] = "1"
    else:
        environ["MOEFORGE_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", *args], cwd=root, env=environ, capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr and "internal error" not in proc.stdout + proc.stderr
    return proc


# ----------------------------------------------------------------------------- item 5: parked results

def test_a_parked_report_never_replaces_a_newer_one(fresh_sandbox):
    """The issue's reproduction: compile; a run writes report.json; the build is copied to a .cpu.ready.x
    sibling (what a compile killed while carrying the results leaves); a newer run writes a newer report;
    compile again. The newer report stays report.json, the older one is kept beside it and the compile says
    so; nothing else is left beside the build."""
    assert cli(fresh_sandbox, "compile", "tiny-moe/cpu").returncode == 0
    build = fresh_sandbox / "build" / "tiny-moe" / "cpu"
    (build / "report.json").write_text('{"run": "older"}\n')
    (build / "checkpoints" / "iter_1").mkdir(parents=True)
    (build / "checkpoints" / "iter_1" / "model.pt").write_bytes(b"weights")
    parked = build.with_name(".cpu.ready.x")
    shutil.copytree(build, parked, copy_function=shutil.copy2)  # mtimes kept: the parked copy is the older
    (build / "report.json").write_text('{"run": "newer"}\n')
    os.utime(parked / "report.json", (1, 1))
    proc = cli(fresh_sandbox, "compile", "tiny-moe/cpu")
    assert proc.returncode == 0
    assert (build / "report.json").read_text() == '{"run": "newer"}\n'
    assert (build / "report.json.parked-1").read_text() == '{"run": "older"}\n'
    assert (build / "checkpoints" / "iter_1" / "model.pt").read_bytes() == b"weights"
    assert not (build / "checkpoints.parked-1").exists(), "the same checkpoint twice is kept once"
    assert "warning[BUILD_RESULTS_KEPT_BOTH]" in proc.stdout and "'report.json.parked-1'" in proc.stdout
    assert sorted(p.name for p in build.parent.iterdir()) == [".cpu.lock", "cpu"]


def test_a_newer_parked_result_keeps_its_name(fresh_sandbox):
    """The rule is by age, not by place: a parked report newer than the build's (the build's restored from
    an old backup) keeps the name, and the build's is kept beside it."""
    assert cli(fresh_sandbox, "compile", "tiny-moe/cpu").returncode == 0
    build = fresh_sandbox / "build" / "tiny-moe" / "cpu"
    parked = build.with_name(".cpu.ready.y")
    shutil.copytree(build, parked)
    (parked / "report.json").write_text('{"run": "newer"}\n')
    (build / "report.json").write_text('{"run": "restored"}\n')
    os.utime(build / "report.json", (1, 1))
    assert cli(fresh_sandbox, "compile", "tiny-moe/cpu").returncode == 0
    assert (build / "report.json").read_text() == '{"run": "newer"}\n'
    assert (build / "report.json.parked-1").read_text() == '{"run": "restored"}\n'


# ----------------------------------------------------------------------------- item 7: migrate

V2 = H.TINY.replace("schema: moeforge/recipe/v3", "schema: moeforge/recipe/v2")


def test_migrate_keeps_links_and_modes(tmp_path, fresh_sandbox):
    """migrate replaced a symlinked recipe with a regular file (its target never migrated) and rewrote 0444
    and 0600 files as 0644."""
    work = tmp_path / "work"
    target = work / "shared" / "recipe.yaml"
    target.parent.mkdir(parents=True)
    target.write_text(V2)
    link = work / "link.yaml"
    link.symlink_to(target)
    private, readonly = work / "private.yaml", work / "readonly.yaml"
    for path, mode in ((private, 0o600), (readonly, 0o444)):
        path.write_text(V2)
        path.chmod(mode)
    proc = cli(fresh_sandbox, "migrate", str(link), str(private), str(readonly))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "schema: moeforge/recipe/v3" in target.read_text()
    for path, mode in ((private, 0o600), (readonly, 0o444)):
        assert "schema: moeforge/recipe/v3" in path.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == mode
    assert sorted(p.name for p in work.iterdir()) == ["link.yaml", "private.yaml", "readonly.yaml", "shared"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["recipe.yaml"]


def _full_disk_migrate(directory: Path, root: Path) -> subprocess.CompletedProcess:
    recipe = directory / "r.yaml"
    recipe.write_text(V2)
    return cli(root, "migrate", str(recipe))


def test_migrate_on_a_full_disk_leaves_the_file_and_no_temporary(tmp_path, fresh_sandbox, monkeypatch, capsys):
    """A full disk left .x.yaml.migrate.tmp behind. Now: one line, the file as it was, nothing beside it. On
    a real full filesystem (a 16 KiB tmpfs, as root) and with ENOSPC injected into the write."""
    mount, work = tmp_path / "tiny", tmp_path / "work"
    mount.mkdir()
    work.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                                                   capture_output=True).returncode == 0
    if mounted:
        try:
            (mount / "filler").write_bytes(b"x" * 12 * 1024)
            proc = _full_disk_migrate(mount, fresh_sandbox)
            assert proc.returncode == 1 and "error[E_IO]: cannot rewrite it: No space left on device" in proc.stdout
            assert (mount / "r.yaml").read_text() == V2
            assert sorted(p.name for p in mount.iterdir()) == ["filler", "r.yaml"]
        finally:
            subprocess.run(["umount", str(mount)], check=True)

    from moeforge.compiler.cli import main

    recipe = work / "r.yaml"
    recipe.write_text(V2)
    real = os.fdopen

    class Full:  # a file open for writing on a disk with no space left
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, mode="r", *a, **kw):
        fh = real(fd, mode, *a, **kw)
        return Full(fh) if "w" in mode else fh
    monkeypatch.setattr(os, "fdopen", fdopen)
    assert main(["migrate", str(recipe)]) == 1
    assert "cannot rewrite it: No space left on device (the file is unchanged)" in capsys.readouterr().out
    assert recipe.read_text() == V2 and sorted(p.name for p in work.iterdir()) == ["r.yaml"]


# ----------------------------------------------------------------------------- item 8: the caches

EP3 = H.TINY.replace("  ep: 2\n", "  ep: 3\n")  # refused: 2 ranks do not split into EP 3
UNKNOWN = H.TINY + "surprise: 1\n"             # refused by the schema
NAN = H.TINY.replace("lr: 0.001", "lr: .nan")   # refused by the loader


def _verdicts(root: Path, cache: Path | None) -> tuple[int, str]:
    """What `check` says of the three refused recipes (exit code and every line)."""
    proc = cli(root, "check", "recipes/hostile", cache=cache)
    return proc.returncode, proc.stdout


@pytest.fixture
def poisonable(fresh_sandbox) -> Path:
    for name, text in (("ep3", EP3), ("unknown", UNKNOWN), ("nan", NAN)):
        (fresh_sandbox / "recipes" / "hostile" / f"{name}.yaml").write_text(text)
    return fresh_sandbox


def _old_names(text: str) -> tuple[str, str]:
    """The unkeyed names the caches used before (what the issue's forgeries wrote): the parse entry of the
    text, and the validity entry of what it parses to under the recipe schema."""
    canonical = json.dumps(L.load_text(H.TINY, "x").data if "nan" in text else
                           __import__("yaml").safe_load(text), sort_keys=True, separators=(",", ":"))
    schema = blake2b((SCHEMAS / "recipe.v3.json").read_bytes(), digest_size=32).hexdigest()
    return (blake2b(f"{L.PARSER}\n{text}".encode(), digest_size=32).hexdigest(),
            blake2b(f"{schema}\n{canonical}".encode(), digest_size=32).hexdigest())


def _forged_name(text: str, key: bytes) -> str:
    return blake2b(f"parse\n{__version__}\n{L.PARSER}\n{text}".encode(), key=key, digest_size=32).hexdigest()


def _forge_parse(directory: Path, name: str, data: dict, mac: str | None = None) -> None:
    payload = json.dumps({"data": data, "positions": []}).encode()
    folder = directory / "parsed" / name[:2]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes((mac.encode() + b"\n" if mac is not None else b"") + payload)


def test_a_poisoned_cache_never_changes_what_check_says(poisonable, tmp_path):
    """Forged entries that used to make `ep: 3` check clean, put NaN in the plan or skip the schema: under the
    old unkeyed names, under names keyed with a guessed secret, and as a real entry's content swapped for
    another's. Every verdict stays the one check gives with no cache at all."""
    import yaml

    honest = _verdicts(poisonable, None)
    assert honest[0] == 1 and "checked 3 document(s)" in honest[1], honest
    for name in ("ep3", "unknown", "nan"):
        assert re.search(rf"^recipes/hostile/{name}\.yaml:\d+:\d+: error\[", honest[1], re.M), honest
    cache = tmp_path / "cache"
    assert _verdicts(poisonable, cache) == honest  # a cold cache: entries written for what parsed and validated
    secret = (cache / "secret").read_bytes()
    assert len(secret) == 32 and stat.S_IMODE((cache / "secret").stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700

    good = yaml.safe_load(H.TINY)
    nan = yaml.safe_load(H.TINY)
    nan["schedule"]["lr"] = float("nan")
    guessed = os.urandom(32)
    for name, text in (("ep3", EP3), ("unknown", UNKNOWN), ("nan", NAN)):
        forged = nan if name == "nan" else good
        old_parse, old_valid = _old_names(text)
        for entry in (old_parse, _forged_name(text, guessed)):
            _forge_parse(cache, entry, forged)
            _forge_parse(cache, entry, forged, mac="0" * 64)
        # the schema's verdict: an empty entry under every name a forger could compute
        for entry in (old_valid, blake2b(text.encode(), key=guessed, digest_size=32).hexdigest()):
            (cache / "valid" / entry[:2]).mkdir(parents=True, exist_ok=True)
            (cache / "valid" / entry[:2] / entry).write_bytes(b"")
    real = sorted((cache / "parsed").rglob("*"))
    entries = [p for p in real if p.is_file() and len(p.name) == 64]
    for a, b in zip(entries, entries[1:] + entries[:1]):  # each real entry holding another one's content
        a.write_bytes(b.read_bytes())
    assert _verdicts(poisonable, cache) == honest


def test_a_malformed_entry_is_a_miss(poisonable, tmp_path):
    """Entries of ours cut short, overwritten, replaced by a directory, or validity entries that are not
    empty: each a miss (parsed or validated again), never an error and never a verdict."""
    honest = _verdicts(poisonable, None)
    cache = tmp_path / "cache"
    _verdicts(poisonable, cache)
    for i, path in enumerate(p for p in sorted(cache.rglob("*")) if p.is_file() and p.name != "secret"):
        if path.parent.parent.name == "valid":
            path.write_bytes(b"valid")
        elif i % 3 == 0:
            path.write_bytes(path.read_bytes()[:50])
        elif i % 3 == 1:
            path.write_bytes(b"garbage")
        else:
            path.unlink()
            path.mkdir()
    assert _verdicts(poisonable, cache) == honest


def test_an_emptied_entry_cannot_bring_back_a_float(fresh_sandbox, tmp_path):
    """Where a document spells an integer as a float, its validity entry lists those paths (a cold check reads
    no schema for them): emptied, it is a miss, never "no integer here", so plan.json keeps its integers."""
    import json as json_

    (fresh_sandbox / "recipes" / "hostile" / "floats.yaml").write_text(
        H.TINY.replace("  micro_batch_size: 2\n", "  micro_batch_size: 1.0\n"))
    cache = tmp_path / "cache"
    for attempt in range(2):
        assert cli(fresh_sandbox, "compile", "hostile/floats", cache=cache).returncode == 0
        plan = json_.loads((fresh_sandbox / "build" / "hostile" / "floats" / "plan.json").read_text())
        assert type(plan["training"]["micro_batch_size"]) is int and type(plan["training"]["num_microbatches"]) is int
        listed = [p for p in (cache / "valid").rglob("*") if p.is_file() and p.stat().st_size]
        assert listed or attempt, "the paths are kept with the verdict"
        for entry in listed:
            entry.write_bytes(b"")


def test_the_cache_is_private_and_its_secret_is_its_own(poisonable, tmp_path):
    """A cache directory others can write is made private and gets a new secret (a planted one could sign
    forgeries); one owned by another user is not used at all."""
    honest = _verdicts(poisonable, None)
    cache = tmp_path / "shared"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    planted = b"p" * 32
    (cache / "secret").write_bytes(planted)
    (cache / "secret").chmod(0o600)
    good = __import__("yaml").safe_load(H.TINY)
    for text in (EP3, UNKNOWN):
        entry = _forged_name(text, planted)
        payload = json.dumps({"data": good, "positions": []}).encode()
        mac = blake2b(entry.encode() + b"\n" + payload, key=planted, digest_size=32).hexdigest()
        _forge_parse(cache, entry, good, mac=mac)
    assert _verdicts(poisonable, cache) == honest
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and (cache / "secret").read_bytes() != planted

    if os.geteuid() == 0:  # as root: a directory of another user is left alone (nothing read, nothing written)
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 4242, 4242)
        assert _verdicts(poisonable, theirs) == honest and list(theirs.iterdir()) == []


def test_the_cache_still_saves_the_work(tmp_path, monkeypatch):
    """Bound to its content, an entry still serves the same content: an unchanged document is read back and
    not validated again (test_cold_start.py asserts the imports this saves)."""
    monkeypatch.setenv("MOEFORGE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("MOEFORGE_NO_CACHE", raising=False)
    valid_cache._directory.cache_clear()
    try:
        first = L.load_text(H.TINY, "a.yaml")
        entry = valid_cache.parse_key(L.PARSER, H.TINY)
        assert valid_cache.recall(entry) is not None
        assert L.load_text(H.TINY, "a.yaml").data == first.data
        assert valid_cache.parse_key(L.PARSER, H.TINY + " ") != entry
    finally:
        valid_cache._directory.cache_clear()
