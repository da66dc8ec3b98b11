"""A sweep's build directory made without training (tiny-moe/cpu, two points, `sweep launch --target print`)
with runs recorded by hand, `moeforge results` on it in this process, and what every outcome must satisfy:
an exit code of 0, 1 or 2, no traceback nor internal error, and when it succeeds results.json valid, with
finite numbers only, output without escapes and CSV without formulas. Shared by tests/hostile and the
results fuzz target (tests/fuzz/test_fuzz_results.py)."""
from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import random
import textwrap
from pathlib import Path

import jsonschema

from moeforge.compiler.cli import main

REPO = Path(__file__).resolve().parents[2]
RESULTS_SCHEMA = json.loads((REPO / "schemas" / "results.v1.json").read_text())
SWEEP = """\
    schema: moeforge/sweep/v1
    name: s
    recipe: builtin:tiny-moe/cpu
    axes:
      training.micro_batch_size: [1, 2]
    repeats: 1
    warmup_steps: 1
"""
GOOD_REPORT = {"status": "ok", "world_size": 2, "layout": {"tp": 1, "pp": 1, "ep": 2, "dp": 2}, "device": "cpu",
               "schedule_taken": "no_pipelining", "steps": [{"step": i, "loss": 5.0, "time_s": 0.5} for i in (1, 2, 3)],
               "peak_memory_bytes_per_rank": [2 ** 29, 2 ** 29], "peak_memory_bytes_max": 2 ** 29,
               "peak_memory_source": "process RSS (ru_maxrss)", "realised": {"moe_token_dispatcher_type": "alltoall"},
               "versions": {"torch": "2.5.0", "megatron_core": "0.16.1"}}
# what a forged value may be: types swapped, out of range, non-finite-ish, nested wrongly, hostile text
MUTATIONS = [None, "x", "", 0, -1, 1.5, -0.0, 1e308, -1e308, 10 ** 30, True, [], {}, [1, "a"], {"a": {"b": []}},
             "\x1b]0;owned\x07\n::error file=a,line=1::forged", "=HYPERLINK(\"http://evil\")", "../../../../etc/passwd"]
ESCAPES = ("\x1b", "\x07")


def make(root: Path) -> Path:
    """A project at root with the sweep `s` built; p00 ran ok, p01 failed (its log says why). -> top."""
    (root / "recipes" / "sweeps").mkdir(parents=True)
    (root / "moeforge.toml").write_text("[moeforge]\nversion = 1\n")
    (root / "recipes" / "sweeps" / "s.yaml").write_text(textwrap.dedent(SWEEP))
    rc, out, err = cli(root, "sweep", "launch", "s", "--target", "print")
    assert rc == 0, out + err
    top = root / "build" / "sweeps" / "s"
    manifest = json.loads((top / "sweep.json").read_text())
    for n, (point, code) in enumerate((("p00", 0), ("p01", 1))):
        here = top / point / "runs" / "1"
        here.mkdir(parents=True)
        (here / "run.log").write_text("step 1\nmoeforge.runtime.train[rank 0]: error: boom\n" if code else "step 3\n")
        if code == 0:
            (here / "report.json").write_text(json.dumps(GOOD_REPORT))
        fingerprint = manifest["points"][n]["fingerprint"][:16]
        (here / "status.json").write_text(json.dumps(
            {"point": point, "repeat": 1, "fingerprint": fingerprint, "state": "ended", "exit_code": code,
             "signal": None, "started": 1.7e9, "ended": 1.7e9 + 60, "cancelled": False,
             "log": f"build/sweeps/s/{point}/runs/1/run.log", "pid": 1234, "host": "h"}))
    return top


def cli(root: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["--root", str(root), *argv])
    return rc, out.getvalue(), err.getvalue()


def results(root: Path, top: Path, *extra: str) -> tuple[int, str, str]:
    for name in ("results.json", "results.csv"):
        (top / name).unlink(missing_ok=True)
    rc, out, err = cli(root, "results", str(top), "--no-plot", *extra)
    assert_clean(rc, out, err, top)
    return rc, out, err


def _no_constant(name):
    raise AssertionError(f"results.json holds {name}")


def assert_clean(rc: int, out: str, err: str, top: Path) -> None:
    text = out + err
    assert rc in (0, 1, 2), (rc, text[-2000:])
    assert "Traceback" not in text and "internal error" not in text, text[-2000:]
    assert not any(e in text for e in ESCAPES), text[-2000:]
    if rc != 0:
        assert err.startswith("moeforge results: error: ") and err.count("\n") == 1, err
        return
    doc = json.loads((top / "results.json").read_text(), parse_constant=_no_constant)
    jsonschema.validate(doc, RESULTS_SCHEMA)
    for row in csv.reader(io.StringIO((top / "results.csv").read_text())):
        for c in row:
            assert not c.startswith(("=", "+", "@", "\t", "\r")) and not (c.startswith("-") and not _number(c)), row


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def paths(value, prefix=()) -> list[tuple]:
    """Every key path in a JSON value (lists by index), the root included."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, prefix + (i,))
    return out


def mutate(doc, path: tuple, new, delete: bool = False):
    """A copy of doc with the value at path replaced (or its key deleted)."""
    doc = copy.deepcopy(doc)
    if not path:
        return new
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return doc


def variants(doc, n: int | None, seed: int) -> list[tuple[str, object]]:
    """(what, forged doc) pairs: every key deleted, every value swapped for each of MUTATIONS, a section
    nested one level deeper; n of them in a fixed order (None: all)."""
    out = []
    for p in paths(doc):
        where = ".".join(map(str, p)) or "(root)"
        if p and isinstance(p[-1], str):
            out.append((f"del {where}", mutate(doc, p, None, delete=True)))
        out += [(f"{where} = {m!r}", mutate(doc, p, m)) for m in MUTATIONS]
        out.append((f"{where} nested", mutate(doc, p, {"x": _get(doc, p)})))
    random.Random(seed).shuffle(out)
    return out if n is None else out[:n]


def _get(doc, path):
    for part in path:
        doc = doc[part]
    return doc
