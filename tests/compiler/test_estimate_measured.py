"""The step-time model against throughput Megatron-Bridge measured and published for tuned runs.

tests/data/bridge_measured_throughput.json holds the BF16 rows of Megatron-Bridge's performance
summary for catalogue models (GPT-OSS-120B on H100, B200, B300, GB200, GB300, and Qwen3-235B-A22B on
GB200; the source, container and table line are in the file).  Each row is compiled from the tuned Megatron-Bridge settings
(tests/data/bridge_tuned_layouts.json) with what the published run changed, estimated, and must land
within the calibration's 25 %; the published Model TFLOP/s must be Megatron-LM's FLOPs count of the
same run.  Two rows are the same model on the same machines with EP64 across 8 nodes instead of EP8
inside one (an earlier container): the model must find the cross-node layout slower, as measured.
Two rows are Megatron-Bridge's controlled EP-overlap A/B on its tuned Qwen3-30B-A3B H100 layout (#5094),
whose direction the model must reproduce.  A row marked ``known`` is a deviation the docs state
(Qwen3-235B-A22B on GB200, an older container; that Qwen3-30B-A3B pair, 1.3-1.5x slow): it is
asserted to still deviate.

The file's ``fp8_rows`` are Megatron-Bridge's MXFP8 runs of Qwen3-Next-80B-A3B with the layouts of its
BF16 recipes, the model of the planner's two validation misses (tests/planner/test_validation.py).
The model is BF16, so they bound rather than calibrate: the tuned B200 layout that the planner
finds 2.5x slower than its best ran, in MXFP8, slower than the model's BF16 estimate of it, and at
half the tokens/s of the GB200 layout that the planner finds within 8 % of its best.
``pytest -s`` prints the table (docs/layout-model.md, section 6, has it).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from moeforge.compiler.estimate import flops, steptime
from moeforge.compiler.planner import validation

DATA = Path(__file__).resolve().parents[1] / "data"
_PUBLISHED = json.loads((DATA / "bridge_measured_throughput.json").read_text())
MEASURED = _PUBLISHED["rows"]
FP8 = {m["name"]: m for m in _PUBLISHED["fp8_rows"]}
TUNED = {f"{r['model']}-{r['gpu']}-x{r['ngpu']}": r for r in
         json.loads((DATA / "bridge_tuned_layouts.json").read_text())["rows"]}
TOLERANCE = 0.25  # the calibration's bound (test_estimate_steptime.TOLERANCE)


@lru_cache(maxsize=None)
def _plan(name: str) -> dict:
    """The compiled plan of a published run: its tuned row with what the run changed."""
    row = next(m for m in MEASURED + list(FP8.values()) if m["name"] == name)
    return validation.tuned_plan({**TUNED[row["tuned"]], **row["override"]})


@lru_cache(maxsize=None)
def _estimate(name: str) -> steptime.StepTime:
    return steptime.estimate(_plan(name))


def _ratio(row: dict) -> float:
    """Estimated step time / measured step time (measured: tokens per step / GPUs / tokens/s/GPU)."""
    est = _estimate(row["name"])
    return row["tokens_per_s_per_gpu"] / est.tokens_per_s_per_gpu


@pytest.mark.parametrize("row", MEASURED, ids=[m["name"] for m in MEASURED])
def test_published_throughput_within_tolerance(row):
    est = _estimate(row["name"])
    ratio = _ratio(row)
    print(f"\n{row['name']:36s} measured {row['tokens_per_s_per_gpu']:6.0f} tok/s/GPU, model "
          f"{est.tokens_per_s_per_gpu:7.0f} (step {est.total_s:.2f} s, {est.dominant}): model/measured time {ratio:.3f}")
    if row.get("known"):  # a deviation the docs state: asserted to still deviate, so the statement stays true
        assert abs(ratio - 1) > TOLERANCE, f"{row['name']} is now within {TOLERANCE:.0%}: drop its 'known' note"
        pytest.xfail(row["known"])
    assert abs(ratio - 1) <= TOLERANCE, f"{row['name']}: model step time {ratio:.3f} x the measured one"


@pytest.mark.parametrize("row", MEASURED, ids=[m["name"] for m in MEASURED])
def test_published_tflops_are_megatrons_count(row):
    """Bridge reports Megatron-LM's model FLOPs per second: tokens/s/GPU x FLOPs per token must
    give its TFLOP/s (within 0.5 %: both columns are rounded), so the model prices the run that was measured."""
    est = _estimate(row["name"])
    per_token = est.model_flops * est.world_size / est.tokens_per_step
    assert row["tokens_per_s_per_gpu"] * per_token / 1e12 == pytest.approx(row["model_tflops_per_gpu"], rel=0.005)


def test_production_ep_overlap_is_faster_as_measured():
    """Megatron-Bridge's controlled A/B on its tuned Qwen3-30B-A3B H100 layout (EP16 across two nodes,
    HybridEP, #5094): plain EP overlap cut the step 15.1 %; the model must find it faster too."""
    rows = {m["name"]: m for m in MEASURED}
    off, on = (rows[f"qwen3-30b-a3b h100 x16 EP16 HybridEP, {k} (#5094)"] for k in ("no EP overlap", "EP overlap"))
    measured = on["step_time_s"] / off["step_time_s"] - 1
    model = _estimate(on["name"]).total_s / _estimate(off["name"]).total_s - 1
    print(f"\nEP overlap on the production shape: measured {measured:+.3f}, model {model:+.3f}")
    assert measured < -0.1 and model < 0


@pytest.mark.parametrize("inside,across", [("gpt-oss-120b b200 x64 EP8", "gpt-oss-120b b200 x64 EP64 (26.02)"),
                                           ("gpt-oss-120b b300 x64 EP8", "gpt-oss-120b b300 x64 EP64 (26.02)")])
def test_cross_node_ep_is_slower_as_measured(inside, across):
    """8-GPU NVLink domains: EP8 inside a node measured 1.69x (B200) and 1.82x (B300) the tokens/s of
    EP64 across 8 nodes; the model must order them the same way, by more than noise."""
    rows = {m["name"]: m for m in MEASURED}
    measured = rows[inside]["tokens_per_s_per_gpu"] / rows[across]["tokens_per_s_per_gpu"]
    model = _estimate(across).total_s / _estimate(inside).total_s
    print(f"\n{across} / {inside}: measured {measured:.2f}x, model {model:.2f}x")
    assert measured > 1.5 and model > 1.2


def _measured_step_s(row: dict) -> float:
    est = _estimate(row["name"])
    return est.tokens_per_step / est.world_size / row["tokens_per_s_per_gpu"]


@pytest.mark.parametrize("name", sorted(FP8))
def test_fp8_rows_count_the_catalogue_model(name):
    """The published MXFP8 runs are the catalogue's Qwen3-Next (MTP, vocabulary, layer pattern): their Model
    TFLOP/s are tokens/s x Megatron-LM's FLOPs per token less the attention output gate's GEMM
    (6 h x heads x head-dim on each full-attention layer), a term Megatron-Bridge's count gained in
    NVIDIA-NeMo/Megatron-Bridge#3029.  Within 0.5 %: the published columns are rounded."""
    row, est = FP8[name], _estimate(name)
    tc = _plan(name)["transformer_config"]
    assert tc["attention_output_gate"] is True
    full_attention = sum(not flops._linear_attention_megatron(tc, i)
                         for i in range(tc["num_layers"] + (tc.get("mtp_num_layers") or 0)))
    gate = flops.K * tc["hidden_size"] * tc["num_attention_heads"] * tc["kv_channels"] * full_attention
    per_token = est.model_flops * est.world_size / est.tokens_per_step
    counted = row["tokens_per_s_per_gpu"] * (per_token - gate) / 1e12
    print(f"\n{name}: published {row['model_tflops_per_gpu']} TFLOP/s/GPU, Megatron-LM's count less the gate "
          f"{counted:.1f}, with it {row['tokens_per_s_per_gpu'] * per_token / 1e12:.1f}")
    assert full_attention == 12 and counted == pytest.approx(row["model_tflops_per_gpu"], rel=0.005)


@pytest.mark.parametrize("name", sorted(FP8))
def test_model_does_not_overprice_the_fp8_runs(name):
    """Each MXFP8 run took longer than the model's BF16 estimate of its layout (a BF16 run of a layout is
    no faster than its MXFP8 run, whose GEMMs have twice the peak): the model does not overprice the B200
    layout it ranks 2.5x slower than its best.  It underprices all three (0.55-0.75x; docs/layout-model.md,
    section 7), as it does the Qwen3-Next seed."""
    est, measured_s = _estimate(name), _measured_step_s(FP8[name])
    print(f"\n{name:52s} measured {measured_s:6.2f} s, model (BF16) {est.total_s:6.2f} s ({est.dominant}): "
          f"model/measured {est.total_s / measured_s:.2f}")
    assert est.total_s < measured_s


def test_cross_node_b200_layout_runs_at_half_gb200():
    """In the same container the B200 layout (EP64 across 8 nodes, no EP overlap) ran at half the
    tokens/s per GPU of the GB200 one (EP32 inside the NVLink domain), which the planner puts within 8 % of
    its best; the model finds at least that gap."""
    b200 = FP8["qwen3-next-80b-a3b b200 x64 EP64 (MXFP8)"]
    gb200 = FP8["qwen3-next-80b-a3b gb200 x64 PP2 VP4 EP32 (MXFP8)"]
    measured = b200["tokens_per_s_per_gpu"] / gb200["tokens_per_s_per_gpu"]
    model = _estimate(gb200["name"]).total_s / _estimate(b200["name"]).total_s
    print(f"\nB200/GB200 tokens/s per GPU: measured {measured:.2f}, model {model:.2f}")
    assert measured < 0.6 and model < 0.6
