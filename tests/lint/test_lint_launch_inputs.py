"""lint-config reads what `moeforge import` reads: Megatron-LM names in any spelling, launch scripts, stdin JSON."""
from __future__ import annotations

import io
import json

from moeforge.compiler.lint.config_lint import lint_config, lint_text, main_lint_config, parse

HEAD = 'gpu: H100\nversions: {megatron_core: "0.19.2", transformer_engine: "2.12.0", torch: "2.9.0"}\n'


def _cfg(text):
    data, lines = parse(text, "cfg.yaml")
    return lint_config(data, lines=lines)


def test_megatron_lm_spellings_read_as_fields():
    cfg, findings = _cfg(HEAD + "num-layers: 4\n--num-experts: 8\n--no-masked-softmax-fusion: true\n"
                         "disable_bias_linear: true\n--fp8-format: e4m3\naccumulate-allreduce-grads-in-fp32: true\n")
    env = cfg.env
    assert env["num_layers"] == 4 and env["num_moe_experts"] == 8
    assert env["masked_softmax_fusion"] is False and env["add_bias_linear"] is False
    assert env["fp8"] == "e4m3" and env["grad_reduce_in_fp32"] is True
    assert env["gpu_product"] == "H100" and env["gpu_major"] == 9
    assert not [f for f in findings if f.rule == "LINT_UNKNOWN_FIELD"]


def test_launch_only_arguments_get_a_note_not_remove_it():
    findings = lint_text(HEAD + "data_path: [/d/x]\ntokenizer_type: HuggingFaceTokenizer\nsave: /ckpt\n"
                         "save_interval: 10\ntokenizer_typ: x\n")
    note = [f for f in findings if f.rule == "LINT_LAUNCH_ONLY"]
    assert note and {"data_path", "tokenizer_type"} <= set(note[0].fields) and note[0].severity == "info"
    unknown = [f for f in findings if f.rule == "LINT_UNKNOWN_FIELD"]
    assert [list(f.fields) for f in unknown] == [["tokenizer_typ"]] and "tokenizer_type" in unknown[0].message


def test_every_type_problem_at_once_with_its_line(tmp_path, capsys):
    path = tmp_path / "cfg.yaml"
    path.write_text(HEAD + "tensor_model_parallel_size: two\nnum_layers: 4\nbf16: 'yes'\n")
    assert main_lint_config([str(path)]) == 2
    err = capsys.readouterr().err
    assert "2 values of the wrong type" in err
    assert "line 3: tensor_model_parallel_size: expected an integer" in err
    assert "line 5: bf16: expected true or false" in err


def test_json_on_stdin(monkeypatch, capsys):
    text = json.dumps({"gpu": "H100", "--num-experts": 8, "expert-model-parallel-size": 2,
                       "moe_token_dispatcher_type": "alltoall"}, indent="\t")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main_lint_config(["-", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_launch_command_line_is_linted():
    text = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
            "--num-experts 8 --expert-model-parallel-size 8 --tensor-model-parallel-size 2 --bf16 "
            "--overlap-moe-expert-parallel-comm --moe-token-dispatcher-type alltoall --pipeline-model-parallel-size 2 "
            "--data-path /d/x --made-up-flag  # on H100\n")
    findings = lint_text(text, "launch.sh")
    rules = {f.rule for f in findings}
    assert "EP_OVERLAP_NEEDS_VPP" in rules
    assert any(f.rule == "LINT_UNKNOWN_FIELD" and list(f.fields) == ["--made-up-flag"] for f in findings)
