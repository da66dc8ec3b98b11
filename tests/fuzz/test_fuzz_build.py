"""Never a partial build: `compile --out DIR` after failures, faults and kills.

The contract (README, compiler/targets/emit.py): a failed compile leaves the previous build intact, a
successful one swaps the complete new build in, and nothing else is left in the build root. What a
run left in the build directory (the runtime's report.json, a checkpoint) is kept either way.
The only other entry allowed next to build/<dir>/<name>/ is the lock file `.<name>.lock` that
emit.write_atomically uses to serialise concurrent compiles of one recipe.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

import fuzzlib
from fuzzlib import OUTPUTS, dump, fuzz_settings, tree

CASE = "tiny-moe/fuzz-build"
NAME = CASE.rsplit("/", 1)[1]
BASE = fuzzlib.RECIPE_DATA["tiny-moe/cpu"]


def leftovers(out: Path) -> list[str]:
    parent = out / CASE.rsplit("/", 1)[0]
    if not parent.exists():
        return []
    return sorted(p.name for p in parent.iterdir() if p.name not in (NAME, f".{NAME}.lock"))


@pytest.fixture(scope="module")
def previous(fuzz_root, tmp_path_factory) -> Path:
    """A complete build of the unmutated recipe (copied into each example's build root)."""
    (fuzz_root / f"{CASE}.yaml").write_text(dump(BASE), encoding="utf-8")
    out = tmp_path_factory.mktemp("previous")
    outcome = fuzzlib.isolated(fuzzlib.compile_in, str(fuzz_root), CASE, [], str(out))
    assert outcome.status == "ok", outcome.error or outcome.diagnostics
    assert sorted(tree(out / CASE)) == sorted(OUTPUTS)
    return out


# what a run leaves in its build directory: the runtime's report, a checkpoint a recipe saves there
RESULTS = {"report.json": b'{"steps": 3}\n', "checkpoints/iter_0000003/model.pt": b"weights"}


def fresh_out(previous: Path, tmp_path_factory, with_previous: bool, results: bool = False) -> Path:
    out = tmp_path_factory.mktemp("out")
    if with_previous:
        shutil.copytree(previous / CASE, out / CASE)
        for name, data in RESULTS.items() if results else ():
            (out / CASE / name).parent.mkdir(parents=True, exist_ok=True)
            (out / CASE / name).write_bytes(data)
    return out


def assert_whole(out: Path, before: dict, outcome) -> None:
    after = tree(out / CASE)
    if outcome is not None and outcome.status == "ok":
        kept = {k: v for k, v in before.items() if k not in OUTPUTS}   # a run's results stay
        assert after == {**{k: v.encode() for k, v in outcome.value["files"].items()}, **kept}
    else:
        assert after == before, "a failed compile changed the previous build" if before else \
            "a failed compile left a partial build"
    assert not leftovers(out), f"temporary files left behind: {leftovers(out)}"


@st.composite
def mutated(draw):
    ops = draw(st.lists(fuzzlib.mutation(BASE, fuzzlib.RECIPE_PATHS), min_size=1, max_size=3))
    return fuzzlib.apply(BASE, ops)


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.0)
@given(data=mutated(), sets=fuzzlib.overrides, with_previous=st.booleans())
def test_failed_compile_keeps_previous_build(fuzz_root, previous, tmp_path_factory, data, sets, with_previous):
    note(dump(data) + f"\noverrides {sets}")
    out = fresh_out(previous, tmp_path_factory, with_previous, results=True)
    before = tree(out / CASE)
    (fuzz_root / f"{CASE}.yaml").write_text(dump(data), encoding="utf-8")
    outcome = fuzzlib.run(fuzzlib.compile_in, str(fuzz_root), CASE, sets, str(out))
    if outcome is not None:
        event(f"outcome: {outcome.status}")
        if outcome.status == "crash" and not fuzzlib.known_bug(outcome, data, sets):
            pytest.fail(f"{outcome.error}\n{outcome.traceback}")
    assert_whole(out, before, outcome)


# ----------------------------------------------------------------------------- fault injection

def compile_with_fault(root: str, out: str, op: str, nth: int, kind: str) -> dict:
    """compile_in with the nth call of `op` failing (OSError: disk full) or interrupted (Ctrl-C)."""
    import tempfile as tempfile_mod
    from pathlib import Path as P

    originals = {"write_text": P.write_text, "chmod": os.chmod, "replace": os.replace,
                 "mkdtemp": tempfile_mod.mkdtemp}
    calls = {"n": 0}

    def faulty(*args, **kw):
        calls["n"] += 1
        if calls["n"] == nth:
            if kind == "interrupt":
                raise KeyboardInterrupt
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return originals[op](*args, **kw)

    if op == "write_text":
        P.write_text = faulty
    elif op == "chmod":
        os.chmod = faulty
    elif op == "replace":
        os.replace = faulty
    elif op == "mkdtemp":
        tempfile_mod.mkdtemp = faulty
    return fuzzlib.compile_in(root, CASE, [], out)


# renames with a previous build: the written build marked ready, its two results carried into the new one,
# then the two of the swap; without one, the first and the last (one temporary directory, not two)
FAULTS = [(op, n, kind) for op, calls in (("write_text", 8), ("chmod", 9), ("replace", 5), ("mkdtemp", 2))
          for n in range(1, calls + 1) for kind in ("oserror", "interrupt")]
# BUG-9 (fixed): a failure at either rename of the swap must keep the previous build; and at a rename
# carrying a run's results, those results, where they were.
FAULT_CASES = [pytest.param(op, nth, kind, prev, id=f"{op}-{nth}-{kind}-{'previous' if prev else 'empty'}")
               for op, nth, kind in FAULTS for prev in (True, False)
               if prev or not ((op == "replace" and nth >= 3) or (op == "mkdtemp" and nth >= 2))]


@pytest.mark.usefixtures("warm")
@pytest.mark.parametrize("op,nth,kind,with_previous", FAULT_CASES)
def test_fault_during_write_keeps_previous_build(fuzz_root, previous, tmp_path_factory, op, nth, kind,
                                                  with_previous):
    (fuzz_root / f"{CASE}.yaml").write_text(dump(BASE), encoding="utf-8")
    out = fresh_out(previous, tmp_path_factory, with_previous, results=True)
    before = tree(out / CASE)
    outcome = fuzzlib.isolated(compile_with_fault, str(fuzz_root), str(out), op, nth, kind)
    assert outcome.status == "crash", "the injected fault did not surface"
    assert "injected" in outcome.error or "KeyboardInterrupt" in outcome.error
    assert_whole(out, before, None)


# ----------------------------------------------------------------------------- killed compiles

def slow_compile(root: str, out: str, delay: float) -> dict:
    """compile_in with every file write slowed down, so that a kill lands inside the write."""
    from pathlib import Path as P

    original = P.write_text

    def slow(self, *args, **kw):
        time.sleep(delay)
        return original(self, *args, **kw)

    P.write_text = slow
    return fuzzlib.compile_in(root, CASE, [], out)


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=0.5)
@given(kill_after=st.floats(0.0, 0.6), with_previous=st.booleans())
def test_killed_compile_is_put_right_by_the_next(fuzz_root, previous, tmp_path_factory, kill_after, with_previous):
    """SIGKILL at any moment: build/<recipe>/ is the previous build or the complete new one, unless the kill
    came inside the swap, where the complete new build waits beside it (.<name>.ready.*) with whatever of
    the run's results it had carried. The next compile of the recipe finishes or discards the killed one's
    work: a whole build, every result the run had left kept, nothing else beside it."""
    (fuzz_root / f"{CASE}.yaml").write_text(dump(BASE), encoding="utf-8")
    out = fresh_out(previous, tmp_path_factory, with_previous, results=True)
    before = tree(out / CASE)
    pid = os.fork()
    if pid == 0:
        try:
            slow_compile(str(fuzz_root), str(out), 0.05)
        finally:
            os._exit(0)
    time.sleep(kill_after)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    after = tree(out / CASE)
    new = {**tree(previous / CASE), **{k: v for k, v in before.items() if k not in OUTPUTS}}
    inside_swap = any(".ready." in name for name in leftovers(out))
    assert after in (before, new) or inside_swap, "a killed compile left a partial build"
    event("killed inside the swap" if inside_swap else
          "killed after the swap" if after and not before else "killed before the swap")
    outcome = fuzzlib.isolated(fuzzlib.compile_in, str(fuzz_root), CASE, [], str(out))
    assert outcome.status == "ok", outcome.error
    assert_whole(out, before, outcome)


def test_next_compile_finishes_a_swap_killed_midway(fuzz_root, previous, tmp_path_factory):
    """The states a kill inside the swap leaves, made by hand (a timed kill rarely lands there): one
    result carried into the ready build, the other still in the build; or both carried and the build
    retired, not yet replaced. The next compile keeps both results and leaves nothing beside the build."""
    (fuzz_root / f"{CASE}.yaml").write_text(dump(BASE), encoding="utf-8")
    for retire in (False, True):
        out = fresh_out(previous, tmp_path_factory, True, results=True)
        build = out / CASE
        before = tree(build)
        ready = build.with_name(f".{NAME}.ready.abc123")
        shutil.copytree(previous / CASE, ready)
        os.replace(build / "report.json", ready / "report.json")
        if retire:
            os.replace(build / "checkpoints", ready / "checkpoints")
            (build.with_name(f".{NAME}.old.xyz789")).mkdir()
            os.replace(build, build.with_name(f".{NAME}.old.xyz789") / "build")
        (build.with_name(f".{NAME}.staging.partial")).mkdir()  # a killed compile's half-written files
        outcome = fuzzlib.isolated(fuzzlib.compile_in, str(fuzz_root), CASE, [], str(out))
        assert outcome.status == "ok", outcome.error
        assert_whole(out, before, outcome)


# ----------------------------------------------------------------------------- a kill at every step (issue 42)

def killed_at(root: str, out: str, k: int, late: str | None = None) -> None:
    """compile_in, SIGKILLed just before its k-th step on disk (compiler/targets/builddir.py's at_step hook:
    each directory made, the files half written, each rename, each removal); `late`: at the step named so, a
    run writes
    late.log into the build first (a run that finishes while the compile swaps)."""
    from moeforge.compiler.targets import builddir

    steps = []

    def hook(name):
        steps.append(name)
        if name == late:
            (Path(out) / CASE / "late.log").write_bytes(b"written during the swap")
        if len(steps) == k:
            os.kill(os.getpid(), signal.SIGKILL)
    builddir.at_step = hook
    fuzzlib.compile_in(root, CASE, [], out)


def fork_and_wait(fn, *args) -> bool:
    """fn(*args) in a forked child; whether a SIGKILL ended it (else it ran to the end)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn(*args)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the compile failed on its own"
    return False


OLD, NEWER = b'{"steps": 3}\n', b'{"steps": 6}\n'


@pytest.mark.usefixtures("warm")
@pytest.mark.parametrize("with_previous", [True, False], ids=["previous", "empty"])
def test_a_kill_at_every_step_loses_nothing(fuzz_root, previous, tmp_path_factory, with_previous):
    """SIGKILL before each step of a compile in turn (deterministic: the hook counts the steps), then a run
    writes a newer report into whatever build stands, then the next compile: the newer report is the build's
    report.json, the older one is either gone because the run itself overwrote it or kept beside it as
    report.json.parked-1 (never in its place), the checkpoint is whole, the outputs are the new compile's,
    and nothing is left beside the build. Until a k where the compile finishes: every step was tried."""
    (fuzz_root / f"{CASE}.yaml").write_text(dump(BASE), encoding="utf-8")
    k, killed = 0, True
    while killed:
        k += 1
        out = fresh_out(previous, tmp_path_factory, with_previous, results=with_previous)
        build = out / CASE
        for path in build.rglob("*") if with_previous else ():  # the run that left them ended an hour ago
            os.utime(path, (time.time() - 3600, time.time() - 3600))
        before = tree(build)
        killed = fork_and_wait(killed_at, str(fuzz_root), str(out), k)
        after = tree(build)
        inside_swap = any(".ready." in name or ".old." in name for name in leftovers(out))
        assert after in (before, {**tree(previous / CASE), **{n: before[n] for n in before if n not in OUTPUTS}}) \
            or inside_swap or not killed, f"step {k}: a killed compile left a partial build: {sorted(after)}"
        wrote = build.is_dir()
        if wrote:
            (build / "report.json").write_bytes(NEWER)
        outcome = fuzzlib.isolated(fuzzlib.compile_in, str(fuzz_root), CASE, [], str(out))
        assert outcome.status == "ok", outcome.error
        final = tree(build)
        extra = {n: final.pop(n) for n in list(final) if n not in OUTPUTS}
        assert final == {n: v.encode() for n, v in outcome.value["files"].items()}, f"step {k}"
        assert extra.pop("report.json", None) == (NEWER if wrote else OLD if with_previous else None), f"step {k}"
        if with_previous:
            assert extra.pop("checkpoints/iter_0000003/model.pt") == b"weights", f"step {k}"
        assert extra in ({}, {"report.json.parked-1": OLD}), f"step {k}: {sorted(extra)}"
        assert not leftovers(out), f"step {k}: left beside the build: {leftovers(out)}"
    # staging, half written, ready, swap; with a previous build holding two results also 2 carries, retire (2),
    # discard: the renames, and the directories made and removed around them
    assert k - 1 == (9 if with_previous else 4), f"{k - 1} steps: a step on disk without a kill test?"


@pytest.mark.usefixtures("warm")
def test_a_result_written_during_the_swap_is_kept(fuzz_root, previous, tmp_path_factory):
    """A run that writes into the build after its results were carried and before the build is retired: what
    it wrote goes with the retired build, and is carried into the new one (not removed with the old)."""
    (fuzz_root / f"{CASE}.yaml").write_text(dump(BASE), encoding="utf-8")
    out = fresh_out(previous, tmp_path_factory, True, results=True)
    assert not fork_and_wait(killed_at, str(fuzz_root), str(out), 10 ** 6, "retire")
    assert (out / CASE / "late.log").read_bytes() == b"written during the swap"
    assert (out / CASE / "report.json").read_bytes() == RESULTS["report.json"] and not leftovers(out)
