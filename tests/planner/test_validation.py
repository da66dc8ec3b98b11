"""Issue 15's acceptance check: for each tuned Megatron-Bridge configuration (tests/data/
bridge_tuned_layouts.json, from shared/reference/bridge-perf-configs-subset.md), plan-layout with the
same model, GPU type and count, sequence length and GBS must (a) find the tuned layout legal and within
memory and (b) rank it in its top 10 or estimate it within 15 % of its own best.

The tolerances are the issue's.  While compiler/estimate/steptime.py is the PROVISIONAL placeholder
(steptime.PROVISIONAL) the rows are expected to fail (xfail, not strict); the calibrated estimators
replace it, and then every row is asserted for real.
"""
import json
from pathlib import Path

import pytest

from compiler.estimate import steptime
from compiler.planner import validation

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "bridge_tuned_layouts.json"
ROWS = json.loads(FIXTURE.read_text())["rows"]
PROVISIONAL = bool(getattr(steptime, "PROVISIONAL", False))
RESULTS: dict = {}


def _id(row):
    return f"{row['model']}-{row['gpu']}-x{row['ngpu']}"


@pytest.mark.parametrize("row", ROWS, ids=_id)
@pytest.mark.xfail(PROVISIONAL, reason="PROVISIONAL step-time model (and memory recalibration pending)", strict=False)
def test_tuned_layout_is_found(row):
    v = RESULTS[_id(row)] = validation.validate(row)
    if v["reasons"] and v["reasons"][0].startswith("layout: "):
        # the reference row itself does not fold (deepseek_v3 h100 x64: EP64 x PP8 = 512 ranks > 64 GPUs)
        pytest.xfail(f"the reference row does not fold: {v['reasons'][0]}")
    print(f"\n{v['row']}: {v['layout']} rank {v['rank']} tuned {v['tuned_s']} best {v['best_s']} ratio {v['ratio']}")
    assert v["legal"], f"{v['row']}: the rules reject the tuned layout: {v['reasons']}"
    assert v["within_memory"], f"{v['row']}: over memory: {v['reasons']}"
    assert v["rank"] <= validation.RANK_LIMIT or v["ratio"] <= validation.RATIO_LIMIT, \
        f"{v['row']}: rank {v['rank']} > {validation.RANK_LIMIT}, {v['tuned_s']:.2f} s = {v['ratio']:.2f} x the best"


def test_fixture_is_the_reference_table():
    """The fixture holds every tuned row with the fields the check needs (the generator parses the table)."""
    assert len(ROWS) == 21 and len({_id(r) for r in ROWS}) == 21
    need = {"model", "platform", "gpu", "ngpu", "tp", "pp", "cp", "vpp", "ep", "etp", "mbs", "gbs", "seq",
            "dispatcher", "flex_backend", "ep_overlap", "delay_wgrad", "recompute", "recompute_modules"}
    assert all(need <= r.keys() for r in ROWS)
    q = next(r for r in ROWS if _id(r) == "qwen3-30b-a3b-h100-x16")
    assert (q["ep"], q["dispatcher"], q["flex_backend"], q["ep_overlap"]) == (16, "flex", "hybridep", True)
    assert (q["tp"], q["pp"], q["mbs"], q["gbs"], q["seq"]) == (1, 1, 1, 1024, 4096)


def test_print_the_table():
    """The table for the README (rank, estimates, ratio), of the rows validated above."""
    if not RESULTS:
        pytest.skip("no validation rows ran in this session")
    print("\n" + validation.table([RESULTS[_id(r)] for r in ROWS if _id(r) in RESULTS]))
