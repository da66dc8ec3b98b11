"""What the compiler accepts must train: draw tiny MoE configurations, compile, train one step with megatron-core.

The space is what the CPU runtime can build (world size <= 4 over gloo, alltoall and allgather, no
Transformer Engine): experts, top-k, expert groups, score functions, shared experts, MTP, TP/PP/VPP/EP/ETP/CP,
sequence and batch sizes, recompute. Widths are tiny so a step costs about a second. A configuration the
compiler accepts and megatron-core then refuses is a missing rule: each one found is a rule in
compiler/rules/ and a reproducer in FOUND below (the rule refuses it, and without the rule it really fails).

`make test` runs the explicit examples and a few derandomised draws; `make fuzz` (MOEFORGE_FUZZ=long) draws
hundreds more.
"""
from __future__ import annotations

import pytest
from hypothesis import assume, event, example, given, note
from hypothesis import strategies as st

import fuzzlib
import truthlib

pytestmark = pytest.mark.slow  # each example trains with megatron-core (forked gloo ranks)


@pytest.fixture(scope="module", autouse=True)
def warm_runtime():
    truthlib.warm()


@st.composite
def configurations(draw) -> list[str]:
    """`--set` overrides of tiny-moe/cpu: a layout of <= 4 ranks and a tiny model the CPU runtime can build."""
    world = draw(st.sampled_from([1, 2, 4]))
    # TP and CP above 1 need Transformer Engine for an MoE model (sequence parallelism, attention): the compiler
    # refuses them on this platform, rarely drawn, to check that it still does
    tp, cp = (draw(st.sampled_from([1] * 7 + [2])) for _ in range(2))
    pp = draw(st.sampled_from(_divisors(world)))
    ep = draw(st.sampled_from(_divisors(max(1, world // pp))))
    etp = draw(st.sampled_from([None, 1] + ([2] if world // pp % (2 * ep) == 0 else [])))
    vpp = draw(st.sampled_from([None, None, 2])) if pp > 1 else None
    layers = draw(st.sampled_from([1, 2, 4]))
    heads = draw(st.sampled_from([1, 2, 4]))
    experts = draw(st.sampled_from([1, 2, 4, 8]))
    topk = draw(st.integers(1, min(8, experts + 1)))  # one past the experts: ROUTER_TOPK_AT_MOST_NUM_EXPERTS' edge
    groups = draw(st.sampled_from([None, None] + [g for g in (1, 2, 4) if g <= experts]))
    group_topk = draw(st.sampled_from([None] + [g for g in (1, 2, 4) if g <= groups])) if groups else None
    score = draw(st.sampled_from(["softmax", "sigmoid"]))
    mbs = draw(st.sampled_from([1, 2]))
    sets = {
        "platform.gpus_per_node": world,
        "parallelism.tp": tp, "parallelism.pp": pp, "parallelism.cp": cp, "parallelism.ep": ep,
        "parallelism.etp": etp, "parallelism.vpp": vpp,
        "parallelism.sp": tp > 1,
        "moe.dispatcher": draw(st.sampled_from(["alltoall", "allgather"])),
        "moe.overlap.ep_comm": draw(st.booleans()) if ep > 1 else False,
        "model.architecture.num_layers": layers,
        "model.architecture.hidden_size": draw(st.sampled_from([16, 32])),
        "model.architecture.num_attention_heads": heads,
        "model.architecture.num_query_groups": draw(st.sampled_from([h for h in (1, 2, 4) if h <= heads])),
        "model.architecture.ffn_hidden_size": 32,
        "model.moe.num_experts": experts,
        "model.moe.ffn_hidden_size": draw(st.sampled_from([8, 16])),
        "model.moe.router_topk": topk,
        "model.moe.router_score_function": score,
        "model.moe.router_pre_softmax": draw(st.booleans()) if score == "softmax" else False,
        "model.moe.router_num_groups": groups,
        "model.moe.router_group_topk": group_topk,
        "model.moe.router_load_balancing_type": draw(st.sampled_from(["aux_loss", "seq_aux_loss", "none"])),
        "model.moe.shared_expert_intermediate_size": draw(st.sampled_from([None, None, 16])),
        "model.mtp_num_layers": draw(st.sampled_from([None, None, 1])),
        "training.seq_length": draw(st.sampled_from([8, 16, 32])),
        "training.micro_batch_size": mbs,
        "training.global_batch_size": mbs * world * draw(st.sampled_from([1, 2])),
    }
    granularity = draw(st.sampled_from([None, None, "full", "selective"]))
    if granularity == "full":
        sets.update({"recompute.granularity": "full", "recompute.method": "uniform", "recompute.num_layers": 1})
    elif granularity == "selective":
        sets.update({"recompute.granularity": "selective"})
    return [f"{k}={_yaml(v)}" for k, v in sets.items()]


def _divisors(n: int) -> list[int]:
    return [d for d in (1, 2, 4) if n % d == 0]


def _yaml(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


WORLD1 = ["platform.gpus_per_node=1", "parallelism.ep=1", "moe.overlap.ep_comm=false"]

# Configurations each worth keeping in the fixed corpus (the layouts and routing the property found
# interesting); FOUND's reproducers are refused now: test_what_the_property_found_* checks them.
CORPUS = [
    [],  # tiny-moe/cpu itself: EP=2, alltoall, EP overlap
    WORLD1 + ["model.moe.router_topk=4"],  # top-k equal to the experts: the boundary the first rule draws
    WORLD1 + ["model.moe.router_num_groups=2", "model.moe.router_group_topk=1", "model.moe.router_topk=2"],
    ["platform.gpus_per_node=4", "parallelism.ep=4", "moe.dispatcher=allgather", "moe.overlap.ep_comm=false",
     "model.moe.router_score_function=sigmoid", "model.moe.router_topk=1"],
    ["parallelism.pp=2", "parallelism.ep=1", "moe.overlap.ep_comm=false", "model.mtp_num_layers=1",
     "model.moe.shared_expert_intermediate_size=16"],
]


# What the property found: (rule that now refuses it, overrides, what megatron-core 0.16.1 did without the rule).
FOUND = [
    ("ROUTER_TOPK_AT_MOST_NUM_EXPERTS", WORLD1 + ["model.moe.router_topk=8"], "selected index k out of range"),
    ("ROUTER_TOPK_AT_MOST_NUM_EXPERTS", WORLD1 + ["model.moe.num_experts=2", "model.moe.router_topk=3"],
     "selected index k out of range"),
    # expert TP 2 at EP 2 on four ranks: the alltoall dispatcher gathers uneven token counts, which gloo cannot
    ("GLOO_ALLTOALL_NO_EXPERT_TP", ["platform.gpus_per_node=4", "parallelism.ep=2", "parallelism.etp=2",
                                    "moe.overlap.ep_comm=false", "model.architecture.num_layers=1"],
     "ProcessGroupGloo::allgather: invalid tensor size"),
    # EP 2 with overlap over two experts: one expert a rank, and megatron-core 0.16.1 frees its input before backward
    ("EP_OVERLAP_ONE_LOCAL_EXPERT_ALLTOALL", ["model.moe.num_experts=2", "model.architecture.num_layers=1"],
     "its data is not allocated yet"),
    # four experts in two groups, one group picked: two experts to choose four from
    ("ROUTER_GROUP_TOPK_REACHES_TOPK", WORLD1 + ["model.moe.router_num_groups=2", "model.moe.router_group_topk=1",
                                                 "model.moe.router_topk=4"], "selected index k out of range"),
    # two of four one-expert groups, three experts wanted: the third is a masked (-inf) score, NaN under sigmoid
    ("ROUTER_GROUP_TOPK_REACHES_TOPK", WORLD1 + ["model.moe.router_num_groups=4", "model.moe.router_group_topk=2",
                                                 "model.moe.router_topk=3", "model.moe.router_score_function=sigmoid"],
     "found NaN"),
]


def check_compiled_runs(overrides: list[str], tmp_path_factory) -> None:
    plan, refused = truthlib.compile_plan(overrides, explain=False)
    if refused is not None:
        event("refused: " + ", ".join(sorted({d.code for d in refused.diagnostics})[:3]))
    assume(plan is not None)
    event(f"compiled, world size {plan['layout']['world_size']}")
    note(f"layout: {plan['layout']}")
    step = truthlib.train_one_step(plan, tmp_path_factory.mktemp("step"))
    assert step.ok, (f"compiles but does not train (a missing rule?): --set {' --set '.join(overrides)}\n"
                     f"exit codes {step.codes}\n{step.output[-3000:]}")


@pytest.mark.parametrize("overrides", CORPUS, ids=lambda o: ",".join(o)[-60:] or "tiny-moe-cpu")
def test_the_corpus_compiles_and_trains(overrides, tmp_path_factory):
    plan, refused = truthlib.compile_plan(overrides)
    assert plan is not None, [(d.code, d.help) for d in refused.diagnostics]
    step = truthlib.train_one_step(plan, tmp_path_factory.mktemp("step"))
    assert step.ok, step.output[-3000:]
    assert step.report["steps"][0]["loss"] > 0


@fuzzlib.fuzz_settings(weight=0.2 if fuzzlib.PROFILE == "ci" else 0.5, deadline=None)  # a hang guard is truthlib's
@given(overrides=configurations())
@example(overrides=FOUND[0][1])
@example(overrides=FOUND[2][1])
@example(overrides=FOUND[3][1])
@example(overrides=FOUND[4][1])
def test_what_compiles_trains_one_step(overrides, tmp_path_factory):
    check_compiled_runs(overrides, tmp_path_factory)


@pytest.mark.parametrize("rule_id,overrides,failure", FOUND, ids=[f"{f[0]}-{i}" for i, f in enumerate(FOUND)])
def test_what_the_property_found_is_refused_and_really_fails_without_the_rule(rule_id, overrides, failure,
                                                                               tmp_path, monkeypatch):
    _, refused = truthlib.compile_plan(overrides)
    assert refused is not None, f"compiles: --set {' --set '.join(overrides)}"
    [diag] = [d for d in refused.diagnostics if rule_id in d.code.split("+")]  # a conflict joins its rules' ids
    assert "megatron-core" in diag.source and ".py" in diag.source and diag.help
    # the reproducer still reproduces: with the rule taken out, megatron-core fails as it did when found
    from moeforge.compiler import driver

    monkeypatch.setattr(driver, "RULES", tuple(r for r in driver.RULES if r.id != rule_id))
    plan, refused = truthlib.compile_plan(overrides)
    assert plan is not None, [(d.code, d.help) for d in refused.diagnostics]
    step = truthlib.train_one_step(plan, tmp_path)
    assert not step.ok and failure in step.output, step.output[-3000:]


@pytest.mark.parametrize("overrides", [FOUND[i][1] for i in (0, 2, 3, 4)], ids=["topk", "etp", "ep-overlap", "groups"])
def test_each_fix_offered_for_a_found_configuration_compiles_and_trains(overrides, tmp_path_factory):
    _, refused = truthlib.compile_plan(overrides)
    [diag] = refused.diagnostics
    assert diag.fixes
    for path, value in diag.fixes:
        fixed = overrides + [f"{path}={_yaml(value)}"]
        plan, still = truthlib.compile_plan(fixed)
        assert plan is not None, (fixed, [(d.code, d.help) for d in still.diagnostics])
        step = truthlib.train_one_step(plan, tmp_path_factory.mktemp("fixed"))
        assert step.ok, (fixed, step.output[-3000:])
