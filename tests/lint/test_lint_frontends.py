"""lint-config per front-end: inference, stated front-end, defaults, rewrites, rule filtering.

Regression for the issue: an interleaved PP=2 configuration (PP=2, VPP=2, overlap_p2p_comm unset)
was reported as PP_INTERLEAVED_WITHOUT_P2P_OVERLAP_NEEDS_PP3 for every front-end, although
Megatron-LM defaults overlap_p2p_comm to True, Megatron-Bridge sets it for PP > 1 with VPP, and
megatron-core's TransformerConfig (0.16.1 and 0.19.2) accepts the configuration either way.
"""
from __future__ import annotations

import json
import warnings

import pytest

from moeforge.compiler.lint.config_lint import UnusableInput, lint_config, lint_mapping, main_lint_config

# no Transformer Engine: Megatron-LM's default gradient accumulation fusion would need APEX (GRAD_ACC_FUSION_NEEDS_APEX)
INTERLEAVED_PP2 = {"num_layers": 8, "hidden_size": 64, "num_attention_heads": 8, "bf16": True,
                   "gradient_accumulation_fusion": False,
                   "pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,
                   "world_size": 8, "versions": {"megatron_core": "0.16.1", "torch": "2.9.0",
                                                 "transformer_engine": None}}


def errors(data, frontend=None):
    return sorted(f.rule for f in lint_mapping(data, frontend=frontend) if f.severity == "error")


@pytest.mark.parametrize("frontend", ["megatron-lm", "bridge", "megatron-core"])
def test_interleaved_pp2_without_p2p_setting_is_clean(frontend):
    assert errors(INTERLEAVED_PP2, frontend) == []


def test_interleaved_pp2_p2p_off_is_a_megatron_lm_error_only():
    data = {**INTERLEAVED_PP2, "overlap_p2p_comm": False}
    assert errors(data, "megatron-lm") == ["PP_INTERLEAVED_WITHOUT_P2P_OVERLAP_NEEDS_PP3"]
    assert errors(data, "megatron-core") == []   # megatron-core accepts it (checked live below)
    assert errors(data, "bridge") == []          # Bridge keeps a user's False; megatron-core accepts it
    assert errors({**data, "pipeline_model_parallel_size": 4}, "megatron-lm") == []


def test_interleaved_pp2_megatron_core_016_accepts_it():
    torch = pytest.importorskip("torch")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    for p2p in (None, False):
        kw = {k: v for k, v in INTERLEAVED_PP2.items() if k not in ("versions", "world_size")}
        if p2p is not None:
            kw["overlap_p2p_comm"] = p2p
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tc.TransformerConfig(pipeline_dtype=torch.bfloat16, **kw)  # no exception


def test_bridge_sets_p2p_overlap_and_says_so():
    cfg, findings = lint_config(INTERLEAVED_PP2, frontend="bridge")
    assert cfg.env["overlap_p2p_comm"] is True
    assert ("overlap_p2p_comm", False, True, "Megatron-Bridge CommOverlapConfig: PP > 1 with VPP") in cfg.rewrites
    cfg, _ = lint_config(INTERLEAVED_PP2, frontend="megatron-lm")
    assert cfg.env["overlap_p2p_comm"] is True and not cfg.rewrites   # Megatron-LM's own default
    cfg, _ = lint_config(INTERLEAVED_PP2, frontend="megatron-core")
    assert cfg.env["overlap_p2p_comm"] is False


def test_megatron_lm_turns_p2p_overlap_off_without_vpp():
    data = {k: v for k, v in INTERLEAVED_PP2.items() if k != "virtual_pipeline_model_parallel_size"}
    cfg, findings = lint_config(data, frontend="megatron-lm")
    assert cfg.env["overlap_p2p_comm"] is False
    assert "PP_OVERLAP_NEEDS_VPP" not in {f.rule for f in findings}   # its own default: nothing to report
    cfg, findings = lint_config({**data, "overlap_p2p_comm": True}, frontend="megatron-lm")
    assert "PP_OVERLAP_NEEDS_VPP" in {f.rule for f in findings}       # asked for, silently dropped


# ----------------------------------------------------------------------------- rule filtering

def test_rules_fire_only_for_their_front_end():
    sp = {**INTERLEAVED_PP2, "sequence_parallel": True}
    by = {fe: {f.rule: f.severity for f in lint_mapping(sp, frontend=fe)}
          for fe in ("megatron-core", "megatron-lm", "bridge")}
    assert by["megatron-core"].get("LAYOUT_SP_NEEDS_TP") == "error"
    assert by["megatron-lm"].get("LAYOUT_SP_WITHOUT_TP_DROPPED_BY_MEGATRON_LM") == "warning"
    assert by["bridge"].get("LAYOUT_SP_WITHOUT_TP_DROPPED_BY_BRIDGE") == "warning"
    assert "LAYOUT_SP_NEEDS_TP" not in by["megatron-lm"] and "LAYOUT_SP_NEEDS_TP" not in by["bridge"]
    assert "LAYOUT_SP_WITHOUT_TP_DROPPED_BY_BRIDGE" not in by["megatron-lm"]
    tpo = {**INTERLEAVED_PP2, "tp_comm_overlap": True}
    assert "TP_OVERLAP_NEEDS_TP" in {f.rule for f in lint_mapping(tpo, frontend="bridge")}
    assert "TP_OVERLAP_NEEDS_TP" not in {f.rule for f in lint_mapping(tpo, frontend="megatron-core")}
    assert errors(tpo, "megatron-lm") == ["TP_OVERLAP_NEEDS_SP_IN_MEGATRON_LM"]


def test_etp_default_differs_only_for_bridge():
    data = {**INTERLEAVED_PP2, "tensor_model_parallel_size": 2, "sequence_parallel": True,
            "expert_model_parallel_size": 2, "num_moe_experts": 8, "add_bias_linear": True}
    assert "LAYOUT_MOE_BIAS_NEEDS_ETP1" in errors(data, "megatron-core")   # ETP = TP = 2
    bridge = lint_mapping(data, frontend="bridge")
    assert "LAYOUT_MOE_BIAS_NEEDS_ETP1" not in {f.rule for f in bridge}     # Bridge sets ETP = 1
    assert "LAYOUT_ETP_DEFAULT_DIFFERS" in {f.rule for f in bridge}


def test_one_finding_for_a_check_two_front_end_layers_make():
    data = {**INTERLEAVED_PP2, "versions": {"megatron_core": "0.19.2"}, "pipeline_model_parallel_size": 1,
            "virtual_pipeline_model_parallel_size": None, "expert_model_parallel_size": 2, "num_moe_experts": 8,
            "moe_token_dispatcher_type": "alltoall", "overlap_moe_expert_parallel_comm": True,
            "recompute_granularity": "selective", "recompute_modules": ["moe"]}
    rules = [f.rule for f in lint_mapping(data, frontend="bridge")]
    assert rules.count("EP_OVERLAP_NO_MOE_RECOMPUTE_MCORE") == 1 and "EP_OVERLAP_NO_MOE_RECOMPUTE" not in rules
    old = {**data, "versions": {"megatron_core": "0.16.1"}}
    assert "EP_OVERLAP_NO_MOE_RECOMPUTE" in errors(old, "bridge")
    assert "EP_OVERLAP_NO_MOE_RECOMPUTE" not in errors(old, "megatron-core")


# ----------------------------------------------------------------------------- inference

@pytest.mark.parametrize("data,frontend,because", [
    ({"tensor_model_parallel_size": 2}, "megatron-core", "only megatron-core field names"),
    ({"num_experts": 8, "expert_model_parallel_size": 2}, "megatron-lm", "num_experts"),
    ({"tensor_model_parallel_size": 1, "transformer_impl": "local", "recompute_activations": True},
     "megatron-lm", "recompute_activations"),
    ({"comm_overlap.overlap_p2p_comm": True}, "bridge", "comm_overlap.overlap_p2p_comm"),
    ({"model": {"tensor_model_parallel_size": 2}, "comm_overlap": {"tp_comm_overlap": False}}, "bridge", "model"),
    ({"mtp_enabled": True, "mtp_num_layers": 1}, "bridge", "mtp_enabled"),
    ({"frontend": "bridge", "num_experts": 8}, "bridge", "given: frontend key"),
    ({"micro_batch_size": 1, "global_batch_size": 8, "seq_length": 4096}, "megatron-core", "only"),
])
def test_frontend_inference(data, frontend, because):
    cfg, _ = lint_config(data)
    assert cfg.frontend == frontend
    assert because in cfg.frontend_reason


def test_cli_option_wins_over_the_key():
    cfg, _ = lint_config({"frontend": "bridge"}, frontend="megatron-lm")
    assert (cfg.frontend, cfg.frontend_reason) == ("megatron-lm", "given: --frontend")
    with pytest.raises(UnusableInput):
        lint_config({"frontend": "nemo"})


def test_megatron_lm_dests_are_read_as_megatron_core_fields():
    data = {**INTERLEAVED_PP2, "num_experts": 6, "expert_model_parallel_size": 4, "world_size": 8}
    data.pop("virtual_pipeline_model_parallel_size")
    cfg, findings = lint_config(data)
    assert cfg.frontend == "megatron-lm" and cfg.env["num_moe_experts"] == 6
    assert "LAYOUT_EXPERTS_DIVISIBLE_BY_EP" in {f.rule for f in findings}
    assert not [f for f in findings if f.rule == "LINT_UNKNOWN_FIELD"]


def test_nested_bridge_layout_is_flattened():
    data = {"model": {k: v for k, v in INTERLEAVED_PP2.items() if k not in ("versions", "world_size")},
            "comm_overlap": {"overlap_p2p_comm": False}, "world_size": 8, "versions": INTERLEAVED_PP2["versions"]}
    cfg, findings = lint_config(data)
    assert cfg.frontend == "bridge" and cfg.env["overlap_p2p_comm"] is False   # the user's value wins
    assert cfg.env["pipeline_model_parallel_size"] == 2
    assert not [f for f in findings if f.severity == "error" or f.rule == "LINT_UNKNOWN_FIELD"]


# ----------------------------------------------------------------------------- output

def _run(tmp_path, text, *argv):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return main_lint_config([str(path), *argv])


PP2_TEXT = """\
num_layers: 8
hidden_size: 64
num_attention_heads: 8
pipeline_model_parallel_size: 2
virtual_pipeline_model_parallel_size: 2
num_experts: 8
expert_model_parallel_size: 2
"""


def test_text_output_states_the_front_end(tmp_path, capsys):
    assert _run(tmp_path, PP2_TEXT) == 0
    out = capsys.readouterr().out
    assert "front-end megatron-lm (inferred: Megatron-LM argument names" in out and "num_experts" in out
    assert _run(tmp_path, PP2_TEXT, "--frontend", "bridge") == 0
    out = capsys.readouterr().out
    assert "front-end bridge (given: --frontend)" in out
    assert "bridge sets overlap_p2p_comm = True (was False): Megatron-Bridge CommOverlapConfig: PP > 1 with VPP" in out


def test_json_output_states_the_front_end(tmp_path, capsys):
    assert _run(tmp_path, PP2_TEXT + "overlap_p2p_comm: false\n", "--format", "json") == 1
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list) and data[0]["severity"] == "error"
    head = data[-1]
    assert head["rule"] == "LINT_FRONTEND" and head["severity"] == "info"
    assert head["frontend"] == "megatron-lm" and "num_experts" in head["frontend_reason"]
    assert {d["frontend"] for d in data} == {"megatron-lm"}
    assert [d["rule"] for d in data if d["severity"] == "error"] == ["PP_INTERLEAVED_WITHOUT_P2P_OVERLAP_NEEDS_PP3"]
    assert _run(tmp_path, "frontend: megatron-core\n" + PP2_TEXT + "overlap_p2p_comm: false\n",
                "--format", "json", "--frontend", "bridge") == 0
    data = json.loads(capsys.readouterr().out)
    assert data[-1]["frontend"] == "bridge" and data[-1]["frontend_reason"] == "given: --frontend"
    assert _run(tmp_path, "frontend: megatron-core\n" + PP2_TEXT, "--format", "json") == 0
    rewrites = json.loads(capsys.readouterr().out)[-1]
    assert rewrites["frontend"] == "megatron-core" and rewrites["rewrites"] == []
