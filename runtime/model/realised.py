"""Read the configuration back from the built model and compare it with the plan.

Why: megatron-core rewrites settings during construction (``__post_init__`` normalisations,
deprecated flags mapped onto new ones, ETP defaulting to TP, a TE spec quietly using local
experts) and a benchmark of the rewritten configuration is mislabelled data.  After the model is
built, every field in ``runtime.checked_fields`` is read from the config *and*, where a module
embodies it, from the modules themselves (token-dispatcher class, flex backend manager, parallel
group sizes); any difference is listed field by field and the run stops: no silent fallback.
"""

from __future__ import annotations

import enum

import torch

from ..errors import RealisedMismatch
from ..plan.document import Plan

DISPATCHER_CLASSES = {
    "MoEAllGatherTokenDispatcher": "allgather",
    "MoEAlltoAllTokenDispatcher": "alltoall",
    "MoEFlexTokenDispatcher": "flex",
}
FLEX_MANAGERS = {"_DeepepManager": "deepep", "_HybridEPManager": "hybridep",
                 "_NCCLEPManager": "ncclep"}
# Read back from the modules whenever the plan states them, even if checked_fields omits them:
# megatron-core >= 0.18 builds SequentialMLP for moe_grouped_gemm on the local spec without a word.
ALWAYS_CHECKED = ("moe_token_dispatcher_type", "moe_grouped_gemm")
PARALLEL_SIZES = {
    "tensor_model_parallel_size": "get_tensor_model_parallel_world_size",
    "pipeline_model_parallel_size": "get_pipeline_model_parallel_world_size",
    "context_parallel_size": "get_context_parallel_world_size",
    "expert_model_parallel_size": "get_expert_model_parallel_world_size",
    "expert_tensor_parallel_size": "get_expert_tensor_parallel_world_size",
}
CUDA_GRAPH_FIELDS = ("cuda_graph_scope", "cuda_graph_modules")


def jsonable(value):
    """Enums -> names, dtypes -> strings, sequences -> lists (for comparison and the report)."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return getattr(value, "__name__", repr(value))


def moe_layers(chunks: list) -> list:
    from megatron.core.transformer.moe.moe_layer import MoELayer

    return [m for c in chunks for m in c.modules() if isinstance(m, MoELayer)]


def _one(values: set, what: str):
    """The single value all layers agree on, or a description of the disagreement."""
    if len(values) == 1:
        return next(iter(values))
    return f"<layers disagree on {what}: {sorted(map(str, values))}>"


def module_facts(chunks: list) -> dict:
    """What the built modules embody, independent of what the config claims."""
    layers = moe_layers(chunks)
    facts: dict = {"moe_layers_on_rank": len(layers)}
    if layers:
        classes = {type(m.token_dispatcher).__name__ for m in layers}
        facts["moe_token_dispatcher_type"] = _one(
            {DISPATCHER_CLASSES.get(c, c) for c in classes}, "dispatcher")
        flex = [m for m in layers if type(m.token_dispatcher).__name__ == "MoEFlexTokenDispatcher"]
        managers = {type(getattr(m.token_dispatcher, "_comm_manager", None)).__name__
                    for m in flex}
        if managers:
            facts["moe_flex_dispatcher_backend"] = _one(
                {FLEX_MANAGERS.get(c, c) for c in managers}, "flex backend")
        shared = [m for m in layers if getattr(m, "use_shared_expert", False)]
        if shared:
            facts["moe_shared_expert_overlap"] = _one(
                {bool(m.shared_expert_overlap) for m in shared}, "shared-expert overlap")
        experts = {type(m.experts).__name__ for m in layers}
        facts["expert_module"] = _one(experts, "expert module")
        facts["moe_grouped_gemm"] = _one(
            {c in ("TEGroupedMLP", "GroupedMLP") for c in experts}, "grouped gemm")
    te = any(type(m).__module__.startswith("megatron.core.extensions.transformer_engine")
             for c in chunks for m in c.modules())
    facts["transformer_impl"] = "transformer_engine" if te else "local"
    return facts


def _group_size(field: str):
    from megatron.core import parallel_state

    return getattr(parallel_state, PARALLEL_SIZES[field])()


def _normalise(field: str, value, cfg):
    value = jsonable(value)
    if field in CUDA_GRAPH_FIELDS:
        if value in (None, "full", ["full"]):
            return []
        if isinstance(value, str):
            return sorted(value.split(","))
        return sorted(value)
    return value


def _inert(field: str, cfg, facts: dict, tc: dict) -> str | None:
    """Why ``field`` has no effect in this build (so it is recorded, not compared), or None."""
    if field == "moe_flex_dispatcher_backend" and facts.get(
            "moe_token_dispatcher_type", tc.get("moe_token_dispatcher_type")) != "flex":
        return "inert: the dispatcher is not flex"
    if field == "recompute_modules" and getattr(cfg, "recompute_granularity", None) != "selective":
        return "inert: recompute_granularity is not 'selective'"
    return None


def compare(plan: Plan, cfg, chunks: list) -> dict:
    """{field: {plan, realised, ok, read_from}} for every checked field; raises on mismatch."""
    tc = plan.transformer_config
    facts = module_facts(chunks)
    fields = list(dict.fromkeys(plan.runtime.get("checked_fields", [])
                                + [f for f in ALWAYS_CHECKED if f in tc]))
    results, problems = {}, []
    for field in fields:
        planned = _normalise(field, tc.get(field), cfg) if field in tc else "<not in plan>"
        sources = {}
        if hasattr(cfg, field):
            sources["config"] = _normalise(field, getattr(cfg, field), cfg)
        if field in facts:
            sources["modules"] = facts[field]
        if field in PARALLEL_SIZES:
            sources["parallel_state"] = _group_size(field)
        note = _inert(field, cfg, facts, tc)
        if note:
            results[field] = {"plan": planned, "realised": sources.get("config"), "ok": True,
                              "read_from": sorted(sources), "note": note}
            continue
        if not sources:
            inert = planned in (None, False, [], "<not in plan>")
            results[field] = {"plan": planned, "realised": "<no such field>", "ok": inert,
                              "read_from": []}
            if not inert:
                problems.append(f"{field}: plan {planned!r}, but megatron-core has no such field")
            continue
        differing = {src: v for src, v in sources.items() if v != planned}
        realised = next(iter(differing.values())) if differing else planned
        results[field] = {"plan": planned, "realised": realised, "ok": not differing,
                          "read_from": sorted(sources)}
        for src, v in differing.items():
            problems.append(f"{field}: plan {planned!r}, realised {v!r} (read from {src})")
    impl = plan.runtime.get("transformer_impl", "local")
    if facts["transformer_impl"] != impl:
        problems.append(f"transformer_impl: plan {impl!r}, built modules are "
                        f"{facts['transformer_impl']!r}")
    results["_modules"] = facts
    if problems:
        raise RealisedMismatch(
            f"{len(problems)} field(s) differ from the plan:\n  " + "\n  ".join(problems)
            + "\nmegatron-core changed the configuration during construction; fix the plan "
            "(state the realised value) instead of running a different configuration."
        )
    return results
