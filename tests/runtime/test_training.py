"""End-to-end training runs on CPU (gloo), each configuration in its own torchrun.

These check behaviour, not plumbing: EP overlap must leave every per-micro-batch loss bit-for-bit
unchanged while really taking megatron-core's combined-1F1B schedule, the interleaved pipeline
must take it too, a learnable task must be learned, and a plan that megatron-core would realise
differently (or run on another schedule) must stop with the field named.
"""

from __future__ import annotations

import copy

from moeforge.compiler.rules import BY_ID
from runtime_testlib import launch, micro_batch_losses


def _without_overlap(plan: dict, schedule: str) -> dict:
    plan = copy.deepcopy(plan)
    plan["transformer_config"]["overlap_moe_expert_parallel_comm"] = False
    plan["runtime"]["schedule"] = schedule
    return plan


def _assert_ok(run):
    assert run.returncode == 0, run.output[-4000:]
    assert run.report is not None and run.report["status"] == "ok"


def _assert_stopped(run, text: str, during: str):
    """The run stopped with megatron-core's ``text``, as the runtime's one line naming the stage ``during``
    which it was raised, never megatron-core's traceback (torchrun's own summary is not the runtime's)."""
    assert run.returncode != 0, run.output[-3000:]
    assert text in run.output, run.output[-3000:]
    assert f"moeforge.runtime.train[rank 0]: megatron-core rejected the plan: {during}: " in run.output, run.output[-3000:]
    assert "site-packages/megatron" not in run.output, run.output[-3000:]


def test_ep2_overlap_matches_no_overlap_exactly(tiny_plan, tmp_path):
    on = launch(tiny_plan, tmp_path / "overlap")
    off = launch(_without_overlap(tiny_plan, "no_pipelining"), tmp_path / "plain")
    _assert_ok(on)
    _assert_ok(off)
    assert on.report["schedule_taken"] == "combined_1f1b"
    assert on.report["overlap_schedule_ran"] is True
    assert on.report["combined_1f1b_calls"]["combined_1f1b_schedule_for_no_pipelining"] == \
        tiny_plan["training"]["train_iters"]
    assert on.report["build_schedule_plan_calls"] > 0
    assert off.report["schedule_taken"] == "no_pipelining"
    assert off.report["overlap_schedule_ran"] is False
    assert off.report["build_schedule_plan_calls"] == 0
    # Exact equality, not a tolerance: the overlap schedule reorders work, not arithmetic.
    assert micro_batch_losses(on.report) == micro_batch_losses(off.report)
    n_mb = tiny_plan["training"]["num_microbatches"]
    assert all(len(mb) == n_mb for mb in micro_batch_losses(on.report))
    # The report carries what the tuning workflow needs.
    rep = on.report
    assert rep["world_size"] == 2 and rep["ep"] == 2
    assert len(rep["steps"]) == tiny_plan["training"]["train_iters"]
    assert rep["steady_state"]["window"] == tiny_plan["training"]["report_window"]
    # the preflight ran (the cpu platform on this machine's stack) and found nothing
    assert rep["preflight"]["mode"] == "error" and rep["preflight"]["findings"] == []
    assert rep["entrypoint"] == "moeforge"
    assert rep["tokens_per_s"] > 0 and rep["peak_memory_bytes_max"] > 0
    assert rep["realised"]["moe_token_dispatcher_type"]["read_from"] == ["config", "modules"]
    assert rep["realised"]["_modules"]["moe_token_dispatcher_type"] == "alltoall"
    assert rep["versions"]["megatron_core"]
    assert "step    1/4 | loss" in on.stdout


def _pp2_vp2(plan: dict, microbatches: int, iters: int) -> dict:
    """The tiny plan on PP2 x VP2 x EP2 (4 ranks, DP 2), with this many micro-batches per step."""
    plan = copy.deepcopy(plan)
    plan["transformer_config"].update(num_layers=4, pipeline_model_parallel_size=2,
                                      virtual_pipeline_model_parallel_size=2)
    plan["layout"].update(world_size=4, nproc_per_node=4, pp=2, vpp=2, dp=2, edp=1)
    plan["training"].update(num_microbatches=microbatches,
                            global_batch_size=microbatches * plan["training"]["micro_batch_size"] * 2,
                            train_iters=iters, report_window=[min(2, iters), iters])
    return plan


def test_pp2_vpp2_ep2_interleaved_combined_schedule(tiny_plan, tmp_path):
    plan = _pp2_vp2(tiny_plan, 2, 3)
    on = launch(plan, tmp_path / "overlap")
    off = launch(_without_overlap(plan, "interleaved_1f1b"), tmp_path / "plain")
    _assert_ok(on)
    _assert_ok(off)
    assert on.report["forward_backward_function"] == "forward_backward_pipelining_with_interleaving"
    assert on.report["schedule_taken"] == "combined_1f1b"
    assert on.report["combined_1f1b_calls"]["combined_1f1b_schedule_for_interleaved_pipelining"] > 0
    assert off.report["schedule_taken"] == "interleaved_1f1b"
    assert micro_batch_losses(on.report) == micro_batch_losses(off.report)


def test_the_interleaved_schedule_stops_where_the_catalogue_refuses(tiny_plan, tmp_path):
    """LAYOUT_INTERLEAVED_MICROBATCHES_DIVISIBLE_BY_PP mirrors a check megatron-core makes only when a step starts:
    the PP2 VP2 run above with 3 micro-batches instead of 2 (the compiler refuses it; this plan is written by
    hand) stops there, with the rule's megatron text."""
    run = launch(_without_overlap(_pp2_vp2(tiny_plan, 3, 1), "interleaved_1f1b"), tmp_path)
    text = BY_ID["LAYOUT_INTERLEAVED_MICROBATCHES_DIVISIBLE_BY_PP"].megatron_message
    _assert_stopped(run, text.replace("{final_microbatch_group_size}", "1"), "training step 1")


def test_sinkhorn_routing_with_an_aux_loss_stops_where_the_catalogue_refuses(tiny_plan, tmp_path):
    """SINKHORN_NO_AUX_LOSS mirrors an assert of the router's, met only at its first forward: Sinkhorn balancing
    with a non-zero auxiliary loss coefficient (written by hand: the compiler refuses it) stops with its text."""
    plan = copy.deepcopy(tiny_plan)
    plan["transformer_config"].update(moe_router_load_balancing_type="sinkhorn", moe_aux_loss_coeff=0.01)
    plan["training"].update(train_iters=1, report_window=[1, 1])
    _assert_stopped(launch(plan, tmp_path), BY_ID["SINKHORN_NO_AUX_LOSS"].megatron_message, "training step 1")


def _tp2(plan: dict, sp: bool) -> dict:
    """The tiny plan on TP2 x EP2 (2 ranks, DP 1), with or without sequence parallelism: a plan written by hand."""
    plan = copy.deepcopy(plan)
    plan["transformer_config"].update(tensor_model_parallel_size=2, sequence_parallel=sp)
    plan["layout"].update(tp=2, dp=1, ep=2, etp=1, edp=1)
    plan["training"].update(global_batch_size=2 * plan["training"]["micro_batch_size"], train_iters=1,
                            report_window=[1, 1])
    return _without_overlap(plan, "no_pipelining")


def test_tp_and_sequence_parallelism_stop_megatron_core_where_the_catalogue_refuses(tiny_plan, tmp_path):
    """Two checks megatron-core makes after every front-end accepted the launch, each met by a rule: without
    Transformer Engine (here) the local spec's torch norm refuses sequence parallelism when the model is built
    (TORCH_NORM_NO_SEQUENCE_PARALLEL), and without sequence parallelism the MoE layer refuses TP at the first
    training forward (MOE_TP_NEEDS_SP). Each run stops with its rule's megatron text."""
    for sp, rule, during in ((True, "TORCH_NORM_NO_SEQUENCE_PARALLEL", "GPTModel construction"),
                             (False, "MOE_TP_NEEDS_SP", "training step 1")):
        _assert_stopped(launch(_tp2(tiny_plan, sp), tmp_path / f"sp-{sp}"), BY_ID[rule].megatron_message, during)


def test_without_transformer_engine_megatron_core_stops_where_the_catalogue_refuses(tiny_plan, tmp_path):
    """Without Transformer Engine (here) the local spec's core attention is megatron-core's DotProductAttention,
    which refuses context parallelism (LOCAL_ATTENTION_NO_CONTEXT_PARALLEL, its megatron text) and cannot take
    multi-latent attention's head sizes (LOCAL_ATTENTION_NO_MLA: Python's TypeError) when the model is built, and
    recomputing layernorm reads TE's FP8 state at the first forward (RECOMPUTE_OUTPUT_DISCARDING_NEEDS_TE: a
    NameError); APEX's kernels are absent too: the softmax fusion imports its kernel at the first forward
    (LOCAL_SOFTMAX_FUSION_NEEDS_APEX), and gradient accumulation fusion, which the output layer would refuse
    (GRAD_ACC_FUSION_NEEDS_APEX), is stopped by the runtime's gate before megatron-core builds anything. The plans
    are written by hand: the compiler refuses them."""
    cp2 = copy.deepcopy(tiny_plan)
    cp2["transformer_config"].update(context_parallel_size=2)
    cp2["layout"].update(cp=2, dp=1)
    cp2["training"].update(global_batch_size=cp2["training"]["micro_batch_size"], num_microbatches=1,
                           train_iters=1, report_window=[1, 1])
    mla = copy.deepcopy(tiny_plan)
    mla["transformer_config"].update(multi_latent_attention=True, q_lora_rank=32, kv_lora_rank=16, qk_head_dim=16,
                                     qk_pos_emb_head_dim=8, v_head_dim=16, rope_type="rope")
    norm = _without_overlap(tiny_plan, "no_pipelining")
    norm["transformer_config"].update(recompute_granularity="selective", recompute_modules=["layernorm"])
    fused = {}
    for field in ("gradient_accumulation_fusion", "masked_softmax_fusion"):
        fused[field] = copy.deepcopy(tiny_plan)
        fused[field]["transformer_config"][field] = True
    building, step = "GPTModel construction", "training step 1"
    for name, plan, text, during in (
            ("cp2", cp2, BY_ID["LOCAL_ATTENTION_NO_CONTEXT_PARALLEL"].megatron_message, building),
            ("mla", mla, "got an unexpected keyword argument 'k_channels'", building),
            ("norm", norm, "name 'FP8GlobalStateManager' is not defined", step),
            ("softmax", fused["masked_softmax_fusion"], "No module named 'scaled_masked_softmax_cuda'", step)):
        _assert_stopped(launch(plan, tmp_path / name), text, during)
    run = launch(fused["gradient_accumulation_fusion"], tmp_path / "gaf")
    assert run.returncode != 0
    assert "backend unavailable: module 'fused_weight_gradient_mlp_cuda'" in run.output, run.output[-3000:]


def test_full_recompute_leaves_every_loss_unchanged(tiny_plan, tmp_path):
    """Full recompute runs each layer's forward again inside backward, where the CPU stand-ins must still hold
    (it stopped on a causal mask allocated on "cuda": torch 2.13 hands torch.autograd.backward to the CPU mode,
    which is off while it handles it), and the dropout RNG must be restored: every loss is bit-for-bit the same."""
    plain = _without_overlap(tiny_plan, "no_pipelining")
    plain["transformer_config"].update(hidden_dropout=0.1, attention_dropout=0.1)  # recomputed: the same masks
    full = copy.deepcopy(plain)
    full["transformer_config"].update(recompute_granularity="full", recompute_method="uniform",
                                      recompute_num_layers=1)
    runs = [launch(plan, tmp_path / name) for name, plan in (("plain", plain), ("full", full))]
    for run in runs:
        _assert_ok(run)
    assert runs[1].report["realised"]["recompute_granularity"]["realised"] == "full"
    assert micro_batch_losses(runs[0].report) == micro_batch_losses(runs[1].report)


def test_learnable_task_loss_decreases_over_20_steps(tiny_plan, tmp_path):
    plan = copy.deepcopy(tiny_plan)
    plan["training"].update(train_iters=20, report_window=[3, 20])
    plan["data"]["kind"] = "learnable"
    plan["optimizer"]["lr"] = 0.01
    plan["transformer_config"]["moe_router_force_load_balancing"] = True
    run = launch(plan, tmp_path)
    _assert_ok(run)
    losses = [s["loss"] for s in run.report["steps"]]
    assert len(losses) == 20
    assert losses[-1] < 0.5 * losses[0], losses
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    assert run.report["realised"]["moe_router_force_load_balancing"]["realised"] is True


def _single_rank(plan: dict) -> dict:
    """The tiny plan on one process (EP=1, no overlap): the cheapest full launch."""
    plan = copy.deepcopy(plan)
    plan["transformer_config"].update(expert_model_parallel_size=1,
                                      overlap_moe_expert_parallel_comm=False)
    plan["layout"].update(world_size=1, nproc_per_node=1, ep=1, dp=1, edp=1)
    plan["training"].update(global_batch_size=4, num_microbatches=2)
    plan["runtime"]["schedule"] = "no_pipelining"
    return plan


def test_realised_mismatch_names_the_field(tiny_plan, tmp_path):
    # megatron-core's TransformerConfig.__post_init__ fills recompute_modules=None in with
    # ["core_attn"] for selective recompute: a plan that leaves it implicit must not run.
    plan = _single_rank(tiny_plan)
    plan["transformer_config"].update(recompute_granularity="selective", recompute_modules=None)
    plan["runtime"]["checked_fields"] = sorted(set(plan["runtime"]["checked_fields"]) | {"recompute_modules"})
    run = launch(plan, tmp_path)
    assert run.returncode == 5, run.output[-3000:]
    assert "recompute_modules: plan None, realised ['core_attn'] (read from config)" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.report is None and "step " not in run.stdout


def test_schedule_mismatch_stops_the_run(tiny_plan, tmp_path):
    plan = _single_rank(tiny_plan)
    plan["runtime"]["schedule"] = "combined_1f1b"  # but overlap is off: megatron runs plain 1F1B
    run = launch(plan, tmp_path)
    assert run.returncode == 6, run.output[-3000:]
    assert "expects schedule 'combined_1f1b'" in run.stderr
    assert "ran 'no_pipelining'" in run.stderr
    assert "Traceback" not in run.stderr


def test_flex_deepep_gate_under_torchrun(tiny_plan, tmp_path):
    plan = copy.deepcopy(tiny_plan)
    plan["transformer_config"].update(moe_token_dispatcher_type="flex",
                                      moe_flex_dispatcher_backend="deepep")
    run = launch(plan, tmp_path)  # 2 ranks, as planned
    assert run.returncode != 0
    assert "deep_ep" in run.stderr and "moe_token_dispatcher_type: alltoall" in run.stderr
    assert "No model was built" in run.stderr
    assert run.report is None
