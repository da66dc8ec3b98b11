"""compiler/knobs/layout.py: the one place that folds the world (tp*cp*dp*pp = etp*ep*edp*pp)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from moeforge.compiler.knobs import layout as L
from moeforge.compiler.knobs.layout import Layout, LayoutError

ROOT = Path(__file__).resolve().parents[2]


def test_derived_sizes_and_folding_identity():
    lay = Layout(world_size=256, tp=2, cp=1, pp=8, ep=32, etp=1, vpp=4, gpus_per_node=8, num_layers=96)
    assert (lay.dp, lay.edp, lay.nodes, lay.expert_tp) == (16, 1, 32, 1)
    assert lay.tp * lay.cp * lay.dp * lay.pp == lay.expert_tp * lay.ep * lay.edp * lay.pp == lay.world_size
    assert (lay.layers_per_stage, lay.layers_per_virtual_stage, lay.chunks) == (12, 3, 4)
    assert lay.folding() == "2*1*16*8 = 1*32*1*8 = 256"
    # megatron-core's interleaved split: chunk v of stage r holds layers v*pp*per + r*per + 1 ...
    assert lay.stage_layers(0) == [1, 2, 3, 25, 26, 27, 49, 50, 51, 73, 74, 75]


def test_etp_defaults_to_tp():
    lay = Layout(world_size=16, tp=2, ep=4)
    assert lay.expert_tp == 2 and lay.edp == 2 and lay.dp == 8


@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=66, tp=2, pp=4), "world_size 66 is not divisible by tp*cp*pp = 2*1*4 = 8 (world = tp*cp*dp*pp)"),
    (dict(world_size=24, ep=16), "world_size 24 is not divisible by etp*ep*pp = 1*16*1 = 16 (world = etp*ep*edp*pp)"),
    (dict(world_size=8, vpp=2), "vpp is set but pp is 1"),
    (dict(world_size=8, pp=2, num_layers=61), "num_layers 61 is not divisible by pp = 2"),
    (dict(world_size=8, pp=2, vpp=4, num_layers=18), "layers per stage 9 (num_layers/pp = 18/2) is not divisible by vpp = 4"),
    (dict(world_size=12, gpus_per_node=8), "world_size 12 is not a whole number of nodes of 8 GPUs"),
    (dict(world_size=8, tp=0), "tp must be a positive integer, got 0"),
])
def test_bad_layouts_name_the_formula(kwargs, message):
    with pytest.raises(LayoutError) as err:
        Layout(**kwargs)
    assert message in str(err.value)


def test_derived_matches_layout_for_every_small_layout():
    for world, tp, cp, pp, ep, etp in itertools.product((1, 8, 16, 24), (1, 2), (1, 2), (1, 2, 4), (1, 4, 8), (None, 1, 2)):
        values = {"world_size": world, "tensor_model_parallel_size": tp, "context_parallel_size": cp,
                  "pipeline_model_parallel_size": pp, "expert_model_parallel_size": ep,
                  "expert_tensor_parallel_size": etp}
        got = L.derived(values)
        try:
            lay = Layout.from_values(values)
        except LayoutError:
            assert None in (got["data_parallel_size"], got["expert_data_parallel_size"])
            continue
        assert (got["data_parallel_size"], got["expert_data_parallel_size"]) == (lay.dp, lay.edp)


def test_sizes_work_on_z3_terms():
    z3 = pytest.importorskip("z3")
    tp, cp, pp = z3.Ints("tp cp pp")
    s = z3.Solver()
    s.add(L.model_size(tp, cp, pp) == 8, tp == 2, cp == 1)
    assert s.check() == z3.sat and s.model()[pp].as_long() == 4


def test_runtime_mirror_says_the_same():
    """runtime/plan/document.py's folding check (the runtime never imports the compiler) words its
    messages as compiler/knobs/layout.py does."""
    from moeforge.runtime.errors import PlanError
    from moeforge.runtime.plan.document import _check_folding

    for kwargs in (dict(world_size=66, tp=2, pp=4), dict(world_size=24, ep=16), dict(world_size=8, vpp=2)):
        with pytest.raises(LayoutError) as want:
            Layout(**kwargs)
        layout = {"world_size": kwargs["world_size"], "tp": kwargs.get("tp", 1), "cp": 1, "pp": kwargs.get("pp", 1),
                  "ep": kwargs.get("ep", 1), "etp": None, "vpp": kwargs.get("vpp")}
        with pytest.raises(PlanError) as got:
            _check_folding(layout)
        assert got.value.message == str(want.value)


@pytest.mark.parametrize("plan", sorted((ROOT / "tests" / "golden").rglob("plan.json")), ids=lambda p: p.parent.name)
def test_golden_plan_layouts_fold(plan):
    section = json.loads(plan.read_text())["layout"]
    lay = Layout.from_plan(section)
    assert {**lay.plan_section(), "nnodes": section["nnodes"]} == section


def test_runtime_mirror_folds_every_small_layout_as_the_compiler_does():
    """Every layout of a small grid: runtime/plan/document.py accepts exactly what compiler/knobs/layout.py accepts,
    with the same DP and the same message."""
    from moeforge.runtime.errors import PlanError
    from moeforge.runtime.plan.document import _check_folding

    sizes = (1, 2, 3, 4)
    for world in (1, 2, 4, 6, 8, 12, 16, 24):
        for tp, cp, pp, ep, etp in itertools.product(sizes, (1, 2), sizes, sizes, (None, 1, 2)):
            try:
                lay = Layout(world_size=world, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp)
                want = None
            except LayoutError as exc:
                lay, want = None, str(exc)
            layout = {"world_size": world, "tp": tp, "cp": cp, "pp": pp, "ep": ep, "etp": etp or tp, "vpp": None}
            try:
                got = _check_folding(layout)
            except PlanError as exc:
                assert exc.message == want, layout
                continue
            assert want is None and got == lay.dp, layout


def test_runtime_micro_batch_count_is_the_compilers():
    """runtime/plan/document.py's one copy of the micro-batch arithmetic agrees with compiler/knobs/layout.py's over a grid,
    the splits that do not divide included."""
    from moeforge.runtime.plan.document import num_microbatches as runtime_count

    for gbs, mbs, dp in itertools.product(range(1, 65), (1, 2, 3, 4, 8), (1, 2, 3, 4, 6, 8, 16)):
        want = L.num_microbatches(gbs, mbs, dp) if L.batch_remainder(gbs, mbs, dp) == 0 else None
        assert runtime_count(gbs, mbs, dp) == want, (gbs, mbs, dp)
        if want:
            assert L.dp_of_microbatches(gbs, mbs, want) == dp


def _batch_arithmetic(path: Path, root: Path = ROOT) -> list[str]:
    """Every `X // (A * B)`, `X / (A * B)` or `X % (A * B)` whose product names a micro-batch size and a DP size
    or a micro-batch count: the micro-batch arithmetic, spelled out."""
    import ast
    import re

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Div, ast.Mod)) and \
                isinstance(node.right, ast.BinOp) and isinstance(node.right.op, ast.Mult):
            text = ast.unparse(node.right).lower()
            if re.search(r"mbs|micro_batch", text) and re.search(r"\bdp\b|data_parallel|microbatches", text):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_micro_batch_arithmetic_has_one_home(tmp_path):
    """num_microbatches = gbs / (mbs * dp) lives in compiler/knobs/layout.py, and in runtime/plan/document.py's documented
    copy (compared above); anywhere else in compiler/, runtime/ or bench/ it is a second home."""
    homes = {"compiler/knobs/layout.py", "runtime/plan/document.py"}
    found = [f for top in ("compiler", "runtime", "bench") for p in sorted((ROOT / top).rglob("*.py"))
             for f in _batch_arithmetic(p)]
    assert {f.split(":")[0] for f in found} == homes, found
    assert len([f for f in found if f.startswith("runtime/")]) == 2  # the count and the remainder, in one function
    second = tmp_path / "second.py"
    second.write_text("m = plan['gbs'] // (tr['micro_batch_size'] * lay.dp)\nok = gbs % (mbs * dp) == 0\n"
                      "world = gbs // (mbs * notes['num_microbatches'])\nfine = tokens // (seq * heads)\n")
    assert len(_batch_arithmetic(second, tmp_path)) == 3, "the finder finds each spelling"
