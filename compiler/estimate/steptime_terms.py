"""The terms of the step-time model (steptime.py), each with its formula in numbers.

``assemble(ctx)`` returns (items, hidden, formulas, details): exposed seconds per item, seconds
hidden by overlap per item, the arithmetic per item, and intermediate quantities for --explain.
All times are per optimizer step on one GPU of the busiest pipeline stage.
"""
from __future__ import annotations

from moeforge.compiler.estimate import comm
from moeforge.compiler.estimate.activations import ACT, glu_factor
from moeforge.compiler.estimate.memory import state_bytes_per_param
from moeforge.compiler.estimate.steptime_constants import ADAM_BYTES_PER_PARAM, FP32_STATE_BYTES


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _compute(ctx: dict) -> dict:
    """Executed FLOPs of the stage per GPU; per-layer, per-micro-batch times for the overlap windows."""
    lay, st, m = ctx["lay"], ctx["stage"], ctx["microbatches"]
    share = ctx["tokens"] * lay.pp / lay.world_size  # tokens' worth of stage work per GPU
    f = st["flops"]
    total = sum(f.values()) * share
    grouped = expert_gemm_efficiency(ctx)
    experts = (f["experts"] + f["recompute_experts"]) * share / (ctx["rate"] * grouped)
    olf = ctx["perf"]["output_layer_fraction"]
    output = (f["logits"] + f["mtp"]) * share / (ctx["peak"] * olf)
    layers_s = (total - (f["experts"] + f["recompute_experts"] + f["logits"] + f["mtp"]) * share) / ctx["rate"]
    passes, hbm = ctx["perf"]["elementwise_passes"], ctx["perf"]["hbm_gbps"]
    elementwise = elementwise_bytes(ctx["plan"], ctx["perf"], st["layers"]) * share / (hbm * 1e9)
    sec = layers_s + experts + output + elementwise
    attn = (f["attention"] + f["core_attention"]) * share / ctx["rate"]
    experts = f["experts"] * share / (ctx["rate"] * grouped)
    nonexpert_gemm = (f["attention"] + f["dense_mlp"] + f["shared_expert"]) * share / ctx["rate"]
    layers, moe = max(1, st["layers"]), max(1, st["moe_layers"])
    return {"s": sec, "flops": total, "share": share,
            "attn_layer_mb": attn / layers / m, "expert_layer_mb": experts / moe / m,
            "core_s": f["core_attention"] * share / ctx["rate"], "nonexpert_gemm_s": nonexpert_gemm,
            "grouped": grouped,
            "formula": (f"{_fmt(sum(f.values()))} FLOP/token (incl. recompute {_fmt(f['recompute'])}) x "
                        f"{_fmt(share)} tok / ({_fmt(ctx['peak'])} x {ctx['perf']['achievable_fraction']}), "
                        f"expert GEMMs {_fmt(f['experts'] + f['recompute_experts'])} of them at x{grouped:.3f} "
                        f"({_fmt(expert_tokens(ctx))} tokens per local expert per micro-batch), output layer "
                        f"{_fmt(f['logits'] + f['mtp'])} of them at {olf:.4g} of peak ({_fmt(output)} s)"
                        + (f"; element-wise {passes:.4g} passes x {st['layers']} layers x {_fmt(share)} tok x "
                           f"{ctx['plan']['transformer_config']['hidden_size']} x {ACT} B / "
                           f"{hbm} GB/s ({_fmt(elementwise)} s)" if elementwise else ""))}


def elementwise_bytes(plan: dict, perf: dict, layers: int) -> float:
    """Bytes per token that the element-wise kernels of ``layers`` decoder layers move (norms, dropout,
    residual adds, activation functions, the MoE permutation's copies: neither GEMMs nor communication),
    counted as ``elementwise_passes`` bf16 passes over each layer's [tokens, hidden] activations, forward and
    backward; 0 unless a calibration sets the passes (compiler/estimate/calibration.py)."""
    return perf["elementwise_passes"] * layers * plan["transformer_config"]["hidden_size"] * ACT


def expert_tokens(ctx: dict) -> float:
    """Tokens one local expert's GEMM sees per micro-batch: the EP group's tokens x top-k, spread
    over the experts (balanced routing)."""
    tc, tr, lay = ctx["plan"]["transformer_config"], ctx["plan"]["training"], ctx["lay"]
    if not tc.get("num_moe_experts"):
        return 0.0
    tokens = tr["seq_length"] * tr["micro_batch_size"] / (lay.cp * lay.tp)
    return lay.ep * lay.expert_tp * tokens * tc["moe_router_topk"] / tc["num_moe_experts"]


def expert_gemm_efficiency(ctx: dict) -> float:
    """Grouped-GEMM efficiency relative to the dense GEMMs, for M tokens per local expert.

    An expert GEMM [M, K] x [K, N] (fc1: K = h, N = f x glu / etp; fc2: K = f / etp, N = h; the
    backward GEMMs have the same three sizes) does 2MKN FLOPs and moves its three bf16 operands,
    2(MK + KN + MN) bytes: arithmetic intensity I = 1 / (1/M + 1/K + 1/N) FLOP/byte.  Below the
    ridge point R = peak FLOP/s / HBM bytes/s it is memory-bound (the roofline: Williams, Waterman &
    Patterson 2009, CACM 52(4)); its time over the compute-bound time is the roofline's
    max(compute, memory) smoothed as their L2 norm, sqrt(1 + (R / I)^2) (loads and math overlap
    partly).  fc1 and fc2 are weighted by their FLOPs."""
    m = expert_tokens(ctx)
    if not m:
        return 1.0
    tc, etp = ctx["plan"]["transformer_config"], ctx["lay"].expert_tp
    h, f = tc["hidden_size"], tc.get("moe_ffn_hidden_size") or tc["ffn_hidden_size"]
    glu = glu_factor(tc)
    ridge = ridge_point(ctx)
    slowdown = 0.0
    for k, n, share in ((h, f * glu / etp, glu), (f / etp, h, 1)):
        intensity = 1 / (1 / m + 1 / k + 1 / n)
        slowdown += share * (1 + (ridge / intensity) ** 2) ** 0.5
    return (glu + 1) / slowdown


def ridge_point(ctx: dict) -> float:
    """The roofline ridge point in FLOP/byte: bf16 peak FLOP/s over HBM bytes/s (H100: 989e12 /
    3.35e12 = 295; B200: 2.25e15 / 8e12 = 281)."""
    perf = ctx["perf"]
    return perf["bf16_dense_tflops"] * 1e12 / (perf["hbm_gbps"] * 1e9)


def _tp(ctx: dict, c: dict) -> tuple[float, float, str]:
    lay, tc, tr, links = ctx["lay"], ctx["plan"]["transformer_config"], ctx["plan"]["training"], ctx["links"]
    if lay.tp == 1:
        return 0.0, 0.0, "tp = 1"
    tokens = tr["seq_length"] // lay.cp * tr["micro_batch_size"]
    per = comm.tp_bytes(tokens, tc["hidden_size"], lay.tp)
    n = ctx["stage"]["layers"] * ctx["microbatches"]
    total = links.ring_s(per * n, lay.tp)
    hid = min(total, c["nonexpert_gemm_s"]) if tc.get("tp_comm_overlap") else 0.0
    return total, hid, (f"{_fmt(per)} B/layer/mb x {n} layer-mb over {links.name(lay.tp)}"
                        + (" (tp_comm_overlap hides it behind the non-expert GEMMs)" if hid else ""))


def _cp(ctx: dict, c: dict) -> tuple[float, float, str]:
    lay, tc, tr, links = ctx["lay"], ctx["plan"]["transformer_config"], ctx["plan"]["training"], ctx["links"]
    if lay.cp == 1:
        return 0.0, 0.0, "cp = 1"
    _, a, d, g = ctx["heads"]
    if tc.get("multi_latent_attention"):
        width = a * (tc["qk_head_dim"] + tc["qk_pos_emb_head_dim"] + tc["v_head_dim"])
    else:
        width = 2 * g * d
    tokens = tr["seq_length"] // lay.cp * tr["micro_batch_size"]
    per = comm.cp_bytes(tokens, width // lay.tp, lay.cp)
    n = ctx["stage"]["attn_layers"] * ctx["microbatches"]
    total = links.ring_s(per * n, lay.tp * lay.cp)
    hid = min(total, c["core_s"])  # TE ring attention overlaps each step's p2p with the previous step's math
    return total, hid, (f"{_fmt(per)} B/attention-layer/mb x {n} over {links.name(lay.tp * lay.cp)}, "
                        "hidden behind core attention up to its compute")


def _ep(ctx: dict, c: dict) -> tuple[float, float, float, str, dict]:
    """EP all-to-all: (total, hidden, schedule overhead, formula, details)."""
    lay, tc, tr, links = ctx["lay"], ctx["plan"]["transformer_config"], ctx["plan"]["training"], ctx["links"]
    m, moe = ctx["microbatches"], ctx["stage"]["moe_layers"]
    if lay.ep == 1 or not moe:
        return 0.0, 0.0, 0.0, "ep = 1" if lay.ep == 1 else "no MoE layer on this stage", {}
    tokens = tr["seq_length"] // (lay.cp * lay.tp) * tr["micro_batch_size"]
    hierarchical = (tc.get("moe_token_dispatcher_type") == "flex"
                    and tc.get("moe_flex_dispatcher_backend") in ("deepep", "hybridep"))
    if hierarchical:  # one fabric crossing per remote NVLink domain, not per routed expert
        groups = tc.get("moe_router_num_groups"), tc.get("moe_router_group_topk")
        one = links.hierarchical_a2a_s(tokens, tc["moe_router_topk"], tc["hidden_size"], lay.ep, lay.expert_tp,
                                       groups if all(groups) else None)
    else:
        one = links.a2a_s(comm.a2a_bytes(tokens, tc["moe_router_topk"], tc["hidden_size"], lay.ep), lay.ep,
                          lay.expert_tp)
    recompute_moe = tc.get("recompute_granularity") == "selective" and "moe" in (tc.get("recompute_modules") or [])
    per_layer_mb = 4 + (2 if recompute_moe else 0)  # dispatch + combine, forward and backward (+ recompute)
    total = one * per_layer_mb * moe * m
    formula = (f"{per_layer_mb} all-to-alls x {_fmt(one * 1e3)} ms x {moe} MoE layers x {m} mb over "
               f"{links.a2a_link(lay.ep, lay.expert_tp)} (ep {lay.ep}, a2a efficiency {links.a2a_efficiency}"
               f"{', hierarchical: one fabric crossing per remote domain' if hierarchical else ''})")
    details = {"a2a_one_s": one, "expert_layer_mb_s": c["expert_layer_mb"], "attn_layer_mb_s": c["attn_layer_mb"]}
    hid = overhead = 0.0
    if tc.get("overlap_moe_expert_parallel_comm"):
        e, a = c["expert_layer_mb"], c["attn_layer_mb"]
        dwg = bool(tc.get("delay_wgrad_compute"))
        # combined 1F1B pairs each forward a2a with the other micro-batch's backward compute and
        # vice versa; delayed wgrad moves the expert wgrad (e/3) from the first window to the second
        windows = [e / 3 if dwg else 2 * e / 3, 2 * e / 3 if dwg else e / 3, 2 * a / 3, a / 3]
        overlapped = m - 1  # the first forward and the last backward have no partner
        hid = sum(min(one, w) for w in windows) * moe * overlapped
        slow = ctx["perf"]["ep_overlap_slowdown"] * c["s"] * overlapped / m * moe / max(1, ctx["stage"]["layers"])
        overhead += slow
        details["ep_overlap_slowdown_s"] = slow
        formula += (f"; EP overlap hides min(a2a, window) per layer-mb for windows expert "
                    f"{_fmt(windows[0] * 1e3)}/{_fmt(windows[1] * 1e3)} ms, attention {_fmt(windows[2] * 1e3)}/"
                    f"{_fmt(windows[3] * 1e3)} ms over {overlapped} overlapped mb")
        if dwg:
            launches = ctx["perf"]["delay_wgrad_launch_s"] * (tc["num_moe_experts"] // lay.ep) * moe * m
            overhead += launches
            details["delay_wgrad_launch_s"] = launches
    return total, hid, overhead, formula, details


def _pp(ctx: dict, busy: float) -> tuple[float, float, float, str, str]:
    """(bubble, p2p total, p2p hidden, formulas)."""
    lay, tc, tr, links = ctx["lay"], ctx["plan"]["transformer_config"], ctx["plan"]["training"], ctx["links"]
    if lay.pp == 1:
        return 0.0, 0.0, 0.0, "pp = 1", "pp = 1"
    m, v = ctx["microbatches"], lay.chunks
    bubble = (lay.pp - 1) / (v * m) * busy
    sp = tc.get("sequence_parallel") or lay.tp == 1
    per = tr["seq_length"] // lay.cp * tr["micro_batch_size"] * tc["hidden_size"] * comm.BF16 / (lay.tp if sp else 1)
    span = 2 * lay.world_size // lay.pp
    total = links.ring_s(per * 2 * m * v, span)  # activation forward, gradient backward, per chunk
    hid = total if (tc.get("overlap_p2p_comm") and lay.vpp) else 0.0
    return (bubble, total, hid, f"(p-1)/(v*m) = ({lay.pp}-1)/({v}*{m}) x {_fmt(busy)} s busy",
            f"{_fmt(per)} B x 2 x {m} mb x {v} chunks over {links.name(span)}"
            + (" (overlap_p2p_comm hides it)" if hid else ""))


def _dp(ctx: dict, c: dict) -> tuple[float, float, str]:
    lay, plan, links, counts = ctx["lay"], ctx["plan"], ctx["links"], ctx["counts"]
    ddp, opt = plan.get("ddp_config") or {}, plan.get("optimizer") or {}
    distributed = bool(opt.get("use_distributed_optimizer", ddp.get("use_distributed_optimizer")))
    dense, expert = counts["total"] - counts["expert"], counts["expert"]
    n_d, span_d = lay.dp * lay.cp, lay.tp * lay.cp * lay.dp
    n_e, span_e = lay.edp, lay.expert_tp * lay.ep * lay.edp
    rs_d, ag_d = comm.dp_bytes(dense, n_d, ctx["grad_bytes"], distributed)
    rs_e, ag_e = comm.dp_bytes(expert, n_e, ctx["grad_bytes"], distributed)
    rs = links.ring_s(rs_d, span_d) + links.ring_s(rs_e, span_e)
    ag = links.ring_s(ag_d, span_d) + links.ring_s(ag_e, span_e)
    per_mb = c["s"] / ctx["microbatches"]
    hid = (min(rs, 2 * per_mb / 3) if ddp.get("overlap_grad_reduce") else 0.0) + \
          (min(ag, per_mb / 3) if ddp.get("overlap_param_gather") and distributed else 0.0)
    on_d = links.name(span_d) if n_d > 1 else "no peer"
    on_e = links.name(span_e) if n_e > 1 else "no peer"
    return rs + ag, hid, (f"grads {ctx['grad_bytes']} B x (dense {dense} over dp*cp {n_d} on {on_d}, "
                          f"expert {expert} over edp {n_e} on {on_e}) "
                          f"{'reduce-scatter + bf16 all-gather' if distributed else 'all-reduce'}; overlap hides "
                          "up to the last micro-batch's backward / the first one's forward")


def _optimizer(ctx: dict) -> tuple[float, str]:
    lay, plan, counts = ctx["lay"], ctx["plan"], ctx["counts"]
    ddp, opt = plan.get("ddp_config") or {}, plan.get("optimizer") or {}
    distributed = bool(opt.get("use_distributed_optimizer", ddp.get("use_distributed_optimizer")))
    dense, expert = counts["total"] - counts["expert"], counts["expert"]
    shard = dense / (lay.dp * lay.cp) + expert / lay.edp if distributed else counts["total"]
    hbm = ctx["perf"]["hbm_gbps"]
    # the state is read and written once: lower-precision state (the precision-aware optimizer) moves less
    per_param = ADAM_BYTES_PER_PARAM - 2 * (FP32_STATE_BYTES - state_bytes_per_param(plan))
    return shard * per_param / (hbm * 1e9), f"{_fmt(shard)} params x {per_param} B / {hbm} GB/s"


def _host(ctx: dict) -> tuple[float, str]:
    """Host overhead: a per-step cost and a per-layer-per-micro-batch cost on the stage's layers (launches,
    Python, the dispatcher's host-side work); zero unless a calibration sets them."""
    perf, layers, m = ctx["perf"], max(1, ctx["stage"]["layers"]), ctx["microbatches"]
    step, per = perf["host_step_s"], perf["host_layer_microbatch_s"]
    return step + per * layers * m, (f"{_fmt(step)} s per step + {_fmt(per)} s x {layers} layers x {m} mb"
                                     if step or per else "no host term (no calibration sets one)")


def assemble(ctx: dict) -> tuple[dict, dict, dict, dict]:
    """Price every term of one step for steptime.py: (items, hidden, formulas, details) as the module doc says."""
    c = _compute(ctx)
    items, hidden, formulas = {"compute": c["s"]}, {}, {"compute": c["formula"]}
    for key, fn in (("tp_comm", _tp), ("cp_comm", _cp)):
        total, hid, formulas[key] = fn(ctx, c)
        items[key], hidden[key] = total - hid, hid
    total, hid, overhead, formulas["ep_a2a"], details = _ep(ctx, c)
    items["ep_a2a"], hidden["ep_a2a"] = total - hid, hid
    items["overhead"] = overhead
    formulas["overhead"] = (f"EP-overlap schedule {_fmt(details.get('ep_overlap_slowdown_s', 0.0))} s + delayed-wgrad "
                            f"launches {_fmt(details.get('delay_wgrad_launch_s', 0.0))} s")
    items["host"], formulas["host"] = _host(ctx)
    busy = items["compute"] + items["tp_comm"] + items["cp_comm"] + items["ep_a2a"] + overhead + items["host"]
    items["pp_bubble"], p2p, p2p_hid, formulas["pp_bubble"], formulas["pp_p2p"] = _pp(ctx, busy)
    items["pp_p2p"], hidden["pp_p2p"] = p2p - p2p_hid, p2p_hid
    total, hid, formulas["dp_reduce"] = _dp(ctx, c)
    items["dp_reduce"], hidden["dp_reduce"] = total - hid, hid
    items["optimizer"], formulas["optimizer"] = _optimizer(ctx)
    details.update({"microbatches": ctx["microbatches"], "executed_flops": c["flops"]})
    return items, hidden, formulas, details
