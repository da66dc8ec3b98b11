"""moeforge's runtime on megatron-core 0.19.2 (.venv312), 2 CPU ranks: EP overlap does not change the math.

The same check as tests/e2e/test_tiny_recipe.py (which runs megatron-core 0.16.1), on the tiny
recipe compiled for a 0.19.2 platform (field names of that release) and launched through its
own torchrun.sh with .venv312's python first on PATH.
"""
import json
import os
import re
import subprocess
import sys

import pytest

from fidelity_testlib import READY, ROOT, SKIP_REASON, VENV312

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not READY, reason=SKIP_REASON)]


def _compile_and_run(out, *overrides: str) -> dict:
    sets = [a for o in ("platform.software.megatron_core=0.19.2", *overrides) for a in ("--set", o)]
    done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "tiny-moe/cpu", "--out", str(out), *sets],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    build = out / "tiny-moe" / "cpu"
    env = {"PATH": f"{VENV312 / 'bin'}:/usr/bin:/bin", "MOEFORGE_ROOT": str(ROOT), "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore", "HOME": str(out)}
    ran = subprocess.run(["bash", str(build / "torchrun.sh")], cwd=out, env=env, capture_output=True, text=True,
                         timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    report = json.loads((build / "report.json").read_text())
    assert report["versions"]["megatron_core"].startswith("0.19.2")
    return report


def test_ep_overlap_does_not_change_the_math_on_mcore_019(tmp_path):
    on = _compile_and_run(tmp_path / "on")
    off = _compile_and_run(tmp_path / "off", "moe.overlap.ep_comm=false")
    assert on["schedule_taken"] == "combined_1f1b" and on["overlap_schedule_ran"] is True
    assert off["schedule_taken"] != "combined_1f1b" and off["overlap_schedule_ran"] is False
    for report in (on, off):
        assert report["world_size"] == 2 and report["ep"] == 2
        assert report["realised"]["moe_token_dispatcher_type"]["realised"] == "alltoall"
    losses_on = [s["micro_batch_losses"] for s in on["steps"]]
    assert len(losses_on) == 4 and all(len(mb) == 2 for mb in losses_on)
    assert losses_on == [s["micro_batch_losses"] for s in off["steps"]]


def test_mla_without_query_lora_dry_runs_with_the_te_query_norm(tmp_path):
    """megatron-core 0.19 builds MLA's query projection without a query LoRA as a fused norm + linear, which only
    Transformer Engine has, and refuses the local spec's separate query norm: the dry run (--local-spec) failed on
    DeepSeek-V2-Lite-like plans. Its stand-in holds TE's parameters; counted here in closed form against the same
    plan with a query LoRA (local spec: the q down projection sharded over TP)."""
    paths = []
    for name, sets in (("lora", []), ("no-lora", ["--set", "model.architecture.q_lora_rank=null"])):
        done = subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", "deepseek-v3/h100-bf16", *sets, "--out",
                               str(tmp_path / name)], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stdout + done.stderr
        paths.append(tmp_path / name / "deepseek-v3" / "h100-bf16" / "plan.json")
    ran = subprocess.run([str(VENV312 / "bin" / "python"), "-m", "moeforge.runtime.dryrun", *map(str, paths), "--rank", "0",
                          "--local-spec"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    lora, plain = json.loads(ran.stdout)["plans"]
    assert plain.get("error") is None and plain["megatron_core"].startswith("0.19")
    tc = json.loads(paths[0].read_text())["transformer_config"]
    h, ql, tp, a = tc["hidden_size"], tc["q_lora_rank"], tc["tensor_model_parallel_size"], tc["num_attention_heads"]
    q_out = a * (tc["qk_head_dim"] + tc["qk_pos_emb_head_dim"]) // tp
    with_lora = h * ql // tp + ql + ql * q_out  # down projection, q norm, up projection
    without = h * q_out + h  # linear_q_proj with its fused norm over the hidden size
    layers = len(plain["decoder_layers"]["numbers"])
    assert plain["parameters"]["dense"] - lora["parameters"]["dense"] == layers * (without - with_lora)
    assert plain["parameters"]["expert"] == lora["parameters"]["expert"]
    fused = [s for s in plain["substitutions"] if s["field"] == "spec.column_parallel_layer_norm_linear"]
    assert len(fused) == 1 and "linear_q_proj" in fused[0]["why"]


def test_layer_patterns_megatron_core_refuses_stop_where_the_catalogue_refuses(tmp_path):
    """Two checks megatron-core makes only when it builds the layer specs, each met by a rule (the plans are edited
    by hand: the compiler refuses them): a per-layer MoE pattern one entry short of the layers
    (MOE_LAYER_FREQ_ONE_ENTRY_PER_LAYER), and Qwen3-Next with a Gated DeltaNet last layer, whose spec its MTP layer
    takes (MTP_NEEDS_SOFTMAX_LAST_LAYER). Each dry run stops with its rule's megatron text, as one line."""
    from moeforge.compiler.rules import BY_ID

    cases = []
    for recipe, rule in (("qwen3-30b-a3b/h100-bf16", "MOE_LAYER_FREQ_ONE_ENTRY_PER_LAYER"),
                         ("qwen3-next-80b-a3b/h100-bf16", "MTP_NEEDS_SOFTMAX_LAST_LAYER")):
        plan = json.loads((ROOT / "tests" / "golden" / recipe / "plan.json").read_text())
        tc = plan["transformer_config"]
        if rule == "MOE_LAYER_FREQ_ONE_ENTRY_PER_LAYER":
            tc["moe_layer_freq"] = [1] * (tc["num_layers"] - 1)
        else:
            assert tc["mtp_num_layers"] == 1
            tc["linear_attention_freq"] = [1] * tc["num_layers"]
        path = tmp_path / f"{rule}.plan.json"
        path.write_text(json.dumps(plan))
        cases.append((path, rule))
    for path, rule in cases:
        ran = subprocess.run([str(VENV312 / "bin" / "python"), "-m", "moeforge.runtime.dryrun", str(path), "--local-spec"],
                             cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})
        assert ran.returncode == 4, ran.stdout[-2000:] + ran.stderr[-3000:]
        assert re.search(r"moeforge\.runtime\.dryrun: megatron-core rejected the plan: (building rank 0 of \S+|GPTModel "
                         r"construction): AssertionError: ", ran.stderr), ran.stderr[-3000:]
        assert BY_ID[rule].megatron_message.split("{")[0] in ran.stderr and "Traceback" not in ran.stderr, \
            ran.stderr[-3000:]
