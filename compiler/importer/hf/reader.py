"""One reader for every Hugging Face MoE family (compiler/importer/hf/families.py says where each differs): a
config.json's keys -> model document fields, each with its source (the key it came from, the class default that
stood in for an absent key, or the modelling code that fixes it). What megatron-core or a model document cannot
state is refused by name (HfRefused), never approximated."""
from __future__ import annotations

import json

from moeforge.compiler.importer.hf import families as F
from moeforge.compiler.importer.hf.keys import HfRefused, Keys, Read
from moeforge.compiler.importer.hf.moe import moe
from moeforge.compiler.launch_reader.text import ImportError_


def refusals(keys: Keys) -> list[str]:
    """What the family's modelling code does that moeforge's runtime cannot build (families.Family.refuse)."""
    out = []
    keys.read.update(key for key, _, _ in keys.family.refuse)
    for key, test, message in keys.family.refuse:
        value = keys.data.get(key, keys.defaults.get(key)) if key else None
        hit = {"always": True, "set": value not in (None, 0, False), "true": value is True, "false": value is False,
               "has0": isinstance(value, list) and 0 in value}[test]
        if hit:
            out.append(message.format(value=value))
    return out


def read(data: dict, family: F.Family, prefix: str = "", outer: dict | None = None) -> Read:
    """The model document's fields from `data` (a multimodal config's text_config: `prefix` names it, `outer` is
    the whole config, whose tie_word_embeddings ties the multimodal model's lm_head)."""
    keys = Keys(data, family, prefix, outer)
    refused = refusals(keys)
    if refused:
        where = f", {prefix.rstrip('.')}" if prefix else ""
        raise HfRefused(f"{family.name} ({family.architectures[0]}{where}): moeforge's runtime cannot build it: "
                        + "; ".join(refused))
    out = Read()
    _core(keys, out)
    _rope(keys, out)
    _attention_variants(keys, out)
    moe(keys, out)
    for path, value, why in family.constants:
        out.put(path, value, why)
    for key, why in family.inert:
        keys.read.add(key)
        if data.get(key):
            out.notes.append(f"{prefix}{key} {json.dumps(data[key])}: {why}")
    out.unread = {k: v for k, v in data.items() if k not in keys.read and k not in F.NOT_ARCHITECTURE}
    return out


def _core(keys: Keys, out: Read) -> None:
    get, put = keys.get, out.put
    for path, names in (("num_layers", ("num_hidden_layers",)), ("hidden_size", ("hidden_size",)),
                        ("num_attention_heads", ("num_attention_heads",)), ("vocab_size", ("vocab_size",))):
        value, src = get(*names, required=True)
        put(f"architecture.{path}", value, src)
    heads = out.fields["architecture.num_attention_heads"][0]
    value, src = get("intermediate_size")
    put("architecture.ffn_hidden_size", value, src)
    value, src = get("num_key_value_heads", default=heads)
    put("architecture.num_query_groups", value, src or "num_key_value_heads absent: one group per head")
    keys.read.add("head_dim")  # null: hidden_size / num_attention_heads, megatron-core's kv_channels default too
    if "mla" not in keys.family.features and keys.has("head_dim"):
        value, src = get("head_dim")
        put("architecture.kv_channels", value, src)
    value, src = get("max_position_embeddings")
    put("architecture.max_position_embeddings", value, src)
    put("architecture.normalization", "RMSNorm", f"{keys.family.architectures[0]}: RMSNorm layers")
    value, src = get("rms_norm_eps")
    put("architecture.norm_epsilon", float(value), src)
    act, src = get("hidden_act")
    if act != "silu":
        raise HfRefused(f"{src} {act!r}: moeforge reads the gated SiLU MLP (silu) of the {keys.family.name} family")
    put("architecture.gated_linear_unit", True, f"{src} {act}: gate_proj x up_proj")
    put("architecture.activation", "swiglu", f"{src} {act}, gated")
    value, src = get("mlp_bias", default=False)
    put("architecture.add_bias_linear", bool(value), src or "no mlp_bias key: no bias on the MLP and output "
                                                            "projections")
    value, src = get("attention_bias", "qkv_bias", "use_bias", default=False)
    put("architecture.add_qkv_bias", bool(value), src or "no attention_bias key: q/k/v projections without bias")
    value, src = get("use_qk_norm", default=False)
    put("architecture.qk_layernorm", bool(value), src or "no q_norm / k_norm in the attention")
    if "tie_word_embeddings" in keys.outer:  # transformers ties the multimodal model's lm_head by its own key
        keys.read.add("tie_word_embeddings")
        value, src = keys.outer["tie_word_embeddings"], "tie_word_embeddings (the multimodal model's)"
    else:
        value, src = get("tie_word_embeddings", default=False)
    put("architecture.untie_embeddings_and_output_weights", not value,
        f"{src or 'tie_word_embeddings absent'} {str(bool(value)).lower()}")
    put("architecture.hidden_dropout", 0.0, "the decoder layers have no dropout on the residual stream "
                                            "(megatron-core's default is 0.1)")
    value, src = get("attention_dropout", default=0.0)
    put("architecture.attention_dropout", float(value), src or "attention_dropout absent: none")
    value, src = get("initializer_range")
    put("architecture.init_method_std", float(value), src)


def _rope(keys: Keys, out: Read) -> None:
    rope, where = keys.rope()
    mla = "mla" in keys.family.features
    if rope.get("rope_theta") is None:
        raise ImportError_(f"{keys.prefix}rope_theta: missing; the {keys.family.name} family uses RoPE")
    out.put("architecture.position_embedding_type", "rope", "rotary position embeddings")
    out.put("architecture.rotary_base", _number(rope["rope_theta"]), where["rope_theta"])
    partial = rope.get("partial_rotary_factor")
    out.put("architecture.rotary_percent", float(partial or 1.0),
            where["partial_rotary_factor"] if partial else "no partial_rotary_factor: RoPE on the whole head")
    if rope.get("mrope_section"):
        out.notes.append(f"{where['mrope_section']} {rope['mrope_section']}: multimodal RoPE, whose three sections "
                         "carry one position for text, where it is plain RoPE (imported as rope)")
    key = "rope_type" if rope.get("rope_type") else "type"
    kind = rope.get(key) or "default"
    src = f"{where[key]} {kind}" if key in where else "no rope scaling"
    if kind == "default":
        if mla:  # MLATransformerConfig defaults to YaRN with factor 40; its softmax scale reads the factor too
            out.put("architecture.rope_type", "rope", f"{src}: plain RoPE (MLATransformerConfig's default is yarn)")
            out.put("architecture.rotary_scaling_factor", 1.0, f"{src}: no YaRN factor (the MLA softmax scale "
                                                               "stays 1/sqrt(head dim))")
        return
    if kind != "yarn":
        raise HfRefused(f"{src}: megatron-core builds plain RoPE and YaRN; this RoPE scaling has no model document "
                        "field")
    if rope.get("attention_factor") is not None:
        raise HfRefused(f"{where['attention_factor']}: an explicit YaRN attention factor; megatron-core derives it "
                        "from factor, mscale and mscale_all_dim, and no model document field states it")
    for hf in ("factor", "original_max_position_embeddings"):
        if rope.get(hf) is None:
            raise ImportError_(f"{src}: {hf} missing; expected it beside the YaRN rope_type")
    if mla:
        out.put("architecture.rope_type", "yarn", src)
    else:
        out.put("architecture.position_embedding_type", "yarn", f"{src} on ordinary attention")
    pair = ("mscale", "mscale_all_dim")
    if not all(rope.get(k) for k in pair) and any(k in rope for k in pair):
        out.notes.append(f"{', '.join(where[k] for k in pair if k in rope)}: transformers reads mscale and "
                         "mscale_all_dim only together and non-zero, else its YaRN factor is 0.1 ln(factor) + 1, which "
                         "is megatron-core's without them: not stated")
        rope = {k: v for k, v in rope.items() if k not in pair}
    for hf, ours in (("factor", "rotary_scaling_factor"), ("original_max_position_embeddings",) * 2,
                     ("beta_fast",) * 2, ("beta_slow",) * 2, ("mscale",) * 2, ("mscale_all_dim",) * 2):
        if rope.get(hf) is not None:
            value = rope[hf] if hf == "original_max_position_embeddings" else float(rope[hf])
            out.put(f"architecture.{ours if mla else 'yarn_' + ours}", value, where[hf])
    if not mla and rope.get("truncate") is not None:
        out.put("architecture.yarn_correction_range_round_to_int", bool(rope["truncate"]), where["truncate"])


def _attention_variants(keys: Keys, out: Read) -> None:
    feats, get, put = keys.family.features, keys.get, out.put
    layers = out.fields["architecture.num_layers"][0]
    types = keys.data.get("layer_types")
    if types is not None and not feats & {"gated_delta_net", "sinks_swa"}:
        keys.read.add("layer_types")
        other = sorted({t for t in types if t != "full_attention"}) if isinstance(types, list) else [types]
        if other:
            raise HfRefused(f"{keys.prefix}layer_types {', '.join(map(str, other))}: the {keys.family.name} reader "
                            "builds full attention on every layer")
    if "mla" in feats:
        for ours, hf in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                         ("qk_head_dim", "qk_nope_head_dim"), ("qk_pos_emb_head_dim", "qk_rope_head_dim"),
                         ("v_head_dim", "v_head_dim")):
            value, src = get(hf, default=None, null=True)
            put(f"architecture.{ours}", None if value is None else value,
                f"{src or hf} null: no {'query compression' if ours == 'q_lora_rank' else hf}" if value is None
                else src)
    if "gated_delta_net" in feats:
        put("architecture.experimental_attention_variant", "gated_delta_net",
            "Qwen3NextGatedDeltaNet on the linear_attention layers")
        if types:
            put("architecture.linear_attention_freq", _layer_pattern(keys, "linear_attention", layers),
                f"{keys.prefix}layer_types")
        else:
            value, src = get("full_attention_interval", default=4)
            put("architecture.linear_attention_freq", value,
                src or "full_attention_interval absent: Qwen3NextConfig's default 4")
        for name in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
                     "linear_num_key_heads", "linear_num_value_heads"):
            value, src = get(name)
            put(f"architecture.{name}", value, src)
    keys.read.add("sliding_window")
    if "sinks_swa" in feats or ("window_all" in feats and keys.has("sliding_window")):
        window, src = get("sliding_window")
        put("architecture.window_size", [window - 1, 0],
            f"{src} {window}: a token attends to itself and the {window - 1} before it")
        if "window_all" in feats:
            put("architecture.window_attn_skip_freq", None, "every layer is windowed")
        elif types:
            put("architecture.window_attn_skip_freq", _layer_pattern(keys, "sliding_attention", layers),
                f"{keys.prefix}layer_types")
        else:  # GptOssConfig.__post_init__: sliding on the odd layers (1-based)
            put("architecture.window_attn_skip_freq", 2, "layer_types absent: GptOssConfig alternates sliding and "
                                                         "full attention")
    if "sinks_swa" in feats:
        value, src = get("swiglu_limit", default=7.0)
        put("architecture.activation_func_clamp_value", float(value), src or "GptOssExperts.limit 7.0")


def _layer_pattern(keys: Keys, special: str, layers: int) -> int | list[int]:
    """layer_types as megatron-core's pattern: 1 for each `special` layer, 0 for full attention."""
    keys.read.add("layer_types")
    types = keys.data["layer_types"]
    if not isinstance(types, list) or len(types) != layers or set(types) - {special, "full_attention"}:
        raise ImportError_(f"{keys.prefix}layer_types: expected {layers} entries of {special} / full_attention")
    return _periodic([int(t == special) for t in types])


def _periodic(pattern: list[int]) -> int | list[int]:
    """A 1-means-special layer pattern as megatron-core's int N ((N-1) special layers, then one not: layer number
    % N != 0) when it is one, else the list itself."""
    for n in range(2, len(pattern) + 1):
        if pattern == [int((i + 1) % n != 0) for i in range(len(pattern))]:
            return n
    return pattern


def _number(value):
    return int(value) if isinstance(value, float) and value.is_integer() else value
