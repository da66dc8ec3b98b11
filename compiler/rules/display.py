"""The text of a rule's Megatron message: its {placeholders} filled from a recipe's or a flat config's values.

Megatron's messages quote local values (`world_size (6) is not divisible by {model_size}`); the values are
computed here as megatron-core computes them before it raises (the layout's sizes through compiler/knobs/layout.py,
the pipeline's through the rule expressions of compiler/rules/layout.py), so the text is the one it prints.
Why in rules/: it evaluates rule expressions. The recipe path a knob is known by is compiler/knobs/display.py.
"""
from __future__ import annotations

import marshal

from moeforge.compiler.knobs import layout as L
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.versions import version_text
from moeforge.compiler.rules.expr import UNKNOWN, evaluate
from moeforge.compiler.rules.layout import SHOWN

# the version facts, whose values Megatron prints as releases (0.16.1), not as version_int's numbers
_SPEC = {**K.BY_FIELD, **K.FACT_BY_FIELD}


def known_int(*values) -> bool:
    """Every value is an integer (a bool is not: Megatron's arithmetic on it is not a size)."""
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def megatron_display(rule, values: dict) -> dict:
    """Text for the {placeholders} of a rule's Megatron message, from a recipe's values (versions as
    Megatron prints them)."""
    text = rule.megatron_message_for(values) or ""
    if "{" not in text:
        return {}
    # the world, DP and EDP a refused layout would have, derived as the solver derives them (it stopped first)
    values = {**values, **{f: v for f, v in L.derive_sizes(values).items() if v is not None and values.get(f) is None}}
    shown = {f: version_text(v) if f in _SPEC and _SPEC[f].kind == "version" else v for f, v in values.items()}
    out = shown_values(shown, {})
    out.update({f: v for f, v in shown.items() if isinstance(v, str)})
    return out


def show(v) -> str:
    """A value as Megatron's Python prints it (None, True, 4)."""
    return "None" if v is None else str(v)


def shown_values(env: dict, display: dict) -> dict:
    """Text for the {placeholders} of Megatron's messages from a configuration's values (UNKNOWN ones left
    out, and those `display` already holds): each value as Megatron prints it, and the local values
    megatron-core computes before it raises (model_size, etp, the pipeline's middle layers, ...)."""
    out = {}
    for key, value in env.items():
        if value is UNKNOWN or key in display:
            continue
        out[key] = show(value)
    g = env.get
    tp, cp, pp = g("tensor_model_parallel_size"), g("context_parallel_size"), g("pipeline_model_parallel_size")
    if known_int(tp, cp, pp):
        out["model_size"] = str(L.model_size(tp, cp, pp))
    etp = L.effective_etp(g("expert_tensor_parallel_size"), tp)
    if known_int(etp):
        out["etp"] = str(etp)
    if known_int(etp, g("expert_model_parallel_size"), pp):
        out["expert_tensor_model_pipeline_parallel_size"] = str(L.expert_model_size(etp, g("expert_model_parallel_size"), pp))
    if known_int(g("num_layers"), pp) and pp:
        out["num_layers_per_pipeline_rank"] = str(g("num_layers") // pp)
    if known_int(g("pipeline_layout_stages"), pp) and pp:
        out["pipeline_layout_vpp"] = str(g("pipeline_layout_stages") // pp)
    for key, expr in SHOWN.items():
        value = evaluate(expr, env)
        if known_int(value):
            out[key] = str(value)
    deprecated = {n: g(n) for n in ("moe_deepep_num_sms", "moe_hybridep_num_sms") if known_int(g(n))}
    out["deprecated_num_sms"] = str(deprecated)
    modules = g("cuda_graph_modules")
    out["cuda_graph_scopes_msg"] = f" with scopes {modules}" if isinstance(modules, list) and modules else ""
    offload = g("offload_modules")
    if isinstance(offload, list):  # megatron-core's own set expressions, so the text is the one it prints
        # before 0.19 (fused_group_mlp came with it)
        allowed = set_literal(*K.OFFLOAD_MODULES[:-1])
        out["invalid_modules"], out["allowed_modules"] = str(set(offload) - allowed), str(allowed)
        out["offload_inside_moe"] = str(set_literal("moe_act", "expert_fc1", "fused_group_mlp") & set(offload))
        out["moe_partial_offload"] = str(set_literal("expert_fc1", "moe_act") & set(offload))
        out["local_unsupported_offload"] = str(sorted(set(offload) - {"expert_fc1", "moe_act", "fused_group_mlp"}))
    return out


def set_literal(*items: str) -> set:
    """The set a literal {items...} in an installed (byte-compiled) module is, in its iteration order, so that
    printing it gives the text Megatron prints.  CPython builds a literal of three or more constants as
    set().update(a frozenset constant), and the .pyc stores that frozenset sorted by marshal.dumps (bpo-37596),
    so its elements are re-added in that order on import; a shorter literal adds its items in source order.
    A set's iteration order depends on its insertion history, so any other construction (set(frozenset(...)),
    a fresh compile) prints the same elements in another order under some hash seeds."""
    if len(items) < 3:
        out: set = set()
        for item in items:
            out.add(item)
        return out
    return set(marshal.loads(marshal.dumps(frozenset(items))))
