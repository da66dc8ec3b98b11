"""The results reader (`moeforge results`) on random status.json, report.json and sweep.json contents.

Property: whatever the files of a sweep's build directory hold, results exits 0, 1 or 2 without a
traceback or an internal error; a refusal is one line naming the file; a success writes a schema-valid
results.json with finite numbers only, and neither the output nor the CSV carries an escape or a formula
(tests/hostile/resultslib.py). The ci profile runs a short derandomised set; MOEFORGE_FUZZ=long (`make
fuzz`) runs about 30x more, random.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from fuzzlib import fuzz_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostile"))

import resultslib  # noqa: E402

FILES = ("sweep.json", "p00/runs/1/status.json", "p00/runs/1/report.json", "p01/runs/1/status.json",
         "p01/runs/1/run.log")

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
                    st.sampled_from(resultslib.MUTATIONS[:-3] + ["running", "ended", "ok", "SIGKILL"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-results") / "proj"
    return root, resultslib.make(root)


@st.composite
def forgeries(draw):
    """(file, its new text): one key of a real file set to a random value, or deleted, or the whole file
    random JSON, or raw bytes."""
    name = draw(st.sampled_from(FILES))
    return name, draw(st.sampled_from(("key", "whole", "text"))), draw(st.data())


@fuzz_settings(weight=1.0)
@given(forgery=forgeries())
def test_results_never_fails_inside(built, forgery):
    root, top = built
    name, how, data = forgery
    path = top / name
    original = path.read_bytes()
    if name.endswith(".log"):
        new = data.draw(st.binary(max_size=300)) + data.draw(st.text(max_size=80)).encode("utf-8", "replace")
    elif how == "key":
        doc = json.loads(original)
        where = data.draw(st.sampled_from(resultslib.paths(doc)))
        new = json.dumps(resultslib.mutate(doc, where, data.draw(values), delete=data.draw(st.booleans())))
        new = new.encode()
    elif how == "whole":
        new = json.dumps(data.draw(values)).encode()
    else:
        new = data.draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    note(f"{name} <- {new[:500]!r}")
    path.write_bytes(new)
    try:
        rc, out, err = resultslib.results(root, top)
        if rc:
            assert any(part in err for part in (path.name, "sweep.json", "status.json", "report.json")), err
    finally:
        path.write_bytes(original)
        for extra in ("results.json", "results.csv"):
            (top / extra).unlink(missing_ok=True)
