"""Every point through the same compile as `check`: refused points with their rule at the sweep's lines,
duplicates collapsed with the knob that changed nothing and why, the planner's estimate per point."""
from __future__ import annotations

import json

from moeforge.compiler.driver import load, resolve
from moeforge.compiler.targets.plan import build
from moeforge.compiler.sweep import collapse, document, points, workflow

THREE_WHYS = """\
    schema: moeforge/sweep/v1
    name: whys
    recipe: builtin:tiny-moe/cpu
    axes:
      moe.overlap.ep_comm: [true, false]
      moe.dispatcher: [alltoall, allgather]
    points:
      - {moe.overlap.ep_comm: false, moe.dispatcher: alltoall, moe.overlap.delay_wgrad: false}
      - {moe.overlap.ep_comm: true, moe.dispatcher: alltoall, training.seed: 1234}
      - {moe.overlap.ep_comm: false, moe.dispatcher: allgather, moe.flex_backend: hybridep}
"""


def test_points_are_the_axes_product_then_the_explicit_points(proj, write_sweep):
    write_sweep(proj, "whys", THREE_WHYS)
    s = document.load("whys")
    ps = points.expand(s)
    assert [p.id for p in ps] == [f"p{i:02d}" for i in range(7)]
    assert [p.values for p in ps[:4]] == [
        {"moe.overlap.ep_comm": True, "moe.dispatcher": "alltoall"},
        {"moe.overlap.ep_comm": True, "moe.dispatcher": "allgather"},
        {"moe.overlap.ep_comm": False, "moe.dispatcher": "alltoall"},
        {"moe.overlap.ep_comm": False, "moe.dispatcher": "allgather"}]
    assert ps[4].values["moe.overlap.delay_wgrad"] is False


def test_refused_points_keep_the_rule_at_the_sweep_lines_and_duplicates_name_the_knob(proj, write_sweep):
    write_sweep(proj, "whys", THREE_WHYS)
    checked = workflow.check("whys")
    refused = {c.point.id: c for c in checked.refused}
    assert list(refused) == ["p01"]
    [err] = [d for d in refused["p01"].errors if d.is_error]
    assert err.code == "EP_OVERLAP_NEEDS_A2A_OR_FLEX"
    located = {(n.text.split(" =")[0], n.pos.file, n.pos.line) for n in err.notes}
    assert ("moe.dispatcher", "recipes/sweeps/whys.yaml", 6) in located and ("moe.overlap.ep_comm", "recipes/sweeps/whys.yaml", 5) in located
    col = checked.collapsed
    assert {k: v.twin for k, v in col.items()} == {"p04": "p02", "p05": "p00", "p06": "p03"}
    # forced by a rule: delayed wgrad is off without EP overlap whether auto or pinned
    [k] = col["p04"].knobs
    assert (k.knob, k.why, k.planned) == ("moe.overlap.delay_wgrad", "forced by a rule", False)
    assert "rule DELAY_WGRAD_NEEDS_EP_OVERLAP forces false" in k.detail and '"auto" (the recipe\'s) in p02' in k.detail
    # pinned elsewhere: the recipe already pins the seed the point sets
    [k] = col["p05"].knobs
    assert (k.knob, k.why) == ("training.seed", "pinned elsewhere")
    assert "pinned to 1234 at builtin:recipes/tiny-moe/cpu.yaml" in k.detail
    # read by no launch: a flex backend without the flex dispatcher
    [k] = col["p06"].knobs
    assert (k.knob, k.why) == ("moe.flex_backend", "read by no launch here")
    assert {c.point.id for c in checked.launchable} == {"p00", "p02", "p03"}


def test_the_front_end_rewrite_is_named():
    """A value Megatron rewrites at start-up (a silent rule) is explained as the front-end's doing."""
    d_pinned = {"value": False, "source": "megatron", "rule": "TP_COMM_OVERLAP_NEEDS_SP", "reason": "dropped without SP"}
    d_other = {"value": False, "source": "override", "rule": None, "reason": None}
    k = collapse.explain("overlap.tp_comm", {"p01": True, "p00": False}, d_pinned, d_other)
    assert k.why == "rewritten by the front-end" and "TP_COMM_OVERLAP_NEEDS_SP" in k.detail


def test_the_fingerprint_ignores_who_a_point_is_not_what_it_runs():
    a = build(resolve(load("tiny-moe/cpu", ["name=s-p00"])))
    b = build(resolve(load("tiny-moe/cpu", ["name=s-p01", "moe.overlap.delay_wgrad=false"])))
    c = build(resolve(load("tiny-moe/cpu", ["training.micro_batch_size=1"])))
    launch = {"launch": {}}
    assert points.fingerprint(a, launch) == points.fingerprint(b, launch) != points.fingerprint(c, launch)
    assert points.fingerprint(a, {"launch": {"time": "01:00:00"}}) != points.fingerprint(a, launch)


def test_set_text_round_trips_every_value_kind():
    from moeforge.compiler.recipe.compose import parse_override

    for value in ("alltoall", "yes", "1.0", 3, 1e-4, True, None, ["a b", 2], "auto"):
        k = document.Knob(("x", "y"), value, None, None)
        assert parse_override(points.set_text(k)) == (("x", "y"), value)


def test_sweep_check_prints_every_point_and_the_estimate(proj, write_sweep, cli, capsys):
    write_sweep(proj, "whys", THREE_WHYS)
    assert cli("sweep", "check", "whys") == 1  # a refused point
    out = capsys.readouterr().out
    assert "7 point(s) of builtin:tiny-moe/cpu: 3 to run, 1 refused, 3 duplicate(s)" in out
    assert "p01 refused, never launched:" in out and "error[EP_OVERLAP_NEEDS_A2A_OR_FLEX]" in out
    assert "p04 = p02: moe.overlap.delay_wgrad" in out
    assert "estimates: no step-time estimate: platform 'cpu' has no performance" in out
    assert not (proj / "build").exists()  # check writes nothing


def test_an_estimate_says_when_the_sweep_cannot_fit(proj, write_sweep, cli, capsys):
    """On a platform with a performance block: step time, tokens/s/GPU, memory and GPU-hours per point, and
    a point over the GPU's memory is marked before anything is queued."""
    write_sweep(proj, "big", """\
        schema: moeforge/sweep/v1
        name: big
        recipe: builtin:qwen3-30b-a3b/h100-bf16
        axes:
          training.micro_batch_size: [1, 8]
        """)
    assert cli("sweep", "check", "big") == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("p0")}
    assert "(too big)" in rows["p01"] and "(too big)" not in rows["p00"]
    est = json.loads(json.dumps(workflow.check("big").compiled[0].plan["training"]))
    assert est["micro_batch_size"] == 1
    assert "estimated total:" in out and "GPU-hours" in out
    step = float(rows["p00"].split()[2])
    assert 1 < step < 1000
