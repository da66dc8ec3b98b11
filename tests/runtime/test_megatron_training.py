"""Real training through Megatron-LM's own loop: `python -m moeforge.runtime.megatron` on 2 CPU ranks (gloo).

The tiny recipe (EP=2, EP overlap on) compiled for megatron-core 0.19.2, a corpus prepared with
`moeforge data prepare --tokenizer byte`, checkpoints, exact resume, SIGUSR1, and the checks that
stop a run before step 1. Nothing here is timed.
"""

from __future__ import annotations

import json

import pytest

import megatron_testlib as mt

from moeforge.compiler.rules import BY_ID

pytestmark = pytest.mark.skipif(not mt.have_megatron_training(),
                                reason="needs .venv312 with megatron-core 0.19.2 (make setup312)")

EXIT_REALISED_MISMATCH, EXIT_CONFIG_REJECTED, EXIT_CHECKPOINT_MISMATCH, EXIT_SAVED_ON_SIGNAL = 5, 4, 8, 75


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return mt.prepare_corpus(tmp_path_factory.mktemp("corpus"))


def indexed(corpus, ckpt, iters: int, interval: int, *more: str) -> tuple[str, ...]:
    return ("data.kind=indexed", f"data.paths=[{json.dumps(str(corpus))}]", "data.split=99,1,0",
            "tokenizer.type=byte",
            f"checkpoint.save={ckpt}", f"checkpoint.interval={interval}", f"training.train_iters={iters}",
            "logging.interval=1", *more)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus):
    """20 steps on the prepared corpus, a checkpoint every 10: (build dir, checkpoint dir, ranks)."""
    root = tmp_path_factory.mktemp("twenty")
    ckpt = root / "ckpt"
    build = mt.compile_tiny(root / "build", *indexed(corpus, ckpt, 20, 10), f"logging.tensorboard={root / 'tb'}",
                            "checkpoint.keep_last=1")
    return build, ckpt, mt.run(build)


def test_twenty_steps_on_a_prepared_corpus_the_loss_falls(trained):
    build, ckpt, ranks = trained
    assert ranks.returncodes == [0, 0], ranks.output[-4000:]
    report = ranks.report
    assert report["status"] == "ok" and report["entrypoint"] == "megatron-lm"
    assert report["preflight"]["mode"] == "error" and report["preflight"]["findings"] == []  # .venv312's stack
    loss = mt.losses(report)
    assert sorted(loss) == list(range(1, 21))
    first, last = sum(loss[i] for i in range(1, 6)) / 5, sum(loss[i] for i in range(16, 21)) / 5
    assert last < first - 0.5, loss  # byte-level English: the model learns it fast
    realised = report["realised"]
    assert realised["expert_model_parallel_size"]["realised"] == 2
    assert realised["overlap_moe_expert_parallel_comm"]["realised"] is True
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "20"
    assert report["checkpoint"]["save"] == str(ckpt)
    assert sorted(p.name for p in ckpt.glob("iter_*")) == ["iter_0000020"]  # keep_last: 1
    assert report["checkpoint"]["pruned"] == ["iter_0000010"]
    assert list((build.parents[2] / "tb").glob("events.out.tfevents.*")), "no TensorBoard events written"


def test_its_log_and_report_calibrate(trained):
    """The log Megatron-LM's loop wrote (the last rank prints the iteration lines; logging.interval 1) reads
    back through compiler/calibrate/megatron_log.py: every iteration, its loss as the report has it, the step
    time; the report itself carries per-step times and the steady state `moeforge calibrate` reads."""
    from moeforge.compiler.calibrate import megatron_log, runs

    build, _, ranks = trained
    log = megatron_log.read(build / "ranks.log")
    plan = json.loads((build / "plan.json").read_text())
    assert [it.iteration for it in log.iterations] == list(range(1, 21))
    assert all(it.train_iters == 20 and it.values["elapsed_ms"] > 0 for it in log.iterations)
    assert log.global_batch_size() == plan["training"]["global_batch_size"] and log.finished
    assert log.peak_memory() is None  # the CPU stand-ins report zeros: no measurement
    reported = mt.losses(ranks.report)
    # the first printed line does not reset Megatron-LM's sums, so the second averages iterations 1 and 2
    # (training.py 0.19.2:2594, should_reset = not is_first_iteration); every other line is its own iteration
    expected = {**reported, 2: (reported[1] + reported[2]) / 2}
    for it in log.iterations:
        assert it.losses["lm loss"] == pytest.approx(expected[it.iteration], rel=1e-5), it.iteration
    step_s, lines = log.step_time_s()
    assert lines == 18 and step_s > 0
    from_log = runs.from_log(build / "ranks.log", plan, "tiny-moe/cpu")
    assert from_log.step_s == step_s and from_log.kind == "megatron-log"
    report = ranks.report
    assert all(s["time_s"] > 0 for s in report["steps"]) and report["steady_state"]["steps"] == 19
    assert report["peak_memory_bytes_max"] > 0 and "ru_maxrss" in report["peak_memory_source"]
    run = runs.from_report(build / "report.json")
    assert run.step_s == report["steady_state"]["median_s"] and run.peak_source == "rss"


def test_resume_is_exact(tmp_path, corpus):
    """12 steps straight vs 6 steps, stop, resume to 12: identical losses for steps 7-12."""
    straight = mt.compile_tiny(tmp_path / "a", *indexed(corpus, tmp_path / "ck-a", 12, 6))
    a = mt.run(straight)
    assert a.returncodes == [0, 0], a.output[-4000:]

    resumed = mt.compile_tiny(tmp_path / "b", *indexed(corpus, tmp_path / "ck-b", 12, 6))
    first = mt.run(resumed, extra=["--exit-interval", "6"])
    assert first.returncodes == [0, 0], first.output[-4000:]
    assert sorted(mt.losses(first.report)) == list(range(1, 7))
    second = mt.run(resumed)
    assert second.returncodes == [0, 0], second.output[-4000:]
    assert second.report["checkpoint"]["resumed_iteration"] == 6
    assert second.report["checkpoint"]["resharded"] is None
    straight_losses, resumed_losses = mt.losses(a.report), mt.losses(second.report)
    assert sorted(resumed_losses) == list(range(7, 13))
    assert [resumed_losses[i] for i in range(7, 13)] == [straight_losses[i] for i in range(7, 13)]


def test_sigusr1_saves_a_loadable_checkpoint_and_exits_75(tmp_path, corpus):
    ckpt = tmp_path / "ck"
    build = mt.compile_tiny(tmp_path / "b", *indexed(corpus, ckpt, 500, 250))
    procs, sink, log = mt.start(build, 2)
    mt.wait_for(log, "iteration        3/", procs)
    mt.signal_ranks(procs)  # what srun does with the batch shell's USR1
    ranks = mt.finish(build, procs, sink, log)
    assert ranks.returncodes == [EXIT_SAVED_ON_SIGNAL] * 2, ranks.output[-4000:]
    assert ranks.report["status"] == "preempted"
    saved = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    assert 3 <= saved < 250
    # loadable: the same job started again resumes from it (and runs two more steps)
    again = mt.run(build, extra=["--exit-interval", str(saved + 2)])
    assert again.returncodes == [0, 0], again.output[-4000:]
    assert again.report["checkpoint"]["resumed_iteration"] == saved
    assert sorted(mt.losses(again.report)) == [saved + 1, saved + 2]


def test_a_checkpoint_of_another_model_shape_is_refused_naming_the_fields(tmp_path, trained, corpus):
    _, ckpt, first = trained
    assert first.returncodes == [0, 0]
    build = mt.compile_tiny(tmp_path / "b", *indexed(corpus, ckpt, 30, 10), "model.moe.num_experts=8",
                            "model.architecture.ffn_hidden_size=96")
    ranks = mt.run(build)
    assert ranks.returncodes == [EXIT_CHECKPOINT_MISMATCH] * 2, ranks.output[-4000:]
    assert "num_experts: checkpoint 4, this run 8" in ranks.output
    assert "ffn_hidden_size: checkpoint 128, this run 96" in ranks.output
    assert "Traceback" not in ranks.output


def test_training_longer_resumes_with_the_scheduler_knob(tmp_path, trained, corpus):
    """Issue 42 item 13: raise train_iters and resume. Megatron-LM's OptimizerParamScheduler refuses the
    checkpoint's other schedule; the refusal names checkpoint.scheduler, and with it set to plan the run goes
    on from iteration 20 to 22 with the plan's schedule (a copy of the checkpoint: the fixture's stays)."""
    import shutil

    _, saved, first = trained
    assert first.returncodes == [0, 0]
    ckpt = tmp_path / "ck"
    shutil.copytree(saved, ckpt)
    refused = mt.run(mt.compile_tiny(tmp_path / "a", *indexed(corpus, ckpt, 22, 11)))
    assert refused.returncodes == [EXIT_CHECKPOINT_MISMATCH] * 2, refused.output[-4000:]
    assert "another LR/weight-decay schedule" in refused.output and "checkpoint.scheduler: plan" in refused.output
    assert "Traceback" not in refused.output
    longer = mt.run(mt.compile_tiny(tmp_path / "b", *indexed(corpus, ckpt, 22, 11), "checkpoint.scheduler=plan"))
    assert longer.returncodes == [0, 0], longer.output[-4000:]
    assert longer.report["checkpoint"]["resumed_iteration"] == 20
    assert sorted(mt.losses(longer.report)) == [21, 22]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "22"


def test_a_changed_layout_is_refused_with_the_field_or_resharded(tmp_path, trained, corpus):
    """EP 2 -> 1: the optimizer state cannot be resharded (refused, field named); the weights can
    (with --no-load-optim the run resumes and the report says it resharded)."""
    _, ckpt, first = trained
    assert first.returncodes == [0, 0]
    build = mt.compile_tiny(tmp_path / "b", *indexed(corpus, ckpt, 22, 11), "parallelism.ep=1",
                            "moe.overlap.ep_comm=false")
    refused = mt.run(build)
    assert refused.returncodes == [EXIT_CHECKPOINT_MISMATCH] * 2, refused.output[-4000:]
    assert "expert_model_parallel_size: checkpoint 2, this run 1" in refused.output
    assert "Traceback" not in refused.output
    resharded = mt.run(build, extra=["--no-load-optim", "--no-load-rng"])
    assert resharded.returncodes == [0, 0], resharded.output[-4000:]
    assert resharded.report["checkpoint"]["resharded"] == {"expert_model_parallel_size": [2, 1]}
    assert sorted(mt.losses(resharded.report)) == [21, 22]


def test_an_mtp_layer_on_the_last_pipeline_stage_gets_the_tokens(tmp_path):
    """With PP > 1 only the first and last stages read a batch, and the last stage's tokens as well when it holds
    MTP layers, which embed the shifted tokens themselves (pretrain_gpt.py get_batch, mtp_on_this_rank): the MTP
    layer stopped on missing tokens (embedding(): argument 'indices' must be Tensor, not NoneType)."""
    build = mt.compile_tiny(tmp_path, "model.mtp_num_layers=1", "parallelism.pp=2", "parallelism.ep=1",
                            "moe.overlap.ep_comm=false", "training.train_iters=2", "logging.interval=1")
    ranks = mt.run(build)
    assert ranks.returncodes == [0, 0], ranks.output[-4000:]
    assert sorted(mt.losses(ranks.report)) == [1, 2]
    assert "mtp_1 loss:" in ranks.output  # Megatron-LM logs the MTP layer's loss beside the LM loss


def test_the_realised_check_stops_a_run_whose_model_differs_from_the_plan(tmp_path):
    build = mt.compile_tiny(tmp_path / "b", "training.train_iters=3")
    ranks = mt.run(build, extra=["--num-experts", "8", "--moe-ffn-hidden-size", "96"])
    assert ranks.returncodes == [EXIT_REALISED_MISMATCH] * 2, ranks.output[-4000:]
    assert "num_moe_experts: plan 4, Megatron-LM 8" in ranks.output
    assert "moe_ffn_hidden_size: plan 128, Megatron-LM 96" in ranks.output
    assert ranks.report is None and "iteration        1/" not in ranks.output


def test_what_megatron_core_raises_in_a_step_stops_as_one_line(tmp_path):
    """A check megatron-core makes only at its first forward (the router's, SINKHORN_NO_AUX_LOSS: the compiler
    refuses it, so plan and arguments are edited by hand) stops every rank with the runtime's one line: the
    step, megatron-core's message and where it was raised, not a traceback out of Megatron-LM's loop."""
    build = mt.compile_tiny(tmp_path / "b", "training.train_iters=2", "model.moe.aux_loss_coeff=0.01")
    plan = json.loads((build / "plan.json").read_text())
    plan["transformer_config"]["moe_router_load_balancing_type"] = "sinkhorn"
    (build / "plan.json").write_text(json.dumps(plan))
    ranks = mt.run(build, extra=["--moe-router-load-balancing-type", "sinkhorn"])
    assert ranks.returncodes == [EXIT_CONFIG_REJECTED] * 2, ranks.output[-4000:]
    for rank in (0, 1):
        assert (f"moeforge.runtime.megatron[rank {rank}]: megatron-core rejected the plan: training step 1: AssertionError: "
                f"{BY_ID['SINKHORN_NO_AUX_LOSS'].megatron_message} (router.py:") in ranks.output, ranks.output[-4000:]
    assert "Traceback" not in ranks.output and ranks.report is None


def test_strict_refuses_a_planned_value_megatron_lm_rewrites(tmp_path):
    """validate_args turns sequence parallelism off at TP=1; a plan that states it on is refused
    under --strict before anything is built."""
    build = mt.compile_tiny(tmp_path / "b", "training.train_iters=3")
    plan = json.loads((build / "plan.json").read_text())
    plan["transformer_config"]["sequence_parallel"] = True
    (build / "plan.json").write_text(json.dumps(plan))
    ranks = mt.run(build, extra=["--sequence-parallel"], flags=["--strict"])
    assert ranks.returncodes == [EXIT_CONFIG_REJECTED] * 2, ranks.output[-4000:]
    assert "sequence_parallel True -> False" in ranks.output


def test_an_unset_environment_variable_in_a_data_path_is_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("MOEFORGE_TEST_DATA_ROOT", raising=False)
    build = mt.compile_tiny(tmp_path / "b", "data.kind=indexed", "tokenizer.type=byte",
                            'data.paths=["${MOEFORGE_TEST_DATA_ROOT}/corpus_text_document"]')
    ranks = mt.run(build)
    assert ranks.returncodes == [2, 2], ranks.output[-4000:]
    assert "${MOEFORGE_TEST_DATA_ROOT}, which is not set" in ranks.output


def test_a_split_that_gets_no_documents_is_an_error_not_a_hang(tmp_path, corpus):
    """400 documents and Megatron-LM's default split 969,30,1: the test split would get none and
    megatron-core would add empty epochs forever."""
    build = mt.compile_tiny(tmp_path / "b", "data.kind=indexed", "tokenizer.type=byte",
                            f"data.paths=[{json.dumps(str(corpus))}]", "data.split=969,30,1")
    ranks = mt.run(build)
    assert ranks.returncodes == [2, 2], ranks.output[-4000:]
    assert "gives the test split no documents" in ranks.output and 'data.split: "969,30,0"' in ranks.output


def test_a_dataset_made_with_another_tokenizer_is_refused(tmp_path, corpus):
    """PREFIX.json (written by `moeforge data prepare`) says which tokenizer made the data."""
    import shutil

    copy = tmp_path / "data" / corpus.name
    copy.parent.mkdir()
    for suffix in (".bin", ".idx", ".json"):
        shutil.copy(f"{corpus}{suffix}", f"{copy}{suffix}")
    meta = json.loads(copy.with_name(copy.name + ".json").read_text())
    meta["tokenizer"].update(type="huggingface", eod_id=151643)
    copy.with_name(copy.name + ".json").write_text(json.dumps(meta))
    build = mt.compile_tiny(tmp_path / "b", "data.kind=indexed", "tokenizer.type=byte", "data.split=99,1,0",
                            f"data.paths=[{json.dumps(str(copy))}]")
    ranks = mt.run(build)
    assert ranks.returncodes == [2, 2], ranks.output[-4000:]
    assert "was tokenized with the huggingface tokenizer" in ranks.output


def test_a_logger_that_does_not_import_stops_the_run_before_anything_is_built(tmp_path):
    """wandb is never a moeforge dependency: asking for it without it installed is a clear error."""
    build = mt.compile_tiny(tmp_path / "b", "training.train_iters=3", "logging.wandb=moeforge-test")
    ranks = mt.run(build)
    if "wandb does not import" not in ranks.output:
        pytest.skip("wandb is installed in .venv312")
    assert ranks.returncodes == [3, 3], ranks.output[-4000:]
    assert "pip install wandb, or unset logging.wandb" in ranks.output
