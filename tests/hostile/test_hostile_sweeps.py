"""`moeforge sweep check` and `sweep launch --target print` on forged sweep documents (issue 46, families 4,
7, 8 for sweeps): many variants of a valid sweep (keys deleted, types swapped, nested wrongly, hostile text)
each give exit 0, 1 or 2 with no traceback or internal error and nothing printed raw; a value outside the
Basic Multilingual Plane reaches the plan as itself; a knob path past a leaf is refused at the sweep file."""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import resultslib  # noqa: E402

LONG = os.environ.get("MOEFORGE_FUZZ") == "long"
BASE = {"schema": "moeforge/sweep/v1", "name": "h", "recipe": "builtin:tiny-moe/cpu",
        "set": {"training.train_iters": 3}, "axes": {"training.micro_batch_size": [1, 2]},
        "points": [{"moe.dispatcher": "alltoall"}], "repeats": 1, "warmup_steps": 1,
        "launch": {"target": "local", "concurrency": 2}}
HOSTILE = "x\x1b]0;owned\x07\n::error file=a.yaml,line=1::forged"


@pytest.fixture(scope="module")
def proj(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps") / "proj"
    (root / "recipes" / "sweeps").mkdir(parents=True)
    (root / "moeforge.toml").write_text("[moeforge]\nversion = 1\n")
    return root


def write(root: Path, doc) -> None:
    (root / "recipes" / "sweeps" / "h.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))


def clean(rc: int, out: str, err: str) -> None:
    text = out + err
    assert rc in (0, 1, 2), (rc, text[-2000:])
    assert "Traceback" not in text and "internal error" not in text, text[-2000:]
    assert not any(c in text for c in ("\x1b", "\x07")), text[-2000:]
    assert not any(line.lstrip().startswith("::") for line in text.splitlines()), text[-2000:]


def test_forged_sweeps_are_refused_cleanly(proj):
    forged = resultslib.variants(BASE, None if LONG else 80, 46)
    for what, doc in forged:
        write(proj, doc)
        rc, out, err = resultslib.cli(proj, "sweep", "check", "h")
        try:
            clean(rc, out, err)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from None


@pytest.mark.parametrize("where", ["set", "axes", "points", "launch"])
def test_hostile_text_in_a_knob_value_is_printed_escaped(proj, where):
    doc = json.loads(json.dumps(BASE))
    if where == "set":
        doc["set"]["checkpoint.save"] = HOSTILE
        doc["set"]["checkpoint.interval"] = 1
    elif where == "axes":
        doc["axes"]["moe.dispatcher"] = [HOSTILE, "alltoall"]
    elif where == "points":
        doc["points"][0]["moe.dispatcher"] = HOSTILE
    else:
        doc["set"]["name"] = HOSTILE
    write(proj, doc)
    for argv in (("sweep", "check", "h"), ("sweep", "launch", "h", "--target", "print")):
        rc, out, err = resultslib.cli(proj, *argv)
        clean(rc, out, err)
        if where != "launch":
            assert "\\x1b]0;owned\\x07\\n::error" in out + err


def test_a_value_outside_the_bmp_reaches_the_plan_as_itself(proj):
    doc = json.loads(json.dumps(BASE))
    doc["set"]["checkpoint.interval"] = 1
    doc["axes"] = {"checkpoint.save": ["/tmp/d\U0001F600x", "/data/\u00e9\U0001F600\\\"q"]}
    doc.pop("points")
    write(proj, doc)
    rc, out, err = resultslib.cli(proj, "sweep", "launch", "h", "--target", "print")
    clean(rc, out, err)
    assert rc == 0, out + err
    for point, value in (("p00", "/tmp/d\U0001F600x"), ("p01", "/data/\u00e9\U0001F600\\\"q")):
        plan = json.loads((proj / "build" / "sweeps" / "h" / point / "plan.json").read_text())
        assert plan["checkpoint"]["save"] == value
        args = (proj / "build" / "sweeps" / "h" / point / "megatron-lm.args").read_text(encoding="utf-8")
        assert "\U0001F600" in args and "\\ud83d" not in args


def test_a_knob_path_past_a_leaf_is_refused_at_the_sweep_file(proj):
    doc = json.loads(json.dumps(BASE))
    doc["axes"]["moe.overlap.ep_comm.x"] = [True]
    write(proj, doc)
    rc, out, err = resultslib.cli(proj, "sweep", "check", "h")
    clean(rc, out, err)
    assert rc != 0 and "recipes/sweeps/h.yaml:" in out + err and "E_UNKNOWN_KNOB" in out + err
    assert "moe.overlap.ep_comm is a value, not a section" in out + err
    assert "tiny-moe/cpu.yaml" not in out + err


def test_random_unicode_values_reach_the_plan_unchanged(proj):
    rng = random.Random(46)
    alphabet = [chr(c) for c in (*range(0x21, 0x7f), 0xe9, 0x2028, 0x85, 0xfeff, 0x1F600, 0x10FFFD)]
    doc = json.loads(json.dumps(BASE))
    doc.pop("points")
    values = ["/d/" + "".join(rng.choice(alphabet) for _ in range(12)) for _ in range(3)]
    doc["axes"] = {"checkpoint.save": values}
    doc["set"]["checkpoint.interval"] = 1
    write(proj, doc)
    rc, out, err = resultslib.cli(proj, "sweep", "launch", "h", "--target", "print")
    clean(rc, out, err)
    for i, v in enumerate(values):
        plan = json.loads((proj / "build" / "sweeps" / "h" / f"p{i:02d}" / "plan.json").read_text())
        assert plan["checkpoint"]["save"] == v
