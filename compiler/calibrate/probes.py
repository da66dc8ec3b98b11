"""Which run would settle an undetermined constant: one of the given runs with one recipe setting changed.

Each probe is a `--set` a team can run (more micro-batches, more layers, EP overlap on, ...) and the same
change applied to the run's compiled plan, so the step-time model can price the run that does not exist
yet; fit.py adds its Jacobian row and asks whether the constant is now determined.
"""
from __future__ import annotations

import copy

from moeforge.compiler.knobs.layout import num_microbatches


def _gbs(plan: dict) -> tuple[str, dict] | None:
    p = copy.deepcopy(plan)
    tr = p["training"]
    tr["global_batch_size"] *= 2
    tr["num_microbatches"] = num_microbatches(tr["global_batch_size"], tr["micro_batch_size"], p["layout"]["dp"])
    return f"training.global_batch_size={tr['global_batch_size']}", p


def _layers(plan: dict) -> tuple[str, dict] | None:
    tc = plan["transformer_config"]
    if plan["layout"]["pp"] > 1 or tc.get("pipeline_model_parallel_layout") or tc.get("mtp_num_layers"):
        return None
    if isinstance(tc.get("moe_layer_freq"), list) or tc.get("linear_attention_freq"):
        return None
    p = copy.deepcopy(plan)
    p["transformer_config"]["num_layers"] *= 2
    return f"model.architecture.num_layers={p['transformer_config']['num_layers']}", p


def _ep_overlap(plan: dict) -> tuple[str, dict] | None:
    tc = plan["transformer_config"]
    if plan["layout"]["ep"] < 2 or tc.get("overlap_moe_expert_parallel_comm"):
        return None
    p = copy.deepcopy(plan)
    p["transformer_config"]["overlap_moe_expert_parallel_comm"] = True
    if p["training"]["num_microbatches"] < 2:
        return _gbs(p)[0] + " moe.overlap.ep_comm=true", _gbs(p)[1]
    return "moe.overlap.ep_comm=true", p


def _delay_wgrad(plan: dict) -> tuple[str, dict] | None:
    tc = plan["transformer_config"]
    if not tc.get("overlap_moe_expert_parallel_comm") or tc.get("delay_wgrad_compute"):
        return None
    p = copy.deepcopy(plan)
    p["transformer_config"]["delay_wgrad_compute"] = True
    return "moe.overlap.delay_wgrad=true", p


def _seq(plan: dict) -> tuple[str, dict] | None:
    p = copy.deepcopy(plan)
    p["training"]["seq_length"] *= 2
    if p["model"].get("max_sequence_length", 0) < p["training"]["seq_length"]:
        p["model"]["max_sequence_length"] = p["training"]["seq_length"]
    return f"training.seq_length={p['training']['seq_length']}", p


def _hidden(plan: dict) -> tuple[str, dict] | None:
    tc = plan["transformer_config"]
    if tc.get("multi_latent_attention") or tc.get("experimental_attention_variant"):
        return None
    p = copy.deepcopy(plan)
    t = p["transformer_config"]
    if t.get("kv_channels") is None:
        t["kv_channels"] = t["hidden_size"] // t["num_attention_heads"]
    t["hidden_size"] *= 2
    return f"model.architecture.hidden_size={t['hidden_size']}", p


def _ffn(plan: dict) -> tuple[str, dict] | None:
    """Wider experts (or MLP, for a dense model): more GEMM FLOPs per token over the same [tokens, hidden]
    activations, which separates the GEMMs' achievable_fraction from the element-wise passes."""
    p = copy.deepcopy(plan)
    t = p["transformer_config"]
    key, field = (("model.moe.ffn_hidden_size", "moe_ffn_hidden_size") if t.get("moe_ffn_hidden_size")
                  else ("model.architecture.ffn_hidden_size", "ffn_hidden_size"))
    t[field] *= 2
    return f"{key}={t[field]}", p


PROBES = (_gbs, _layers, _ep_overlap, _delay_wgrad, _seq, _hidden, _ffn)


def candidates(runs):
    """(the run's name, the `--set` that changes it, the changed plan) for every probe of every given run: the
    runs a team could make next. Which of them settles a constant is fit.py's question (fit.settling_run)."""
    for run in runs:
        for probe in PROBES:
            made = probe(run.plan)
            if made is not None:
                yield run.name, made[0], made[1]
