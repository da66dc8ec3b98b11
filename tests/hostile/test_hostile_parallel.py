"""Concurrent compiles (`make -j compile-all`, two people compiling the same recipe, CI jobs
sharing a checkout): every build that results is complete and byte-for-byte the one a serial
compile produces, a reader never sees a half-written build directory, and nothing temporary is
left behind (only the `.<name>.lock` file that serialises the swaps).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import hostilelib as H

SAME = "tiny-moe/cpu"
WRITERS = 4          # processes compiling SAME at once
ROUNDS = 2


def popen(root: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen([sys.executable, "-m", "moeforge.compiler", *args], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, out + err
        assert "Traceback" not in out + err


def leftovers(build: Path) -> list[str]:
    out = []
    for d in [build] + [p for p in build.rglob("*") if p.is_dir()]:
        for p in d.iterdir():
            if p.name.startswith(".") and not (p.name.endswith(".lock") and p.is_file()):
                out.append(str(p.relative_to(build)))
    return sorted(out)


@pytest.fixture(scope="module")
def serial(sandbox, moeforge_cli) -> dict[str, dict[str, bytes]]:
    """The reference: each recipe compiled alone, one after the other, into the sandbox's build/."""
    ids = [SAME] + [rid for rid in ("qwen3-30b-a3b/h100-bf16", "qwen3-30b-a3b/b200-bf16", "gpt-oss-120b/h100-bf16",
                                    "qwen3-next-80b-a3b/h100-bf16")
                    if (sandbox / "recipes" / f"{rid}.yaml").exists()]
    shutil.rmtree(sandbox / "build", ignore_errors=True)
    ref = {}
    for rid in ids:
        proc = moeforge_cli(sandbox, "compile", rid)
        if proc.returncode == 0:  # the catalogue may hold recipes that do not compile today
            ref[rid] = H.tree(sandbox / "build" / rid)
    assert SAME in ref and len(ref) >= 2, ref.keys()
    shutil.rmtree(sandbox / "build")
    return ref


def test_parallel_compiles_equal_serial(sandbox, serial):
    build = sandbox / "build"
    seen_partial: list[str] = []
    stop = threading.Event()

    def reader():  # a launcher looking at build/<recipe>/ while compiles run
        target = build / SAME
        while not stop.is_set():
            try:
                fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue
            try:
                names = os.listdir(fd)
                try:
                    current = os.stat(target).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    current = False
            finally:
                os.close(fd)
            # a directory that was swapped out meanwhile is the retired build being deleted: fine
            if current and sorted(names) != sorted(H.OUTPUTS):
                seen_partial.append(repr(sorted(names)))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for _ in range(ROUNDS):
            procs = [popen(sandbox, "compile", SAME) for _ in range(WRITERS)]
            procs += [popen(sandbox, "compile", rid) for rid in serial if rid != SAME]  # make -j compile-all
            finish(procs)
            for rid, files in serial.items():
                assert H.tree(build / rid) == files, f"{rid}: differs from the serial compile"
            assert not leftovers(build), leftovers(build)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not seen_partial, f"a reader saw an incomplete build: {seen_partial[:3]}"


def test_parallel_compiles_into_one_out_dir(sandbox, serial, tmp_path):
    """The same with --out pointing elsewhere (a shared scratch directory): identical results."""
    out = tmp_path / "shared out"
    ref_proc = popen(sandbox, "compile", SAME, "--out", str(out))
    finish([ref_proc])
    reference = H.tree(out / SAME)
    shutil.rmtree(out)
    for _ in range(ROUNDS):
        finish([popen(sandbox, "compile", SAME, "--out", str(out)) for _ in range(WRITERS)])
        assert H.tree(out / SAME) == reference
        assert not leftovers(out), leftovers(out)


def test_failing_compile_racing_a_good_one_keeps_a_whole_build(sandbox, serial):
    """A compile that fails (bad override) while good ones run never disturbs the good build."""
    build = sandbox / "build"
    finish([popen(sandbox, "compile", SAME)])
    procs = [popen(sandbox, "compile", SAME) for _ in range(2)]
    bad = [popen(sandbox, "compile", SAME, "--set", "parallelism.ep=banana") for _ in range(2)]
    finish(procs)
    for p in bad:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 1 and "E_SCHEMA" in out and "Traceback" not in out + err
    assert H.tree(build / SAME) == serial[SAME]
    assert not leftovers(build)
