"""The MoE half of the Hugging Face reader: experts, shared experts, which layers are MoE, the router (scores,
normalisation, expert bias, groups, scaling) and the balance loss, as each family's config.json says them."""
from __future__ import annotations

from moeforge.compiler.importer.hf import families as F
from moeforge.compiler.importer.hf.keys import HfRefused, Keys, Read
from moeforge.compiler.launch_reader.text import ImportError_


def moe(keys: Keys, out: Read) -> None:
    """Read the MoE half of a config (experts, shared experts, MoE layers, router) into `out`, each with its source."""
    fam, get, put = keys.family, keys.get, out.put
    value, src = get(*F.EXPERTS, required=True)
    put("moe.num_experts", value, src)
    topk, src = get(*F.TOPK, required=True)
    put("moe.router_topk", topk, src)
    width, wsrc = get(fam.expert_width)
    put("moe.ffn_hidden_size", width, wsrc)
    shared, src = get("shared_expert_intermediate_size", default=None)
    count, csrc = get("n_shared_experts", "moe_num_shared_experts", default=None)
    if shared:
        put("moe.shared_expert_intermediate_size", shared, src)
    elif shared == 0:  # Qwen3-Coder-480B-A35B; Megatron-Bridge's Qwen3MoE provider builds no shared expert either
        put("moe.shared_expert_intermediate_size", None, f"{src} 0: no shared expert")
    elif count:
        put("moe.shared_expert_intermediate_size", count * width, f"{csrc} {count} x {wsrc} {width}")
    else:
        put("moe.shared_expert_intermediate_size", None, "no shared expert")
    if "shared_gate" in fam.features:
        put("moe.shared_expert_gate", True, "shared_expert_gate: a sigmoid gate on the shared expert's output")
    put("moe.layer_freq", *_moe_layers(keys, out.fields["architecture.num_layers"][0]))
    _router(keys, out, topk)
    kind, why, coef_key, fallback, fallback_why = fam.balancing
    keys.read.add("seq_aux")
    if kind == "seq_aux_loss" and keys.data.get("seq_aux") is False:
        kind, why = "aux_loss", "seq_aux false: a batch-wise balance loss"
    put("moe.router_load_balancing_type", kind, why)
    coef, src = get(coef_key, default=None) if coef_key else (None, None)
    if coef is not None:
        put("moe.aux_loss_coeff", float(coef), src)
    elif fallback is not None:
        put("moe.aux_loss_coeff", fallback, fallback_why)
    elif kind != "none":
        out.notes.append(f"{keys.prefix}{coef_key}: absent, so the auxiliary loss weighs megatron-core's default 0.0 "
                         "(nothing); set moe.aux_loss_coeff in the model document")
    for hf in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        value, src = get(hf, default=None)
        if value is not None:
            put("mtp_num_layers", value or None, f"{src} {value}")
            break
    else:
        put("mtp_num_layers", None, "no multi-token prediction layers")


def _moe_layers(keys: Keys, layers: int) -> tuple:
    """(moe.layer_freq, source): which layers are MoE, as each family says it."""
    if keys.has("first_k_dense_replace"):
        k, src = keys.get("first_k_dense_replace")
        freq, fsrc = keys.get("moe_layer_freq", default=1)  # DeepSeek: MoE where i >= k and i % freq == 0
        pattern = [int(i >= k and i % freq == 0) for i in range(layers)]
        return _as_freq(pattern), f"{src} {k}" + (f", {fsrc} {freq}" if fsrc else "")
    step, src = keys.get("decoder_sparse_step", default=1)
    only, osrc = keys.get("mlp_only_layers", default=[])
    if src or osrc:  # Qwen: MoE where (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers
        pattern = [int((i + 1) % step == 0 and i not in only) for i in range(layers)]
        return _as_freq(pattern), ", ".join(s for s in (f"{src} {step}" if src else "",
                                                         f"{osrc} {only}" if osrc else "") if s)
    return 1, "every layer is MoE"


def _router(keys: Keys, out: Read, topk: int) -> None:
    fam, get, put = keys.family, keys.get, out.put
    score, src = get("scoring_func", default=None)
    if score is not None and score not in ("softmax", "sigmoid"):
        raise HfRefused(f"{src} {score!r}: megatron-core scores experts with softmax or sigmoid")
    if score is None:
        score, src = fam.score
    put("moe.router_score_function", score, src)
    method, msrc = get("topk_method", default=None)
    groups, gsrc = get("n_group", default=None)
    group_topk, tsrc = get("topk_group", default=None)
    if score == "sigmoid":
        norm, nsrc = get("norm_topk_prob", default=True)
        if not norm and topk > 1:
            raise HfRefused(f"{nsrc} false with sigmoid scores: megatron-core renormalises the top-k sigmoid scores")
        bias = "expert_bias" in fam.features and method in (None, "noaux_tc")
        why = "e_score_correction_bias: selection by score + bias" + (f" ({msrc} {method})" if method else "")
        put("moe.router_enable_expert_bias", bias, why if bias else f"{msrc or 'topk_method'} {method}: no "
                                                                    "selection bias")
        if groups and groups > 1 and not group_topk:
            raise ImportError_(f"{gsrc} {groups}: topk_group missing; expected how many groups each token uses")
        if groups and groups > 1 and group_topk < groups and topk // group_topk != 2:
            raise HfRefused(f"{gsrc} {groups}, {tsrc} {group_topk}: the router ranks groups by their two best "
                            f"scores; megatron-core ranks them by their best topk / topk_group = {topk // group_topk}")
    else:
        mode = fam.router
        if mode == "norm_topk_prob":
            norm, nsrc = get("norm_topk_prob", default=False)
            put("moe.router_pre_softmax", not norm,
                f"{nsrc or 'norm_topk_prob absent'} {str(bool(norm)).lower()}: " + (
                    "softmax over the top-k logits (the selected weights renormalised)" if norm
                    else "softmax over all experts, the top-k weights kept as they are"))
        else:  # renormalised top-k softmax weights, or a softmax over the top-k logits: the same weights
            put("moe.router_pre_softmax", False, {
                "always": f"{fam.score[1].split(':')[0]} renormalises the top-k weights: a softmax over the top-k "
                          "logits",
                "topk_then_softmax": f"{fam.score[1]}"}[mode])
        if method == "group_limited_greedy":
            if group_topk and topk // group_topk != 1:
                raise HfRefused(f"{msrc} group_limited_greedy: the router ranks groups by their best expert; "
                                f"megatron-core ranks them by their best topk / topk_group = {topk // group_topk}")
        elif method not in (None, "greedy"):
            raise HfRefused(f"{msrc} {method!r}: softmax routing without groups (greedy) or group_limited_greedy")
        if method != "group_limited_greedy":
            groups = group_topk = None
    if groups:
        put("moe.router_num_groups", groups, gsrc)
        put("moe.router_group_topk", group_topk, tsrc)
    value, src = get("routed_scaling_factor", default=None)
    if value is not None:
        put("moe.router_topk_scaling_factor", float(value), src)


def _as_freq(pattern: list[int]) -> int | list[int]:
    """megatron-core's moe_layer_freq: 1 when every layer is MoE, else the 0/1 list."""
    return 1 if all(pattern) else pattern
