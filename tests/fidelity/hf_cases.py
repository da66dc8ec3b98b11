"""The Hugging Face configs the import is judged on (tests/fidelity/test_hf_import_judged.py, hf_judge.py):
configs built from the configuration classes transformers ships (their defaults, and published sizes where a
class's defaults are another checkpoint's or leave a size out), written to tests/fidelity/hf_configs/classes/, and
the public config.json files kept in tests/fidelity/hf_configs/ (the catalogue's models, read by the judges
offline).

    .venv312/bin/python tests/fidelity/hf_cases.py   # rewrite hf_configs/classes/ (hf_judge.py checks it is current)

No Hub access: every config comes from a class or from the files here."""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLASSES_DIR = HERE / "hf_configs" / "classes"

# name -> (configuration class, published sizes over its defaults (empty: the defaults), keys the written
# config.json states beyond the class's (as the published file does), why)
CLASS_CASES = {
    "mixtral-8x7b": ("MixtralConfig", {}, {}, "the defaults: mistralai/Mixtral-8x7B-v0.1"),
    "mixtral-8x22b": ("MixtralConfig", {"hidden_size": 6144, "intermediate_size": 16384, "num_hidden_layers": 56,
                                        "num_attention_heads": 48, "vocab_size": 32768,
                                        "max_position_embeddings": 65536}, {},
                      "mistralai/Mixtral-8x22B-v0.1's published sizes"),
    "qwen1.5-moe-a2.7b": ("Qwen2MoeConfig", {}, {}, "the defaults: Qwen/Qwen1.5-MoE-A2.7B"),
    "qwen3-moe": ("Qwen3MoeConfig", {}, {}, "the defaults: Qwen/Qwen3-30B-A3B-Base's widths, 24 layers"),
    "qwen3-next": ("Qwen3NextConfig", {}, {}, "the defaults: Qwen/Qwen3-Next-80B-A3B-Instruct"),
    "deepseek-v2": ("DeepseekV2Config", {"num_experts_per_tok": 6}, {},
                    "the defaults, routing top-6 (the class leaves num_experts_per_tok null)"),
    "deepseek-v2-lite": ("DeepseekV2Config", {
        "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
        "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "q_lora_rank": None, "vocab_size": 102400,
        "max_position_embeddings": 163840, "n_group": 1, "topk_group": 1,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                            "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                            "mscale": 0.707, "mscale_all_dim": 0.707}}, {},
        "deepseek-ai/DeepSeek-V2-Lite's published sizes (no query LoRA, YaRN)"),
    "deepseek-v3": ("DeepseekV3Config", {}, {}, "the defaults: deepseek-ai/DeepSeek-V3's widths"),
    "kimi-k2": ("DeepseekV3Config", {
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 64, "num_key_value_heads": 64, "n_shared_experts": 1, "n_routed_experts": 384,
        "num_experts_per_tok": 8, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
        "routed_scaling_factor": 2.827, "vocab_size": 163840, "max_position_embeddings": 131072,
        "architectures": ["DeepseekV3ForCausalLM"],
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
                            "original_max_position_embeddings": 4096, "beta_fast": 1.0, "beta_slow": 1.0,
                            "mscale": 1.0, "mscale_all_dim": 1.0}},
        {"model_type": "kimi_k2", "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                                               "AutoModel": "modeling_deepseek.DeepseekV3Model",
                                               "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}},
        "moonshotai/Kimi-K2-Instruct's published sizes: DeepSeek-V3's classes through auto_map, model_type kimi_k2"),
    "gpt-oss": ("GptOssConfig", {}, {}, "the defaults: openai/gpt-oss's 36-layer widths"),
    "glm-4.5-air": ("Glm4MoeConfig", {"head_dim": 128, "attention_bias": True}, {},
                    "the defaults (zai-org/GLM-4.5-Air's widths) with its published head_dim 128 and q/k/v biases"),
    "glm-4.5": ("Glm4MoeConfig", {
        "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 92,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 160,
        "first_k_dense_replace": 3, "routed_scaling_factor": 2.5, "attention_bias": True, "use_qk_norm": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5}},
        {"num_nextn_predict_layers": 1}, "zai-org/GLM-4.5's published sizes, one MTP layer"),
    "qwen3-vl-moe": ("Qwen3VLMoeConfig", {}, {}, "a multimodal config: the language model under text_config"),
    "olmoe": ("OlmoeConfig", {}, {}, "the defaults: allenai/OLMoE-1B-7B-0924 (refused: whole-projection QK norm)"),
    "ernie-4.5-moe": ("Ernie4_5_MoeConfig", {}, {},
                      "the defaults: baidu/ERNIE-4.5-21B-A3B-PT (refused: softmax router with expert bias)"),
    "llama4-scout": ("Llama4TextConfig", {}, {}, "the defaults: meta-llama/Llama-4-Scout-17B-16E (refused)"),
    "llama4-multimodal": ("Llama4Config", {}, {}, "the multimodal Llama-4: its text_config is read (and refused)"),
}

# the public config.json files beside the judges (tests/fidelity/hf_configs/NAME.json) and their classes
FILE_CASES = {name: cls for name, cls in (
    ("qwen3-30b-a3b", "Qwen3MoeConfig"), ("qwen3-235b-a22b", "Qwen3MoeConfig"), ("deepseek-v3", "DeepseekV3Config"),
    ("gpt-oss-120b", "GptOssConfig"), ("qwen3-next-80b-a3b", "Qwen3NextConfig"))}


def case_files() -> dict[str, Path]:
    """Every case's config.json."""
    out = {name: CLASSES_DIR / f"{name}.json" for name in CLASS_CASES}
    out.update({f"file:{name}": HERE / "hf_configs" / f"{name}.json" for name in FILE_CASES})
    return out


# the model class a published config.json names in `architectures` (the classes leave it empty)
ARCHITECTURES = {"Llama4TextConfig": "Llama4ForCausalLM", "Llama4Config": "Llama4ForConditionalGeneration",
                 "Qwen3VLMoeConfig": "Qwen3VLMoeForConditionalGeneration"}


def class_config(name: str):
    """The configuration object of a class case, built from its class (transformers)."""
    import transformers

    cls, sizes, _, _ = CLASS_CASES[name]
    cfg = getattr(transformers, cls)(**sizes)
    if not cfg.architectures:
        cfg.architectures = [ARCHITECTURES.get(cls, cls.replace("Config", "ForCausalLM"))]
    return cfg


def class_text(name: str) -> str:
    """The config.json a class case writes: the object's to_dict(), the published file's extra keys over it."""
    data = class_config(name).to_dict()
    data.update(CLASS_CASES[name][2])
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def config_object(case: str):
    """The configuration object the judges hand to Megatron-Bridge / transformers for a case."""
    import transformers

    if case.startswith("file:"):
        data = json.loads(case_files()[case].read_text())
        data.pop("_source", None)
        return getattr(transformers, FILE_CASES[case[5:]]).from_dict(data)
    cfg = class_config(case)
    extra = CLASS_CASES[case][2]
    if "auto_map" in extra:
        cfg.auto_map = extra["auto_map"]
    for key, value in extra.items():
        if key not in ("model_type", "auto_map"):
            setattr(cfg, key, value)
    return cfg


if __name__ == "__main__":
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    for case in CLASS_CASES:
        (CLASSES_DIR / f"{case}.json").write_text(class_text(case))
    print(f"wrote {len(CLASS_CASES)} configs under {CLASSES_DIR}")
    sys.exit(0)
