"""Judge: does `moeforge import config.json` build the model Hugging Face's config describes?

Run under .venv312 (transformers, megatron-bridge 0.6.2, megatron-core 0.19.2), once for every case:
    .venv312/bin/python tests/fidelity/hf_judge.py SPEC.json   (prints the verdicts as JSON)

SPEC: [{"case": name (tests/fidelity/hf_cases.py), "family": moeforge's family, "build": the compiled imported
recipe's build directory, or null where moeforge refused the config}]. For each case:

- the configuration object is built from its transformers class (hf_cases.config_object), and a class case's
  config.json under hf_configs/classes/ must be what the class writes today (`stale` otherwise);
- Megatron-Bridge families: AutoBridge.from_hf_config(cfg).to_megatron_provider(load_weights=False), finalized,
  against the TransformerConfig moeforge's runtime builds from plan.json (moeforge.runtime.model.build.build_config), every
  dataclass field, plus the GPTModel arguments and YaRN attributes (`diffs`: every field that differs; the test
  says which are a recipe's choice and which are listed exceptions);
- the other families: the transformers model class built on the meta device, and what its module tree shows
  (layers, widths, heads, biases, norms, experts, shared experts, MoE layers) against the same TransformerConfig;
  and for every case, its RoPE frequencies and its router's weights (the router module built on the CPU, random
  weights, 16 tokens) against megatron-core's RotaryEmbedding and topk_routing_with_score_function with the
  plan's settings (`rope`, `routing`: the largest difference);
- a refused case reports what transformers and Bridge build (`facts`), so the test can check the refusal names it.
Also `class_defaults`: compiler/data/hf_class_defaults.json regenerated (hf_class_defaults.py).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]
import judgelib as jl  # noqa: E402
import hf_cases  # noqa: E402

GPT_MODEL_ARGS = (("vocab_size", "vocab_size"), ("position_embedding_type", "position_embedding_type"),
                  ("rotary_base", "rotary_base"), ("rotary_percent", "rotary_percent"),
                  ("share_embeddings_and_output_weights", "share_embeddings_and_output_weights"),
                  ("max_sequence_length", "seq_length"))


def ours(build: str | None):
    """(plan dict, the TransformerConfig moeforge's runtime builds from it) or (None, None)."""
    if not build:
        return None, None
    from moeforge.runtime.model import build as rm
    from moeforge.runtime.plan import document as rp

    raw = jl.load_plan(Path(build))
    jl.emulate_platform(raw)
    with jl.quiet():
        cfg, _ = rm.build_config(rp.load(Path(build) / "plan.json"))
    return raw, cfg


def layer_list(name: str, value, layers: int):
    """A per-layer pattern megatron-core takes as an int N or a 0/1 list, as the list (the same layers either way):
    moe_layer_freq N: layers 0, N, 2N, ... are MoE; window_attn_skip_freq / linear_attention_freq N: every Nth
    layer (1-based) is the full-attention one."""
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    if name == "moe_layer_freq":
        return [int(i % value == 0) for i in range(layers)]
    if name in ("window_attn_skip_freq", "linear_attention_freq"):
        return [int((i + 1) % value != 0) for i in range(layers)]
    return value


def field_diffs(mine, theirs, plan: dict) -> list[dict]:
    """Every dataclass field of moeforge's config that `theirs` holds differently, and the GPTModel arguments."""
    out = []
    for f in dataclasses.fields(mine):
        if f.name in ("init_method", "output_layer_init_method", "embedding_init_method"):
            continue
        a, b = getattr(mine, f.name), getattr(theirs, f.name, "<absent>")
        a, b = layer_list(f.name, a, mine.num_layers), layer_list(f.name, b, mine.num_layers)
        if callable(a) and callable(b):
            a, b = jl.activation_name(a), jl.activation_name(b)
        a, b = jl.norm(a), jl.norm(b)
        if not jl.same(a, b):
            out.append({"field": f.name, "plan": a, "theirs": b})
    for ours_key, attr in GPT_MODEL_ARGS:
        a, b = jl.norm(plan["model"].get(ours_key)), jl.norm(getattr(theirs, attr, "<absent>"))
        if not jl.same(a, b):
            out.append({"field": f"GPTModel {ours_key}", "plan": a, "theirs": b})
    for key, value in (plan.get("config_attributes") or {}).items():
        b = jl.norm(getattr(theirs, key, None))
        if not jl.same(jl.norm(value), b):
            out.append({"field": f"config attribute {key}", "plan": jl.norm(value), "theirs": b})
    return out


def meta_model(cfg):
    """transformers' own model for the config, on the meta device: (the decoder stack, the whole model, text config)."""
    import torch
    import transformers

    text = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    with torch.device("meta"), jl.quiet():
        if text is cfg:
            whole = transformers.AutoModelForCausalLM.from_config(cfg)
            return whole.model, whole, text
        return transformers.AutoModel.from_config(text), None, text


def _moe_block(layer):
    block = getattr(layer, "mlp", None) or getattr(layer, "feed_forward", None)
    return block if hasattr(block, "experts") else None


def tree_facts(decoder, whole, text, cfg) -> dict:
    """What the module tree says, in megatron-core's field names."""
    layers = decoder.layers
    attn = layers[0].self_attn
    head = getattr(attn, "head_dim", None)
    moe_pattern = [int(_moe_block(layer) is not None) for layer in layers]
    block = next(_moe_block(layer) for layer in layers if _moe_block(layer) is not None)
    router = getattr(block, "gate", None) or getattr(block, "router")
    hidden = decoder.embed_tokens.weight.shape[1]
    experts = block.experts
    down = tuple(experts.down_proj.shape)  # [E, hidden, ffn] or [E, ffn, hidden]
    shared = getattr(block, "shared_expert", None) or getattr(block, "shared_experts", None)
    dense = next((layer.mlp for layer in layers if _moe_block(layer) is None), None)
    q_norm = getattr(attn, "q_norm", None)
    facts = {
        "num_layers": len(layers), "hidden_size": hidden, "vocab_size": decoder.embed_tokens.weight.shape[0],
        "num_attention_heads": attn.q_proj.out_features // head, "num_query_groups": attn.k_proj.out_features // head,
        "kv_channels": head, "add_qkv_bias": attn.q_proj.bias is not None,
        "add_bias_linear": attn.o_proj.bias is not None,
        "qk_layernorm": q_norm is not None and tuple(q_norm.weight.shape) == (head,),
        "layernorm_epsilon": getattr(layers[0].input_layernorm, "variance_epsilon", None)
        or layers[0].input_layernorm.eps,
        "num_moe_experts": down[0], "moe_ffn_hidden_size": down[2] if down[1] == hidden else down[1],
        "moe_router_topk": getattr(router, "top_k", None) or getattr(block, "top_k", None),
        "moe_layer_freq": moe_pattern,
        "moe_shared_expert_intermediate_size": shared.gate_proj.out_features if shared is not None else None,
        "moe_shared_expert_gate": hasattr(block, "shared_expert_gate"),
        "gated_linear_unit": hasattr(experts, "gate_up_proj"),
        "activation_func": type(experts.act_fn).__name__.removesuffix("Activation").lower(),
    }
    if dense is not None:
        facts["ffn_hidden_size"] = dense.gate_proj.out_features
    if whole is not None:
        facts["share_embeddings_and_output_weights"] = whole.lm_head.weight is whole.model.embed_tokens.weight
    else:
        facts["share_embeddings_and_output_weights"] = bool(getattr(cfg, "tie_word_embeddings", False))
    return facts


def llama4_features(decoder, text) -> dict:
    layers = decoder.layers
    return {"nope_layers": sum(1 for layer in layers if not layer.self_attn.use_rope),
            "chunked_attention_layers": sum(1 for t in getattr(text, "layer_types", []) if t == "chunked_attention"),
            "l2_qk_norm": any(type(getattr(layer.self_attn, "qk_norm", None)).__name__ == "Llama4TextL2Norm"
                              for layer in layers),
            "attn_temperature_tuning": bool(layers[0].self_attn.attn_temperature_tuning)}


def rope_check(decoder, text, cfg_mc, plan) -> float:
    """Largest difference between transformers' RoPE (inverse frequencies, and the YaRN attention factor) and
    megatron-core's for the plan: RotaryEmbedding, or YaRN's frequency blend and concentration factor computed with
    megatron-core's own functions (its YarnRotaryEmbedding builds them on a GPU)."""
    import torch
    from megatron.core.models.common.embeddings import yarn_rotary_pos_embedding as Y
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    rotary = type(decoder.rotary_emb)(config=text)
    hf, hf_scale = rotary.inv_freq.float(), float(getattr(rotary, "attention_scaling", 1.0))
    mla, attrs, model = cfg_mc.multi_latent_attention, plan.get("config_attributes") or {}, plan["model"]
    dim = cfg_mc.qk_pos_emb_head_dim if mla else int(cfg_mc.kv_channels * model["rotary_percent"])
    yarn = cfg_mc.rope_type == "yarn" if mla else model["position_embedding_type"] == "yarn"
    if not yarn:
        mc = RotaryEmbedding(dim, 1.0, rotary_base=model["rotary_base"], use_cpu_initialization=True).inv_freq.float()
        scale = 1.0
    else:
        get = (lambda k: getattr(cfg_mc, k)) if mla else (lambda k: attrs.get(f"yarn_{k}"))
        factor, orig = get("rotary_scaling_factor"), get("original_max_position_embeddings")
        round_to_int = True if mla else attrs.get("yarn_correction_range_round_to_int", True)
        low, high = Y._yarn_find_correction_range(get("beta_fast"), get("beta_slow"), dim, model["rotary_base"], orig,
                                                  round_to_int)
        mask = 1.0 - Y._yarn_linear_ramp_mask(low, high, dim // 2, device="cpu")
        extra = 1.0 / (model["rotary_base"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        mc = extra / factor * (1 - mask) + extra * mask
        scale = Y._yarn_get_concentration_factor(factor, get("mscale"), get("mscale_all_dim"))
    if hf.shape != mc.shape:
        return float("inf")
    return max(float((hf - mc).abs().max() / hf.abs().max()), abs(hf_scale - scale))


def routing_check(decoder, text, cfg_mc) -> float:
    """Largest difference between the weights transformers' router gives 16 random tokens and megatron-core's
    topk_routing_with_score_function with the plan's router settings, on the same logits."""
    import torch
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    block = next(_moe_block(layer) for layer in decoder.layers if _moe_block(layer) is not None)
    name = "gate" if hasattr(block, "gate") else "router"
    meta = getattr(block, name)
    torch.manual_seed(0)
    if isinstance(meta, torch.nn.Linear):
        gate = torch.nn.Linear(meta.in_features, meta.out_features, bias=meta.bias is not None)
    else:
        gate = type(meta)(text)
    for p in (*gate.parameters(), *gate.buffers()):
        p.data.normal_(0.0, 0.05)
    x = torch.randn(16, text.hidden_size)
    with torch.no_grad():
        out = gate(x)
        if isinstance(out, tuple):
            logits, weights, index = out
        else:
            logits = out
            setattr(block, name, gate)
            index, weights = block.route_tokens_to_experts(logits if "V2" not in type(block).__name__
                                                           else logits.unsqueeze(0))
        dense = torch.zeros_like(logits, dtype=torch.float32).scatter(1, index.reshape(16, -1),
                                                                         weights.reshape(16, -1).float())
        bias = getattr(gate, "e_score_correction_bias", None) if cfg_mc.moe_router_enable_expert_bias else None
        probs, _ = topk_routing_with_score_function(
            logits.float(), cfg_mc.moe_router_topk, use_pre_softmax=cfg_mc.moe_router_pre_softmax,
            num_groups=cfg_mc.moe_router_num_groups, group_topk=cfg_mc.moe_router_group_topk,
            scaling_factor=cfg_mc.moe_router_topk_scaling_factor, score_function=cfg_mc.moe_router_score_function,
            expert_bias=bias)
    return float((dense - probs.float()).abs().max())


def bridge_provider(cfg):
    from megatron.bridge import AutoBridge

    with jl.quiet():
        provider = AutoBridge.from_hf_config(cfg).to_megatron_provider(load_weights=False)
    return provider


def judge_one(spec: dict) -> dict:
    case, family, build = spec["case"], spec["family"], spec.get("build")
    from moeforge.compiler.importer.hf import families as F

    fam = next(f for f in F.FAMILIES if f.name == family)
    verdict = {"case": case, "family": family, "judge": fam.judge, "error": None, "diffs": [], "facts": {},
               "stale": False, "rope": None, "routing": None}
    if not case.startswith("file:"):
        verdict["stale"] = hf_cases.class_text(case) != hf_cases.case_files()[case].read_text()
    try:
        cfg = hf_cases.config_object(case)
        plan, mine = ours(build)
        decoder, whole, text = meta_model(cfg)
        if fam.judge == "bridge":
            provider = bridge_provider(cfg)
            verdict["facts"] = {"layer_spec": getattr(provider.transformer_layer_spec, "__name__", None) or
                                getattr(getattr(provider.transformer_layer_spec, "func", None), "__name__", None),
                                "moe_router_score_function": provider.moe_router_score_function,
                                "moe_router_enable_expert_bias": provider.moe_router_enable_expert_bias,
                                "rotary_interleaved": provider.rotary_interleaved}
            if mine is not None:
                with jl.quiet():
                    provider.finalize()
                verdict["diffs"] = field_diffs(mine, provider, plan)
        else:
            facts = tree_facts(decoder, whole, text, cfg)
            if type(decoder).__name__.startswith("Llama4"):
                facts.update(llama4_features(decoder, text))
            verdict["facts"] = facts
            if mine is not None:
                for name, theirs in facts.items():
                    a = getattr(mine, name, None)
                    if name in ("share_embeddings_and_output_weights", "vocab_size"):
                        a = plan["model"][name]
                    elif name == "activation_func":
                        a = jl.activation_name(a)
                    a = layer_list(name, a, mine.num_layers)
                    if not jl.same(jl.norm(a), jl.norm(theirs)):
                        verdict["diffs"].append({"field": name, "plan": jl.norm(a), "theirs": jl.norm(theirs)})
        if mine is not None:
            verdict["rope"] = rope_check(decoder, text, mine, plan)
            verdict["routing"] = routing_check(decoder, text, mine)
    except Exception as exc:  # noqa: BLE001 - reported as the verdict
        verdict["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:800]}"
    return verdict


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    specs = json.loads(Path(argv[0]).read_text())
    from bridge_judge import install_te_free_bridge
    import hf_class_defaults

    install_te_free_bridge()
    verdicts = [judge_one(s) for s in specs]
    print(json.dumps({"verdicts": verdicts, "class_defaults": hf_class_defaults.defaults()}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
