"""Issue 42, the runtime's half: hostile inputs to every runtime entry point, and data prepare killed at
every rename point or through its parent. Each case is the reproduction the issue states, asserting the
one-line error (with its documented exit code, runtime/README.md) or the preserved data.

- item 1/2: plan.json with a 5000-digit integer, deep nesting, a non-UTF-8 byte, NaN, an oversized file,
  "num_microbatches": 4.0 -> exit 2, one line, for moeforge.runtime.train, moeforge.runtime.dryrun and moeforge.runtime.megatron;
  the same hostile JSON on a corpus line -> a located bad line (exit 2) in data prepare;
- item 3: paths and a logger name with a backslash followed by a letter survive megatron-lm.args exactly;
  a damaged args file is one line;
- item 4: moeforge.runtime.megatron in a Python without megatron.training -> exit 3, one line;
- item 6: data prepare killed (SIGKILL, injected at each step of runtime/data_prepare/publish.py) shows the old
  dataset or the new one, never a mix; the next run removes what the killed one left; a second run on the
  same prefix is refused; killing the `moeforge` parent ends the worker and its pool.
(Item 13, resuming with a longer schedule, is tests/runtime/test_megatron_training.py's.)
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hostilelib as H

REPO = H.REPO
sys.path.insert(0, str(REPO))
from moeforge.runtime.data_prepare import publish as publishing  # noqa: E402
from moeforge.runtime.plan import document as plan_mod  # noqa: E402
from moeforge.runtime.errors import PlanError  # noqa: E402

EXAMPLE = json.loads((REPO / "tests" / "data" / "tiny-plan.example.json").read_text())
MEGATRON_LM = ["platform.software.megatron_core=0.19.2", "runtime.entrypoint=megatron-lm",
               "model.architecture.vocab_size=384"]


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
            "PYTHONWARNINGS": "ignore", **extra}


def run_module(module: str, *args, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO, env=_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess, rc: int, *words: str) -> str:
    """The run ended with ``rc`` and exactly one line on stderr that holds ``words``."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == rc, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# --- items 1 and 2: hostile plan.json --------------------------------------------------------------------

def _plan_text(**training) -> str:
    plan = json.loads(json.dumps(EXAMPLE))
    plan["training"].update(training)
    return json.dumps(plan, indent=1)


HOSTILE_PLANS = {
    "5000-digit integer": (lambda: _plan_text().replace('"seed": 1234', '"seed": ' + "7" * 5000),
                           "a number of 5000 characters"),
    "deep nesting": (lambda: _plan_text().replace('"seed": 1234', '"seed": ' + "[" * 5000 + "]" * 5000),
                     "nested deeper than 64 levels"),
    "non-UTF-8 byte": (lambda: _plan_text().replace('"recipe"', '"rec\udcffipe"', 1), "not UTF-8 (byte 0xff"),
    "NaN": (lambda: _plan_text().replace('"seed": 1234', '"seed": NaN'), "NaN is not a JSON number"),
    "float for an integer": (lambda: _plan_text(num_microbatches=2.0),
                             "training.num_microbatches: 2.0 is not of type 'integer'"),
    "oversized file": (None, "larger than 16 MiB"),
}


def write_hostile_plan(path: Path, kind: str) -> str:
    make, message = HOSTILE_PLANS[kind]
    if make is None:
        with open(path, "wb") as f:  # sparse: 17 MiB of zeros without writing them
            f.truncate(17 << 20)
    else:
        path.write_bytes(make().encode("utf-8", "surrogateescape"))
    return message


@pytest.mark.parametrize("kind", HOSTILE_PLANS)
def test_hostile_plan_is_one_line(tmp_path, kind):
    """Every kind through the reader all entry points share; the issue's reproductions (and item 1's 4.0,
    which crashed in runtime/data/synthetic.py) through moeforge.runtime.train itself."""
    plan = tmp_path / "plan.json"
    message = write_hostile_plan(plan, kind)
    with pytest.raises(PlanError) as err:
        plan_mod.load(plan)
    assert message in err.value.message and str(plan) in err.value.message and "\n" not in err.value.message
    if kind in ("5000-digit integer", "deep nesting", "non-UTF-8 byte", "float for an integer"):
        one_line(run_module("moeforge.runtime.train", plan), 2, "moeforge.runtime.train[rank 0]: bad plan:", str(plan), message)


def test_the_other_entry_points_refuse_them_alike(tmp_path):
    """moeforge.runtime.dryrun takes several plans in one process: each hostile one is its own one-line error (exit 2);
    moeforge.runtime.megatron refuses one before it looks for megatron.training."""
    plans = []
    for i, kind in enumerate(HOSTILE_PLANS):
        plans.append(tmp_path / f"plan{i}.json")
        write_hostile_plan(plans[-1], kind)
    proc = run_module("moeforge.runtime.dryrun", *plans)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = json.loads(proc.stdout)["plans"]
    assert [e["error"]["exit_code"] for e in errors] == [2] * len(HOSTILE_PLANS)
    for entry, (_, message) in zip(errors, HOSTILE_PLANS.values()):
        assert message in entry["error"]["message"]
    one_line(run_module("moeforge.runtime.megatron", plans[0]), 2, "moeforge.runtime.megatron[rank 0]: bad plan:",
             HOSTILE_PLANS["5000-digit integer"][1])


def test_a_float_where_megatron_core_declares_an_int_is_refused(tmp_path):
    """transformer_config is megatron-core's: a float for its int field is a bad plan, before any model."""
    from moeforge.runtime.model import build as model

    raw = json.loads(json.dumps(EXAMPLE))
    raw["transformer_config"]["num_layers"] = 2.0
    with pytest.raises(PlanError) as err:
        model.config_kwargs(plan_mod.check(raw, "plan.json"), {})
    assert "transformer_config.num_layers = 2.0: TransformerConfig takes an integer here (write 2" \
        in err.value.message


def test_hostile_corpus_lines_are_located_bad_lines(tmp_path):
    """The same hostile JSON on corpus lines (data prepare reads them through the same parser): each is a
    bad line with its number, exit 2, nothing written (one run reports all three)."""
    src = tmp_path / "c.jsonl"
    src.write_bytes(b'{"text": "fine"}\n' + b'{"text": "a", "n": ' + b"7" * 5000 + b'}\n'
                    + b'{"text": "a", "n": ' + b"[" * 5000 + b"]" * 5000 + b'}\n' + b'{"text": "a\xff"}\n')
    proc = run_module("moeforge.runtime.data_prepare", src, "--tokenizer", "byte", "--output", tmp_path / "out" / "c")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for line, problem in ((2, "not readable JSON: Exceeds the limit (4300 digits)"),
                          (3, "not readable JSON: nested deeper than Python's recursion limit"),
                          (4, "not valid UTF-8 (byte 0xff")):
        assert f"{src}:{line}: {problem}" in proc.stderr, proc.stderr[-3000:]
    assert "3 bad lines" in proc.stderr and not (tmp_path / "out").exists()


# --- item 3: megatron-lm.args round-trips ---------------------------------------------------------------

# YAML escapes that are a backslash and a letter ("\v", "\f", "\N", "\L", "\P", "\e", "\a", "\b", "\t"):
# str.splitlines() ends a line at the first five; and a literal backslash before a letter.
ESCAPED = "\v\f\x85\u2028\u2029\x1b\x07\x08\t"


def test_paths_with_a_backslash_and_a_letter_round_trip(sandbox):
    """Item 3's reproduction: a data path, a checkpoint path and a logger name with YAML escapes in the
    recipe; moeforge.runtime.megatron reads back exactly the values of the plan."""
    from moeforge.runtime.megatron.args import megatron_lm_argv

    save = "/ck\\new/" + ESCAPED + "pt"
    paths = ["/d\\ata/" + ESCAPED[:5] + "/prefix", "${DATA_ROOT}/x\\y\u2028z/prefix"]
    tensorboard = "/tb\\x" + "\u2029y"
    rid = "hostile/args-escapes"
    recipe = H.recipe_with({"checkpoint": {"save": save, "interval": 10},
                            "data": {"kind": "indexed", "paths": paths}, "logging": {"tensorboard": tensorboard}})
    assert "\\v\\f\\N\\L\\P\\e\\a\\b\\t" in recipe  # the YAML text spells them as a backslash and a letter
    (sandbox / "recipes" / f"{rid}.yaml").write_text(recipe, encoding="utf-8")
    H.compile_here(sandbox, rid, MEGATRON_LM)
    build = sandbox / "build" / rid
    plan = plan_mod.load(build / "plan.json")
    argv = megatron_lm_argv(plan, [])  # what moeforge.runtime.megatron hands Megatron-LM's parser (${VAR} expanded)
    assert argv[argv.index("--save") + 1] == save == plan.raw["checkpoint"]["save"]
    assert argv[argv.index("--load") + 1] == save
    assert argv[argv.index("--tensorboard-dir") + 1] == tensorboard
    i = argv.index("--data-path")
    assert argv[i + 1:i + 3] == [paths[0], paths[1].replace("${DATA_ROOT}", os.environ["DATA_ROOT"])]


@pytest.fixture(autouse=True)
def _data_root(monkeypatch):
    monkeypatch.setenv("DATA_ROOT", "/data root")


def test_a_damaged_args_file_is_one_line(sandbox):
    from moeforge.runtime.errors import RuntimeFailure
    from moeforge.runtime.megatron.args import megatron_lm_argv

    rid = "hostile/args-damaged"
    (sandbox / "recipes" / f"{rid}.yaml").write_text(H.TINY, encoding="utf-8")
    H.compile_here(sandbox, rid, MEGATRON_LM)
    build = sandbox / "build" / rid
    args = build / "megatron-lm.args"
    plan = plan_mod.load(build / "plan.json")
    for damage, words in ((b"--save 'ck\n", "No closing quotation"), (b"--save \xff\n", "not UTF-8")):
        args.write_bytes(args.read_bytes() + damage)
        with pytest.raises(RuntimeFailure) as err:
            megatron_lm_argv(plan, [])
        assert err.value.exit_code == 2 and words in err.value.message and str(args) in err.value.message
        args.write_bytes(args.read_bytes()[:-len(damage)])


# --- item 4: moeforge.runtime.megatron without megatron.training -------------------------------------------------

def test_runtime_megatron_without_megatron_training_is_exit_3(sandbox):
    probe = subprocess.run([sys.executable, "-c", "import megatron.training"], capture_output=True)
    assert probe.returncode != 0, f"{sys.executable} has megatron.training: this test needs .venv (0.16.1)"
    rid = "hostile/no-training"
    (sandbox / "recipes" / f"{rid}.yaml").write_text(H.TINY, encoding="utf-8")
    H.compile_here(sandbox, rid, MEGATRON_LM)
    proc = run_module("moeforge.runtime.megatron", sandbox / "build" / rid / "plan.json")
    one_line(proc, 3, "moeforge.runtime.megatron[rank 0]: backend unavailable:", "megatron.training", "megatron-core 0.16.1",
             "runtime.entrypoint: moeforge")


# --- item 6: data prepare -------------------------------------------------------------------------------

def _corpus(path: Path, tag: str) -> Path:
    path.write_text("".join(json.dumps({"text": f"{tag} document {i}"}) + "\n" for i in range(5)))
    return path


def prepare(src: Path, prefix: Path, kill_at: str | None = None, python=sys.executable):
    env = {publishing.KILL_ENV: kill_at} if kill_at else {}
    return subprocess.run([python, "-m", "moeforge.runtime.data_prepare", str(src), "--tokenizer", "byte", "--output",
                           str(prefix)], cwd=REPO, env=_env(**env), capture_output=True, text=True, timeout=300)


def visible(prefix: Path) -> dict | None:
    """What a reader of PREFIX sees: None unless both .bin and .idx open, else the three files' bytes."""
    if not (Path(f"{prefix}.bin").exists() and Path(f"{prefix}.idx").exists()):
        return None
    return {ext: Path(f"{prefix}{ext}").read_bytes() if Path(f"{prefix}{ext}").exists() else None
            for ext in publishing.EXTS}


def leftovers(directory: Path, name: str) -> list[str]:
    return publishing.Prefix(str(directory), name).leftovers()


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The new dataset (corpus v2, as a run that is not killed writes it) and an old one in today's layout."""
    tmp = tmp_path_factory.mktemp("prepare")
    v2 = _corpus(tmp / "v2.jsonl", "new")
    ref = tmp / "ref" / "c"
    assert prepare(v2, ref).returncode == 0
    layout = tmp / "layout"
    old = prepare(_corpus(tmp / "v1.jsonl", "old"), layout / "c")
    assert old.returncode == 0, old.stderr
    assert all(os.path.islink(f"{layout / 'c'}{ext}") for ext in publishing.EXTS)
    return {"v2": v2, "new": visible(ref), "layout": layout, "old": visible(layout / "c")}


LEGACY = {ext: f"older dataset {ext}".encode() for ext in publishing.EXTS}
# the steps each starting point passes (publishing.STEPS, in order)
SCENARIOS = {"fresh": ("built", "generation", "linked", "committed"),
             "regular files": ("built", "generation", "unlinked-idx", "linked", "committed"),
             "published": ("built", "generation", "committed", "retired")}


def _start(scenario: str, datasets, out: Path) -> dict | None:
    if scenario == "regular files":
        out.mkdir()
        for ext, content in LEGACY.items():
            (out / f"c{ext}").write_bytes(content)
        return LEGACY
    if scenario == "published":
        shutil.copytree(datasets["layout"], out, symlinks=True)
        return datasets["old"]
    return None


def test_every_step_is_a_kill_point():
    assert {s for steps in SCENARIOS.values() for s in steps} == set(publishing.STEPS)


@pytest.mark.parametrize("scenario,step", [(s, step) for s, steps in SCENARIOS.items() for step in steps])
def test_a_kill_at_any_step_shows_old_or_new_never_a_mix(tmp_path, datasets, scenario, step):
    """Item 6: SIGKILL right after each rename; a reader then sees the old dataset or the new one (or,
    converting a dataset of regular files, none until the new one is complete), never a new .bin beside
    an old .idx."""
    out = tmp_path / "out"
    old = _start(scenario, datasets, out)
    proc = prepare(datasets["v2"], out / "c", kill_at=step)
    assert proc.returncode == -signal.SIGKILL, (step, proc.returncode, proc.stderr[-2000:])  # it got there
    seen = visible(out / "c")
    assert seen in (old, datasets["new"]) or (seen is None and scenario != "published"), (step, seen)
    if step in ("committed", "retired"):
        assert seen == datasets["new"]
    if step in ("built", "generation") or (step == "unlinked-idx" and old is None):
        assert seen == old
    if step == "committed" and scenario == "published" or step in ("generation", "unlinked-idx"):
        # what the killed run left (its generation, or the retired one) goes with the next run
        assert leftovers(out, "c")
        again = prepare(datasets["v2"], out / "c")
        assert again.returncode == 0, again.stderr
        assert visible(out / "c") == datasets["new"] and leftovers(out, "c") == []


def test_stale_temporaries_of_dead_runs_are_removed(tmp_path, datasets):
    """Every killed run left a `.NAME.tmp-*` directory that nothing removed; the next run removes them
    (holding the prefix's lock, no live run owns one) and leaves a foreign name alone."""
    out = tmp_path / "out"
    shutil.copytree(datasets["layout"], out, symlinks=True)
    for suffix in ("abcdefgh", "12345678"):
        (out / f".c.tmp-{suffix}").mkdir()
        (out / f".c.tmp-{suffix}" / "c.bin").write_bytes(b"\0" * 4096)
    (out / ".c.gen-zzzzzzzz").mkdir()
    (out / ".c.tmp-someone-elses").mkdir()
    proc = prepare(datasets["v2"], out / "c")
    assert proc.returncode == 0, proc.stderr
    assert leftovers(out, "c") == [] and (out / ".c.tmp-someone-elses").is_dir()
    assert visible(out / "c") == datasets["new"]


def test_a_second_run_on_the_same_prefix_is_refused(tmp_path, datasets):
    out = tmp_path / "out"
    shutil.copytree(datasets["layout"], out, symlinks=True)
    with open(out / ".c.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = prepare(datasets["v2"], out / "c")
    assert proc.returncode == 2 and "another data prepare is writing this prefix" in proc.stderr
    assert visible(out / "c") == datasets["old"]


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out += map(int, kids)
        todo += map(int, kids)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_killing_the_moeforge_parent_ends_the_worker(tmp_path, datasets):
    """Item 6: `kill -9` of `moeforge data prepare` (the parent) used to leave moeforge.runtime.data_prepare and its pool
    running; now they get SIGTERM from the kernel, remove their temporaries and stop."""
    src = tmp_path / "big.jsonl"
    src.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(3000)))  # 3 batches
    out = tmp_path / "out"
    shutil.copytree(datasets["layout"], out, symlinks=True)
    parent = subprocess.Popen([sys.executable, "-m", "moeforge.compiler", "data", "prepare", str(src), "--tokenizer", "byte",
                               "--output", str(out / "c"), "--workers", "2"], cwd=REPO,
                              env=_env(MOEFORGE_DATA_PREPARE_TEST_DELAY="600"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        for line in parent.stderr:  # the run is mid-way once its first batch is written (no timing involved)
            if "first batch written" in line:
                break
        workers = _descendants(parent.pid)
        assert len(workers) >= 3, workers  # moeforge.runtime.data_prepare and its two pool processes
        parent.kill()
        parent.wait(60)
        deadline = time.monotonic() + 120  # a hang guard, not a timing assertion
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in workers if _alive(p)], "the worker outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for p in workers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    assert leftovers(out, "c") == []
    assert visible(out / "c") == datasets["old"]
