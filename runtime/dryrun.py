"""``python -m runtime.dryrun PLAN.json --rank R``: build one rank's shard of a large layout.

Why: "does this layout fit, and what lands on each rank?" should be answered before a job is
queued.  One process joins torch's fake process group as rank R of the plan's world, initialises
megatron-core's parallel state without gloo groups, and builds that rank's GPTModel chunks on the
meta device (shapes and parameter counts are real, nothing is allocated, so a 671B layout fits in
a laptop's memory).  It prints JSON: parameter counts (total, dense/attention, expert,
embedding), the realised configuration, and a weights/gradients/optimizer/activation estimate
with its formulas.  The backend gate runs first, as for training; ``--local-spec`` builds a
TE/flex plan with the local spec and the alltoall dispatcher instead and says so.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from . import gate, memory_estimate, model, realised
from . import plan as plan_mod
from .errors import BackendMissing, PlanError, RuntimeFailure, report_and_exit


def substitute_local(plan):
    """Same architecture, buildable without TE/DeepEP/HybridEP; returns (plan, substitutions)."""
    raw = copy.deepcopy(plan.raw)
    subs = []
    if raw["runtime"].get("transformer_impl") == "transformer_engine":
        raw["runtime"]["transformer_impl"] = "local"
        subs.append("runtime.transformer_impl: transformer_engine -> local")
    tc = raw["transformer_config"]
    if tc.get("moe_token_dispatcher_type") == "flex":
        tc["moe_token_dispatcher_type"] = "alltoall"
        subs.append("moe_token_dispatcher_type: flex -> alltoall")
    if tc.get("moe_grouped_gemm"):
        tc["moe_grouped_gemm"] = False
        subs.append("moe_grouped_gemm: true -> false (same parameter count)")
    for key in ("moe_permute_fusion", "moe_router_fusion"):
        if tc.get(key):
            tc[key] = False
            subs.append(f"{key}: true -> false (no parameters)")
    for key in ("cuda_graph_impl",):
        if tc.get(key) not in (None, "none"):
            tc[key] = "none"
            subs.append(f"{key}: -> none")
    replaced = ("transformer_engine", "deep_ep", "grouped_gemm")
    raw["runtime"]["requires"] = [r for r in raw["runtime"].get("requires", [])
                                  if r.get("module") not in replaced]
    raw["runtime"]["checked_fields"] = [
        f for f in raw["runtime"].get("checked_fields", [])
        if f not in ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "cuda_graph_impl",
                     "cuda_graph_scope", "cuda_graph_modules", "moe_grouped_gemm")]
    return plan_mod.check(raw, plan.path), subs


class _ParameterFreeCoreAttention:
    """Stand-in for a core attention module; core attention holds no parameters."""

    def __new__(cls, *args, **kwargs):
        import torch

        return torch.nn.Identity()


def mla_local_core_attention_hook(substitutions: list[str]):
    """megatron-core 0.16.1's local DotProductAttention rejects MLA's k_channels/v_channels, so
    MLA on the local spec cannot be built; in a dry run (no forward, counts only) the
    parameter-free core attention is replaced by a stand-in, and the substitution is stated."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.multi_latent_attention import MLASelfAttention

    def visit(node, seen):
        if node is None or isinstance(node, (str, int, float, bool, type)) or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, (list, tuple)):
            for item in node:
                visit(item, seen)
            return
        subs = getattr(node, "submodules", None)
        if getattr(node, "module", None) is MLASelfAttention and \
                getattr(subs, "core_attention", None) is DotProductAttention:
            subs.core_attention = _ParameterFreeCoreAttention
            note = "MLA core_attention: local DotProductAttention -> parameter-free stand-in"
            if note not in substitutions:
                substitutions.append(note)
        for value in vars(node).values() if hasattr(node, "__dict__") else ():
            visit(value, seen)

    def hook(spec):
        visit(spec, set())
        return spec

    return hook


def init_fake_world(world: int, rank: int) -> None:
    import torch
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not 0 <= rank < world:
        raise PlanError(f"--rank {rank} is outside the plan's world of {world} ranks")
    torch.distributed.init_process_group("fake", store=FakeStore(), world_size=world, rank=rank)


def decoder_layers(chunks) -> list[tuple[int, str]]:
    """(global 1-based layer number, "moe"|"dense") of this rank's decoder layers (not MTP)."""
    from megatron.core.transformer.moe.moe_layer import MoELayer

    return [(layer.layer_number, "moe" if isinstance(layer.mlp, MoELayer) else "dense")
            for chunk in chunks for layer in chunk.decoder.layers]


def dry_run(plan, rank: int, substitutions: list[str], estimate_for=None) -> dict:
    """Build rank ``rank``'s shard; memory is estimated for ``estimate_for`` (the plan as
    written, when --local-spec substituted the implementation) or ``plan``."""
    import torch
    from megatron.core import parallel_state

    from . import cpu_support

    cpu_support.install()
    init_fake_world(plan.layout["world_size"], rank)
    model.init_parallel(plan, create_gloo_process_groups=False)
    cfg, ignored = model.build_config(
        plan, {"use_cpu_initialization": True, "perform_initialization": False})
    with torch.device("meta"), cpu_support.device_scope(force=True):
        hook = None
        if plan.transformer_config.get("multi_latent_attention") and \
                not model.use_transformer_engine(plan):
            hook = mla_local_core_attention_hook(substitutions)
        chunks = model.build_model(plan, cfg, cast_dtype=False, spec_hook=hook)
    checked = realised.compare(plan, cfg, chunks)
    counts = model.count_parameters(chunks)
    ps = parallel_state
    pp_rank = ps.get_pipeline_model_parallel_rank()
    dp, edp = ps.get_data_parallel_world_size(), ps.get_expert_data_parallel_world_size()
    has_output = any(getattr(c, "post_process", False) for c in chunks)
    layers = decoder_layers(chunks)
    kinds = [kind for _, kind in layers]
    target = (estimate_for or plan).raw
    mem = memory_estimate.weights_and_optimizer(counts, target, dp, edp)
    mem.update(memory_estimate.activations(target, kinds, pp_rank, has_output))
    mem["total_bytes"] = sum(v for k, v in mem.items() if k.endswith("_bytes"))
    mem["total_gib"] = round(mem["total_bytes"] / 2**30, 3)
    result = {
        "plan": str(plan.path),
        "rank": rank,
        "world_size": plan.layout["world_size"],
        "coordinates": {
            "tp": ps.get_tensor_model_parallel_rank(), "pp": pp_rank,
            "cp": ps.get_context_parallel_rank(), "ep": ps.get_expert_model_parallel_rank(),
            "etp": ps.get_expert_tensor_parallel_rank(), "dp": ps.get_data_parallel_rank(),
        },
        "group_sizes": {"dp": dp, "edp": edp},
        "device": "meta",
        "model_chunks": len(chunks),
        "decoder_layers": {"numbers": [n for n, _ in layers], "moe": kinds.count("moe"),
                           "dense": kinds.count("dense")},
        "mtp_layers_on_rank": sum(len(c.mtp.layers) for c in chunks
                                  if getattr(c, "mtp", None) is not None),
        "parameters": counts,
        "parameters_per_chunk": [model.count_parameters([c]) for c in chunks],
        "memory_estimate": mem,
        "realised": checked,
        "substitutions": substitutions,
        "ignored_plan_fields": ignored,
        "megatron_core": model.megatron_version(),
    }
    parallel_state.destroy_model_parallel()  # so the next --rank can be built in this process
    torch.distributed.destroy_process_group()
    return result


def parse_ranks(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise PlanError(
            f"--rank must be an integer or a comma-separated list, got {text!r}") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.dryrun", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan")
    parser.add_argument("--rank", default="0",
                        help="global rank to build, or a comma-separated list (default 0)")
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--local-spec", action="store_true",
                        help="build TE/flex plans with the local spec and alltoall (stated)")
    args = parser.parse_args(argv)
    try:
        plan = plan_mod.load(args.plan)
        written, subs = plan, []
        if args.local_spec:
            plan, subs = substitute_local(plan)
        try:
            gate.check(plan)
        except BackendMissing as err:
            raise BackendMissing(err.message + "\nFor parameter counts and memory, --local-spec "
                                 "builds the same architecture without these backends.") from None
        ranks = parse_ranks(args.rank)
        results = [dry_run(plan, r, list(subs), estimate_for=written) for r in ranks]
        result = results[0] if len(results) == 1 else {"plan": str(plan.path), "ranks": results}
    except RuntimeFailure as err:
        report_and_exit(err, prog="runtime.dryrun")
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
