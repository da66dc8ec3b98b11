"""`moeforge import config.json`, judged by Megatron-Bridge's own conversion and by transformers' modelling code
(hf_judge.py, one .venv312 run for every case in hf_cases.py): each config is imported into a project with the
h100 platform, the recipe compiled, and the TransformerConfig moeforge's runtime builds from plan.json compared
with `AutoBridge.from_hf_config(cfg).to_megatron_provider(load_weights=False)` field by field (families Bridge
0.6.2 converts), or with the module tree of the transformers model class on the meta device (Mixtral, Qwen2-MoE,
Qwen3-VL-MoE's language model); every case's RoPE and router weights against megatron-core's own functions. A
family moeforge refuses is refused naming what the judges show it would have to build."""
from __future__ import annotations

import io
import json
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout

import pytest

from bridge_judge import LAUNCH_ONLY_EXCEPTIONS
from moeforge.compiler.cli import main as moeforge
from moeforge.compiler.importer.hf import config_file as C, document as D
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.launch_reader.text import ImportError_
from fidelity_testlib import HERE, PY312, READY, ROOT, SKIP_REASON
import hf_cases

pytestmark = pytest.mark.skipif(not READY, reason=SKIP_REASON)

MCORE = version_int("0.19.2")  # the h100 platform's
# A recipe's settings (the knob table's rows with a recipe path outside model.*) and its precision: Bridge's
# provider carries its own training defaults for them, which are no part of a model's conversion.
RECIPE_FIELDS = {k.name_for(MCORE) for k in K.KNOBS if k.path and k.section == "tc" and not k.path.startswith("model.")}
RECIPE_FIELDS |= {"bf16", "fp16", "params_dtype", "pipeline_dtype", "autocast_dtype"}


def _mla(plan):
    return plan["transformer_config"].get("multi_latent_attention")


# The model fields where moeforge and Megatron-Bridge differ, each with when it applies and why it is the same model
# (or a training choice config.json does not state). Every other difference fails.
EXCEPTIONS = {
    **{name: (lambda plan: True, why) for name, why in LAUNCH_ONLY_EXCEPTIONS.items()},
    "kv_channels": (_mla, "megatron-core's MLA sizes its projections by qk_head_dim, qk_pos_emb_head_dim and "
                          "v_head_dim and never reads kv_channels; Bridge copies transformers 5's head_dim (the RoPE "
                          "part) into it"),
    "moe_router_pre_softmax": (lambda plan: plan["transformer_config"]["moe_router_score_function"] == "sigmoid",
                               "read only with softmax scores (topk_routing_with_score_function); the routing check "
                               "gives transformers' weights"),
    "add_qkv_bias": (lambda plan: plan["transformer_config"]["add_bias_linear"],
                     "megatron-core gives linear_qkv a bias when add_bias_linear or add_qkv_bias is set: with "
                     "add_bias_linear both give q/k/v biases, as transformers' attention_bias does"),
    "rope_type": (lambda plan: _mla(plan) and plan["transformer_config"].get("rotary_scaling_factor") == 1.0,
                  "no rope_scaling: plain RoPE; Bridge keeps MLATransformerConfig's yarn with factor 1.0, the same "
                  "frequencies and scale (the RoPE check compares them with transformers')"),
    "mscale_all_dim": (lambda plan: _mla(plan) and plan["transformer_config"].get("rotary_scaling_factor") == 1.0,
                       "with a YaRN factor of 1 the MLA softmax scale is 1/sqrt(head dim) whatever it is"),
    "config attribute yarn_mscale": (lambda plan: True, "no mscale in rope_scaling: the plan states Megatron-LM's "
                                     "defaults (1.0, 0.0), Bridge None; megatron-core's concentration factor is "
                                     "0.1 ln(factor) + 1 either way (the RoPE check compares it with transformers')"),
    "moe_router_num_groups": (lambda plan: plan["transformer_config"]["moe_router_score_function"] == "softmax",
                              "DeepSeek-V2's greedy routing ignores n_group / topk_group, which Bridge copies "
                              "(the routing check gives transformers' weights)"),
    "GPTModel max_sequence_length": (lambda plan: plan["model"]["position_embedding_type"] != "learned_absolute",
                                     "sizes only learned absolute position embeddings (these models use RoPE): "
                                     "Bridge gives the training length there, moeforge max_position_embeddings"),
    "mtp_loss_scaling_factor": (lambda plan: True, "the MTP loss weight is a training choice config.json does not "
                                "state: Bridge's GLM45Bridge 0.3, megatron-core's default 0.1"),
    "moe_router_bias_update_rate": (lambda plan: True, "a training choice config.json does not state: Bridge's "
                                    "GLM45Bridge freezes the expert bias (0), megatron-core's 1e-3 keeps the "
                                    "aux-loss-free balancing learning"),
}
EXCEPTIONS["config attribute yarn_mscale_all_dim"] = EXCEPTIONS["config attribute yarn_mscale"]
EXCEPTIONS["moe_router_group_topk"] = EXCEPTIONS["moe_router_num_groups"]
TOLERANCE = 1e-6  # RoPE frequencies (relative) and router weights: float32 arithmetic in another order

# what each refused family's judge shows, and the words of moeforge's refusal that name it
REFUSAL_EVIDENCE = {
    "olmoe": (lambda facts: facts["layer_spec"] == "olmoe_layer_spec", ("whole projection", "OLMoESelfAttention")),
    "ernie4.5-moe": (lambda facts: facts["moe_router_score_function"] == "sigmoid" and facts["rotary_interleaved"],
                     ("softmax", "e_score_correction_bias", "interleaved RoPE")),
    "llama4": (lambda facts: facts["nope_layers"] and facts["chunked_attention_layers"] and facts["l2_qk_norm"]
               and facts["attn_temperature_tuning"],
               ("chunked attention", "NoPE layers", "L2-normalised", "temperature")),
}


def case_name(case: str) -> str:
    return case.replace("file:", "file-").replace(".", "-")


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """{case: (the import or its refusal, the verdict)} and the judge's regenerated class defaults."""
    project = tmp_path_factory.mktemp("hf-import")
    (project / "recipes").mkdir()
    imports, specs = {}, []
    for case, path in hf_cases.case_files().items():
        text, name = path.read_text(), case_name(case)
        try:
            imp = D.import_config(text, str(path), name, "h100", project / "recipes")
        except ImportError_ as exc:
            data = C.load(text)
            lm, prefix, _ = C.language_model(data)
            imports[case] = exc
            specs.append({"case": case, "family": C.family(lm, prefix)[0].name, "build": None})
            continue
        D.write(imp, project / "recipes", path.name)
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(out):
            rc = moeforge(["--root", str(project), "compile", f"imported/{name}", "--out", str(project / "build")])
        assert rc == 0, f"{case}: the imported recipe does not compile:\n{out.getvalue()}"
        imports[case] = imp
        specs.append({"case": case, "family": imp.family, "build": str(project / "build" / "imported" / name)})
    spec = project / "spec.json"
    spec.write_text(json.dumps(specs))
    proc = subprocess.run([str(PY312), str(HERE / "hf_judge.py"), str(spec)], capture_output=True, text=True,
                          timeout=1500, cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"})
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"hf_judge.py produced no verdict (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    verdicts = {v["case"]: v for v in result["verdicts"]}
    return {case: (imports[case], verdicts[case]) for case in imports}, result["class_defaults"], project


def test_the_configs_are_what_the_classes_write(judged):
    """hf_configs/classes/*.json and compiler/data/hf_class_defaults.json are generated from the installed
    transformers (hf_cases.py, hf_class_defaults.py rewrite them)."""
    cases, defaults, _ = judged
    assert [c for c, (_, v) in cases.items() if v["stale"]] == []
    assert json.loads((ROOT / "compiler/data/hf_class_defaults.json").read_text()) == defaults


REFUSED = ("olmoe", "ernie-4.5-moe", "llama4-scout", "llama4-multimodal")
IMPORTED = [c for c in hf_cases.case_files() if c not in REFUSED]


@pytest.mark.parametrize("case", IMPORTED)
def test_the_judge_builds_what_moeforge_builds(case, judged):
    imp, verdict = judged[0][case]
    assert not isinstance(imp, Exception), f"moeforge refuses {case}: {imp}"
    assert verdict["error"] is None, verdict["error"]
    plan = json.loads((judged[2] / "build" / "imported" / case_name(case) / "plan.json").read_text())
    unexplained = [d for d in verdict["diffs"] if d["field"] not in RECIPE_FIELDS
                   and not (d["field"] in EXCEPTIONS and EXCEPTIONS[d["field"]][0](plan))]
    assert unexplained == [], f"{case} ({verdict['judge']}): fields differ from moeforge's"
    assert verdict["rope"] is not None and verdict["rope"] <= TOLERANCE, f"RoPE differs by {verdict['rope']}"
    assert verdict["routing"] is not None and verdict["routing"] <= TOLERANCE, \
        f"router weights differ by {verdict['routing']}"


def test_bridge_converts_the_families_it_has_a_bridge_for(judged):
    """The Bridge-judged cases are the families hf/families.py marks "bridge", and each was compared field by field."""
    judges = {case: v["judge"] for case, (imp, v) in judged[0].items() if case in IMPORTED}
    assert {c for c, j in judges.items() if j == "bridge"} >= {
        "qwen3-moe", "qwen3-next", "deepseek-v2", "deepseek-v3", "kimi-k2", "gpt-oss", "glm-4.5", "file:qwen3-30b-a3b"}
    assert {c for c, j in judges.items() if j == "modelling"} == {
        "mixtral-8x7b", "mixtral-8x22b", "qwen1.5-moe-a2.7b", "qwen3-vl-moe"}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_by_name_for_what_the_judges_show(case, judged):
    refusal, verdict = judged[0][case]
    assert isinstance(refusal, ImportError_), f"moeforge imports {case}"
    assert verdict["error"] is None, verdict["error"]
    shows, words = REFUSAL_EVIDENCE[verdict["family"]]
    assert shows(verdict["facts"]), verdict["facts"]
    assert [w for w in words if w not in str(refusal)] == [], str(refusal)
    if case == "llama4-multimodal":
        assert "text_config" in str(refusal)
