"""Regression tests for what megatron-lm.args used to get wrong (issue: faithful to Megatron).

Each defect once made Megatron-LM build a different model than the plan, or refuse the launch.
Megatron-LM's own parser and validate_args judge the same files in tests/fidelity (.venv312);
these checks need no megatron and run everywhere.
"""
import json
import re
import shlex
from pathlib import Path

import pytest

from moeforge.compiler.commands.check import recipe_files
from moeforge.compiler.targets.emit import render
from moeforge.compiler.driver import load, resolve
from moeforge.compiler.targets.plan import build

ROOT = Path(__file__).resolve().parents[2]


def _compiled():
    out = []
    for path in recipe_files([ROOT / "recipes"]):
        r = resolve(load(path))
        plan = build(r)
        files = render(plan, r.composed.data, "build/x")
        args = {}
        for line in files["megatron-lm.args"].splitlines():
            if line and not line.startswith("#"):
                flag, *values = shlex.split(line)
                args[flag] = values
        out.append(pytest.param(plan, args, files, id=r.composed.recipe_id))
    return out


COMPILED = _compiled()


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_position_embedding_is_stated(plan, args, files):
    """Megatron-LM defaults to a learned absolute position table: RoPE must be asked for."""
    assert args["--position-embedding-type"] == [plan["model"]["position_embedding_type"]]
    assert plan["model"]["position_embedding_type"] in ("rope", "yarn")


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_dropout_and_norm_epsilon_match_the_plan(plan, args, files):
    """Megatron-LM's defaults are dropout 0.1 and epsilon 1e-5: a different value must be written."""
    tc = plan["transformer_config"]
    for field, flag, lm_default in (("hidden_dropout", "--hidden-dropout", 0.1),
                                    ("attention_dropout", "--attention-dropout", 0.1),
                                    ("layernorm_epsilon", "--norm-epsilon", 1e-5)):
        assert field in tc, f"the plan does not state {field}"
        if tc[field] == lm_default:
            assert flag not in args
        else:
            assert float(args[flag][0]) == tc[field]


def test_catalogue_models_state_their_dropout_and_epsilon():
    by_id = {p.id: p.values for p in COMPILED}
    qwen = by_id["qwen3-30b-a3b/h100-bf16"][0]["transformer_config"]
    dsv3 = by_id["deepseek-v3/h100-bf16"][0]["transformer_config"]
    for tc in (qwen, dsv3):
        assert tc["hidden_dropout"] == tc["attention_dropout"] == 0.0
        assert tc["layernorm_epsilon"] == 1e-6


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_optimizer_and_grad_reduce_are_emitted(plan, args, files):
    opt, ddp = plan["optimizer"], plan["ddp_config"]
    assert float(args.get("--weight-decay", ["0.01"])[0]) == opt["weight_decay"]
    assert float(args.get("--clip-grad", ["1.0"])[0]) == opt["clip_grad"]
    if plan["transformer_config"].get("bf16"):  # Megatron-LM reduces BF16 gradients in FP32 unless told
        assert ("--grad-reduce-in-bf16" in args) == (not ddp["grad_reduce_in_fp32"])
    else:
        assert ("--accumulate-allreduce-grads-in-fp32" in args) == ddp["grad_reduce_in_fp32"]


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_flex_backend_only_with_flex(plan, args, files):
    tc = plan["transformer_config"]
    if tc["moe_token_dispatcher_type"] != "flex":
        assert "--moe-flex-dispatcher-backend" not in args
        assert "moe_flex_dispatcher_backend" not in tc
    else:
        assert args.get("--moe-flex-dispatcher-backend", ["deepep"]) == [tc["moe_flex_dispatcher_backend"]]


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_te_rng_tracker_has_its_flag(plan, args, files):
    assert "# not written: use_te_rng_tracker" not in files["megatron-lm.args"]
    assert ("--te-rng-tracker" in args) == bool(plan["transformer_config"].get("use_te_rng_tracker"))


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_param_gather_overlap_only_with_grad_reduce_overlap(plan, args, files):
    """validate_args: 'Must use --overlap-param-gather with --overlap-grad-reduce'."""
    if "--overlap-param-gather" in args:
        assert "--overlap-grad-reduce" in args


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_layout_string_and_virtual_stages_are_not_both_given(plan, args, files):
    assert not ("--pipeline-model-parallel-layout" in args and "--num-virtual-stages-per-pipeline-rank" in args)


@pytest.mark.parametrize("plan,args,files", COMPILED)
def test_every_plan_field_is_written_or_explained(plan, args, files):
    """Nothing the plan holds is dropped without a comment line saying why."""
    from moeforge.compiler.targets.megatron_args import arguments

    written, notes = arguments(plan)
    assert all(": " in note for note in notes)
    for note in notes:
        assert f"# not written: {note}" in files["megatron-lm.args"]


def test_the_param_gather_rule_is_an_error_no_preference_can_break():
    from moeforge.compiler.rules import BY_ID

    rule = BY_ID["DP_PARAM_GATHER_NEEDS_GRAD_REDUCE"]
    assert rule.severity == "error" and rule.origin == "megatron-lm"
    # Megatron-Bridge's DeepSeek-V3 H100 recipe turns grad-reduce overlap off; param-gather
    # overlap, once chosen by a preference, must now follow it off
    r = resolve(load("deepseek-v3/h100-bf16"))
    assert r.env["overlap_grad_reduce"] is False and r.env["overlap_param_gather"] is False
    assert r.decisions["overlap_param_gather"].rule == "DP_PARAM_GATHER_NEEDS_GRAD_REDUCE"


def test_model_facts_reach_the_plan_and_the_arguments():
    """Architecture facts the model schema could not state before (YaRN, partial RoPE, sinks,
    sliding windows, output gate, init std, router details) now reach every output."""
    by_id = {p.id: p.values for p in COMPILED}
    plan, args, _ = by_id["gpt-oss-120b/h100-bf16"]
    tc = plan["transformer_config"]
    assert plan["model"]["position_embedding_type"] == "yarn" and args["--position-embedding-type"] == ["yarn"]
    assert plan["config_attributes"]["yarn_rotary_scaling_factor"] == 32.0 and args["--rotary-scaling-factor"] == ["32.0"]
    assert tc["activation_func"] == "quick_gelu" and "--quick-geglu" in args
    assert tc["softmax_type"] == "learnable" and args["--softmax-type"] == ["learnable"]
    assert tc["window_size"] == [127, 0] and args["--window-size"] == ["127,0"]
    assert tc["glu_linear_offset"] == 1.0 and tc["activation_func_clamp_value"] == 7.0
    plan, args, _ = by_id["qwen3-next-80b-a3b/h100-bf16"]
    tc = plan["transformer_config"]
    assert plan["model"]["rotary_percent"] == 0.25 and args["--rotary-percent"] == ["0.25"]
    assert tc["attention_output_gate"] is True and "--attention-output-gate" in args
    assert tc["experimental_attention_variant"] == "gated_delta_net"
    plan, args, _ = by_id["deepseek-v3/h100-bf16"]
    tc = plan["transformer_config"]
    assert tc["init_method_std"] == 0.006 and args["--init-method-std"] == ["0.006"]
    assert tc["rope_type"] == "yarn" and tc["rotary_scaling_factor"] == 40 and tc["mscale_all_dim"] == 1.0
    assert tc["moe_router_pre_softmax"] is True and tc["moe_router_bias_update_rate"] == 0.001
    assert tc["moe_router_num_groups"] == 8 and tc["moe_router_group_topk"] == 4
    assert args["--moe-layer-freq"] == ["([0]*3+[1]*58)"]


def test_an_unstated_mlp_width_is_megatron_cores_not_validate_args_swiglu_width(tmp_path):
    """A model without ffn_hidden_size is 4 x hidden to megatron-core (the runtime, Bridge); validate_args would
    make a SwiGLU MLP 2/3 as wide (found importing Megatron-LM's op-fuser functional test), so the plan states
    the width, every front-end writes it, and the estimates read it (plan-layout failed with KeyError on such a
    document, found planning minimal model documents)."""
    import shutil

    import yaml

    from moeforge.compiler.targets.bridge_overrides import bridge_overrides
    from moeforge.compiler.targets.megatron_args import arguments
    from moeforge.compiler.estimate import memory, steptime

    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    doc_path = root / "models" / "qwen3-30b-a3b.yaml"
    doc = yaml.safe_load(doc_path.read_text())
    del doc["architecture"]["ffn_hidden_size"]
    doc_path.write_text(yaml.safe_dump(doc))
    plan = build(resolve(load("qwen3-30b-a3b/h100-bf16", (), root)))
    tc = plan["transformer_config"]
    assert tc["activation_func"] == "silu" and tc["gated_linear_unit"]
    assert tc["ffn_hidden_size"] == 4 * tc["hidden_size"]
    assert dict(arguments(plan)[0])["--ffn-hidden-size"] == [str(4 * tc["hidden_size"])]
    assert dict(bridge_overrides(plan)[0])["model.ffn_hidden_size"] == str(4 * tc["hidden_size"])
    assert steptime.estimate(plan).total_s > 0 and memory.peak(plan)[0].total > 0


def test_a_yarn_model_states_the_yarn_attributes_it_leaves_unset(tmp_path):
    """GPTModel reads the yarn_* attributes off the config with no default (moeforge's runtime failed to build a
    YaRN model whose document leaves them unset), Megatron-LM fills in YarnRotaryEmbedding's defaults and Bridge's
    provider leaves None: the plan states those defaults, so every front-end builds the same rotary table."""
    import shutil

    import yaml

    from moeforge.compiler.knobs import table as K
    from moeforge.compiler.targets.bridge_overrides import bridge_overrides
    from moeforge.compiler.targets.megatron_args import arguments

    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    doc_path = root / "models" / "gpt-oss-120b.yaml"
    doc = yaml.safe_load(doc_path.read_text())
    doc["architecture"] = {k: v for k, v in doc["architecture"].items() if not k.startswith("yarn_")}
    doc_path.write_text(yaml.safe_dump(doc))
    plan = build(resolve(load("gpt-oss-120b/h100-bf16", (), root)))
    assert plan["config_attributes"] == K.YARN_DEFAULTS
    written = dict(arguments(plan)[0])  # flags at Megatron-LM's own default (--rotary-scaling-factor 1.0) are not
    assert written["--yarn-original-max-position-embeddings"] == ["4096"] and written["--yarn-beta-fast"] == ["32.0"]
    overrides = dict(bridge_overrides(plan)[0])
    assert {name: overrides[f"model.{name}"] for name in K.YARN_DEFAULTS} == {
        name: json.dumps(value) for name, value in K.YARN_DEFAULTS.items()}


def test_mla_fields_without_mla_are_not_emitted(tmp_path):
    """A model document that turns MLA off but keeps its latent sizes: the sizes are MLATransformerConfig's
    alone (inert to Megatron-LM and Bridge without MLA), and moeforge's runtime refused the plan that stated them
    ("transformer_config fields not present"); found dry-running plan-layout winners of such documents."""
    import shutil

    import yaml

    from moeforge.compiler.knobs import table as K
    from moeforge.compiler.targets.bridge_overrides import bridge_overrides
    from moeforge.compiler.targets.megatron_args import arguments

    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    doc_path = root / "models" / "deepseek-v3.yaml"
    doc = yaml.safe_load(doc_path.read_text())
    doc["architecture"]["multi_latent_attention"] = False
    assert doc["architecture"]["kv_lora_rank"] and doc["architecture"]["q_lora_rank"]
    doc_path.write_text(yaml.safe_dump(doc))
    recipe = root / "deepseek-v3" / "h100-bf16.yaml"
    rdoc = yaml.safe_load(recipe.read_text())
    rdoc["recompute"] = {"granularity": "full", "method": "uniform", "num_layers": 1}  # mla_up_proj needs MLA
    recipe.write_text(yaml.safe_dump(rdoc))
    plan = build(resolve(load("deepseek-v3/h100-bf16", (), root)))
    mla_only = {"q_lora_rank", *K.MLA_DEFAULTS}
    assert not mla_only & set(plan["transformer_config"])
    written = dict(arguments(plan)[0])
    assert "--kv-lora-rank" not in written and "--q-lora-rank" not in written
    assert not {f"model.{name}" for name in mla_only} & set(dict(bridge_overrides(plan)[0]))


@pytest.mark.parametrize("pattern", [[0] + [1] * 47, [1, 1, 1, 0] * 12, [1] * 24 + [1, 0] * 12, [0, 1, 1] * 12, [1],
                                     [0, 1]])
def test_per_layer_patterns_are_list_expressions(pattern):
    """Megatron-LM's pattern types (--moe-layer-freq, --linear-attention-freq, --window-attn-skip-freq) read an integer
    or a Python list expression; a list once went out as "1,1,0", which they refuse. The expression (runs, the
    shortest period once) reads back as the same list, and uses only what Megatron-LM's _eval_pattern allows."""
    from moeforge.compiler.launch_reader.text import freq_value
    from moeforge.compiler.targets.megatron_args import PATTERN_DESTS, _layer_freq

    text = _layer_freq(pattern)
    assert text.startswith("(") and re.fullmatch(r"[,\d\[\]()+*]+", text), text
    assert freq_value(text) == pattern
    assert {"moe_layer_freq", "linear_attention_freq", "window_attn_skip_freq"} <= PATTERN_DESTS
    if pattern == [1, 1, 1, 0] * 12:
        assert text == "([1]*3+[0]*1)*12"
