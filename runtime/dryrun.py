"""``python -m runtime.dryrun PLAN.json [PLAN.json ...] --rank R``: build one rank's shard.

Why: "does this layout fit, and what lands on each rank?" should be answered before a job is
queued.  One process joins torch's fake process group as rank R of the plan's world, initialises
megatron-core's parallel state without gloo groups, and builds that rank's GPTModel chunks on the
meta device (shapes and parameter counts are real, nothing is allocated, so a 671B layout fits in
a laptop's memory).  It prints JSON: parameter counts (total, dense/attention, expert,
embedding), the realised configuration, and a weights/gradients/optimizer/activation estimate
with its formulas.  The backend gate runs first, as for training.

``--local-spec`` builds a plan with megatron-core's local spec when Transformer Engine, DeepEP,
HybridEP, grouped_gemm or APEX's CUDA extensions are absent: every plan value that only those
backends can build is mapped to one the local spec builds with the same parameter shapes, and
each mapping is listed in the report under ``substitutions`` (field, plan value, value used,
why).  The memory estimate is always made for the plan as written.

``--rank`` takes a comma-separated list; negative ranks count from the end (``-1`` is the last
rank of the plan's world).  Several plans can be given: each is dry-run in turn in this one
process (megatron-core is imported once) and the JSON is ``{"plans": [...]}``; a plan that fails
gets an ``error`` entry, the others still run, and the exit code is the first failure's.
Every failure is a one-line message and a non-zero exit, never a traceback
(``MOEFORGE_TRACEBACK=1`` prints megatron-core's traceback of an unexpected failure too).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

from . import gate, memory_estimate, model, realised
from . import plan as plan_mod
from .errors import BackendMissing, PlanError, RuntimeFailure, report_and_exit

NO_PARAMETERS = "holds no parameters, so the counts are those of the planned model"


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _sub(subs: list, field: str, planned, used, why: str) -> None:
    subs.append({"field": field, "plan": planned, "used": used, "why": why})


def substitute_local(plan):
    """Same architecture, buildable with the local spec and without TE/DeepEP/HybridEP/APEX
    extensions; returns (plan, substitutions).  Each substitution is a dict
    {field, plan, used, why}; none of them changes a parameter shape."""
    raw = copy.deepcopy(plan.raw)
    subs: list[dict] = []
    rt, tc = raw["runtime"], raw["transformer_config"]

    def flag(field: str, why: str, used=False) -> bool:
        value = tc.get(field)
        if value in (None, False, "none", [], {}) or value == used:
            return False
        tc[field] = used
        _sub(subs, field, value, used, why)
        return True

    if rt.get("transformer_impl") == "transformer_engine":
        rt["transformer_impl"] = "local"
        _sub(subs, "runtime.transformer_impl", "transformer_engine", "local",
             "--local-spec: megatron-core's local layer spec (ColumnParallelLinear, torch norms, "
             "DotProductAttention) has the parameter shapes of the Transformer Engine spec")
    if tc.get("moe_token_dispatcher_type") == "flex":
        backend = tc.get("moe_flex_dispatcher_backend") or "deepep"
        flag("moe_token_dispatcher_type",
             f"the flex dispatcher needs the {backend} kernels (DeepEP/HybridEP/NCCL EP); a token "
             f"dispatcher {NO_PARAMETERS} (moe_flex_dispatcher_backend = {backend!r} is inert "
             "under alltoall)", used="alltoall")
    grouped = flag("moe_grouped_gemm",
                   "the local spec builds SequentialMLP experts (megatron-core >= 0.18 always; "
                   "0.16's GroupedMLP needs the grouped_gemm package); same parameter count as "
                   "TEGroupedMLP")
    flag("moe_use_legacy_grouped_gemm", "legacy GroupedMLP needs the grouped_gemm package; "
         "SequentialMLP has the same parameter count")
    for field in ("moe_single_grouped_weight", "moe_single_grouped_bias"):
        flag(field, "single grouped expert weights are TE grouped linears (and need "
             "moe_grouped_gemm); per-expert weights have the same parameter count")
    modules = tc.get("recompute_modules")
    if grouped and isinstance(modules, list) and "moe_act" in modules:
        used = [m for m in modules if m != "moe_act"]
        tc["recompute_modules"] = used
        _sub(subs, "recompute_modules", modules, used,
             "megatron-core allows moe_act recompute only with moe_grouped_gemm; recomputation "
             f"{NO_PARAMETERS} (the activation estimate uses the plan as written)")
    for field in ("moe_permute_fusion", "moe_router_fusion"):
        flag(field, f"fused permute/router kernels come from Transformer Engine; a fusion "
             f"{NO_PARAMETERS}")
    if tc.get("cuda_graph_impl") not in (None, "none"):
        impl = tc["cuda_graph_impl"]
        tc["cuda_graph_impl"] = "none"
        _sub(subs, "cuda_graph_impl", impl, "none",
             "CUDA graphs are captured on a GPU at run time (the transformer_engine "
             f"implementation needs TE); capture {NO_PARAMETERS}")
        for field in ("cuda_graph_modules", "cuda_graph_scope"):
            if tc.get(field):
                planned = tc[field]
                tc[field] = []
                _sub(subs, field, planned, [], "no CUDA graphs in the dry run (cuda_graph_impl "
                     "-> none)")
    for field in ("enable_cuda_graph", "external_cuda_graph"):
        flag(field, "CUDA graphs are captured on a GPU at run time; capture "
             + NO_PARAMETERS)
    if not _has_module("fused_weight_gradient_mlp_cuda"):
        flag("gradient_accumulation_fusion",
             "local linear layers need APEX's fused_weight_gradient_mlp_cuda extension (not "
             f"installed; TE brings its own); fusing the wgrad accumulation {NO_PARAMETERS}")
    flag("tp_comm_overlap", "TP communication overlap uses Transformer Engine userbuffers; "
         f"overlap {NO_PARAMETERS}")
    flag("delay_wgrad_compute", "delayed wgrad is Transformer Engine's backward_dw split; it "
         f"reorders the backward pass and {NO_PARAMETERS}")
    flag("overlap_dispatch_backward_with_experts_wgrad",
         f"needs Transformer Engine >= 2.3 (split wgrad); overlap {NO_PARAMETERS}")
    flag("use_te_rng_tracker", f"Transformer Engine's RNG tracker; an RNG {NO_PARAMETERS}")
    flag("use_te_activation_func", "Transformer Engine activation ops; the local MLP applies "
         f"the same activation, which {NO_PARAMETERS}")
    flag("use_transformer_engine_op_fuser", f"Transformer Engine op fuser; fusion {NO_PARAMETERS}")
    for field, used in (("fp8", None), ("fp4", None)):
        flag(field, "FP8/FP4 GEMMs are Transformer Engine modules; the dry run builds "
             "params_dtype modules with the same parameter shapes (the memory estimate uses "
             "params_dtype)", used=used)
    for field in ("fp8_param", "fp4_param", "activation_func_fp8_input_store",
                  "moe_router_padding_for_quantization", "moe_router_padding_for_fp8"):
        flag(field, f"only meaningful with Transformer Engine FP8/FP4; {NO_PARAMETERS}")
    if not _has_module("transformer_engine"):
        flag("apply_rope_fusion", "fused RoPE kernels come from Transformer Engine (not "
             f"installed); RoPE {NO_PARAMETERS}")
    # The gate re-derives what the mapped values still need; the plan's own list names the
    # backends of the values just mapped away.
    replaced = ("transformer_engine", "deep_ep", "grouped_gemm")
    requires = rt.get("requires", [])
    rt["requires"] = [r for r in requires if str(r.get("module", "")).split(".")[0]
                      not in replaced]
    dropped = sorted({r["module"] for r in requires} - {r["module"] for r in rt["requires"]})
    if dropped:
        _sub(subs, "runtime.requires", dropped, [], "the backends of the values mapped above; "
             "the gate still checks whatever the mapped plan needs")
    return plan_mod.check(raw, plan.path), subs


# ---------------------------------------------------------------------------------------------
# Spec-level stand-ins: modules the local spec names but cannot construct for this plan.

class _DryRunCoreAttention:
    """Stand-in for the local DotProductAttention where it cannot be built (MLA's separate
    k/v head dims; context parallelism).  Local core attention holds parameters only for
    ``softmax_type='learnable'`` (one offset per local head); the stand-in keeps exactly those."""

    def __new__(cls, config, *args, **kwargs):
        import torch
        from megatron.core import parallel_state

        module = torch.nn.Module()
        if getattr(config, "softmax_type", "vanilla") == "learnable":
            heads = config.num_attention_heads // parallel_state.get_tensor_model_parallel_world_size()
            module.softmax_offset = torch.nn.Parameter(
                torch.empty(heads, dtype=config.params_dtype))
        return module


class _DryRunTorchNorm:
    """Stand-in for megatron-core's WrappedTorchNorm, which refuses sequence parallelism,
    zero-centred gamma, persistent and memory-efficient norms without APEX/TE; those change no
    parameter shape, so the torch norm is built with the same weight (and bias) and its
    parameters carry the sequence_parallel mark as megatron's fused norms do."""

    def __new__(cls, config, hidden_size, eps=1e-5, **kwargs):
        import torch

        kind = getattr(config, "normalization", "LayerNorm")
        norm_cls = torch.nn.RMSNorm if kind == "RMSNorm" else torch.nn.LayerNorm
        module = norm_cls(normalized_shape=hidden_size, eps=eps)
        for p in module.parameters():
            p.sequence_parallel = bool(getattr(config, "sequence_parallel", False))
        return module


NORM_FLAGS = ("sequence_parallel", "layernorm_zero_centered_gamma", "persist_layer_norm",
              "memory_efficient_layer_norm")


def spec_stand_ins(cfg, substitutions: list) -> dict:
    """{local module class: (stand-in, substitution entry)} that this config needs."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    table = {}
    cp = getattr(cfg, "context_parallel_size", 1) or 1
    if getattr(cfg, "multi_latent_attention", False) or cp > 1:
        why = ("megatron-core's local DotProductAttention "
               + ("rejects MLA's k_channels/v_channels" if cp == 1 else
                  "supports no context parallelism (TEDotProductAttention does)")
               + "; core attention has no parameters except a learnable softmax offset, "
               "which the stand-in keeps (no forward runs in a dry run)")
        table[DotProductAttention] = (_DryRunCoreAttention, {
            "field": "spec.core_attention", "plan": "DotProductAttention",
            "used": "parameter-free stand-in", "why": why})
    flags = [f for f in NORM_FLAGS if getattr(cfg, f, False)]
    if flags:
        table[WrappedTorchNorm] = (_DryRunTorchNorm, {
            "field": "spec.layer_norm", "plan": "WrappedTorchNorm",
            "used": "torch norm stand-in",
            "why": f"WrappedTorchNorm (APEX not installed, or RMSNorm on the local spec) refuses "
                   f"{', '.join(f'{f}=True' for f in flags)}; these change no parameter shape, "
                   "so the same torch norm is built without the check"})
    return table


def spec_hook(cfg, substitutions: list):
    """Rewrite layer specs (ModuleSpec / submodule dataclasses / functools.partial builders)
    so that the stand-ins replace what the local spec cannot construct; each replacement made
    is appended (once) to ``substitutions``."""
    table = spec_stand_ins(cfg, substitutions)
    if not table:
        return None

    def swap(value):
        if isinstance(value, type) and value in table:
            stand_in, entry = table[value]
            if entry not in substitutions:
                substitutions.append(entry)
            return stand_in
        return None

    def visit(node, seen):
        if node is None or isinstance(node, (str, int, float, bool, type)) or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, functools.partial):
            for key, value in list(node.keywords.items()):
                new = swap(value)
                if new is not None:
                    node.keywords[key] = new
                else:
                    visit(value, seen)
            for value in node.args:
                visit(value, seen)
            return
        if isinstance(node, list):
            for i, value in enumerate(node):
                new = swap(value)
                if new is not None:
                    node[i] = new
                else:
                    visit(value, seen)
            return
        if isinstance(node, tuple):
            for value in node:
                visit(value, seen)
            return
        if isinstance(node, dict):
            for key, value in list(node.items()):
                new = swap(value)
                if new is not None:
                    node[key] = new
                else:
                    visit(value, seen)
            return
        if callable(node) and not hasattr(node, "__dataclass_fields__") \
                and type(node).__name__ != "ModuleSpec":
            return  # functions, bound methods: nothing to rewrite
        for key, value in list(getattr(node, "__dict__", {}).items()):
            new = swap(value)
            if new is not None:
                object.__setattr__(node, key, new)
            else:
                visit(value, seen)

    def hook(spec):
        visit(spec, set())
        return spec

    return hook


class _DryRunLayerNormColumnParallelLinear:
    """Stand-in for TELayerNormColumnParallelLinear (norm fused into the projection), which the
    local spec lacks (its column_parallel_layer_norm_linear() is None): a ColumnParallelLinear
    plus the fused norm's parameters (layer_norm_weight, and layer_norm_bias for LayerNorm),
    the same parameters under the same names."""

    def __new__(cls, input_size, output_size, *, config, init_method, bias=False,
                gather_output=False, skip_bias_add=False, is_expert=False, tp_group=None,
                **kwargs):
        import torch
        from megatron.core.tensor_parallel.layers import ColumnParallelLinear

        module = ColumnParallelLinear(input_size, output_size, config=config,
                                      init_method=init_method, bias=bias,
                                      gather_output=gather_output, skip_bias_add=skip_bias_add,
                                      is_expert=is_expert, tp_group=tp_group)
        names = ["layer_norm_weight"] + (["layer_norm_bias"]
                                         if config.normalization == "LayerNorm" else [])
        for name in names:
            param = torch.nn.Parameter(torch.empty(input_size, dtype=config.params_dtype))
            param.sequence_parallel = bool(config.sequence_parallel)
            module.register_parameter(name, param)
        return module


def local_backend(cfg, substitutions: list):
    """megatron-core's LocalSpecProvider, plus the fused norm+linear stand-in that experimental
    attention variants (gated_delta_net) ask the backend for; None when not needed."""
    if not getattr(cfg, "experimental_attention_variant", None):
        return None
    from megatron.core.models.backends import LocalSpecProvider

    entry = {"field": "spec.column_parallel_layer_norm_linear",
             "plan": "TELayerNormColumnParallelLinear", "used": "norm + ColumnParallelLinear",
             "why": f"{cfg.experimental_attention_variant} fuses its input norm into in_proj, "
                    "which only Transformer Engine provides; the stand-in holds the same "
                    "parameters (layer_norm_weight[, layer_norm_bias], weight)"}

    class DryRunLocalSpecProvider(LocalSpecProvider):
        def column_parallel_layer_norm_linear(self):
            if entry not in substitutions:
                substitutions.append(entry)
            return _DryRunLayerNormColumnParallelLinear

    return DryRunLocalSpecProvider()


@contextlib.contextmanager
def kernels_for_construction(cfg, substitutions: list):
    """Gated DeltaNet refuses construction without the flash-linear-attention (fla) kernels,
    which only its forward calls; a dry run never runs forward, so construction is allowed
    (stated) and the module's flag restored afterwards."""
    if getattr(cfg, "experimental_attention_variant", None) != "gated_delta_net":
        yield
        return
    from megatron.core.ssm.gated_delta_net import common as gdn
    from megatron.core.ssm.gated_delta_net import gdn as gdn_module

    if gdn.HAVE_FLA:
        yield
        return

    def no_kernel(*args, **kwargs):
        raise RuntimeError("runtime.dryrun built GatedDeltaNet without fla; it cannot run")

    substitutions.append({
        "field": "gated_delta_net kernels", "plan": "fla (flash-linear-attention)",
        "used": "construction without fla",
        "why": "fla's kernels are used in forward only (not installed here); GatedDeltaNet's "
               "parameters (in_proj, conv1d, dt_bias, A_log, out_norm, out_proj) do not "
               "depend on them"})
    saved = gdn.HAVE_FLA, gdn_module.chunk_gated_delta_rule
    gdn.HAVE_FLA, gdn_module.chunk_gated_delta_rule = True, no_kernel
    try:
        yield
    finally:
        gdn.HAVE_FLA, gdn_module.chunk_gated_delta_rule = saved


# ---------------------------------------------------------------------------------------------

def init_fake_world(world: int, rank: int) -> None:
    import torch
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.distributed.init_process_group("fake", store=FakeStore(), world_size=world, rank=rank)


def resolve_rank(rank: int, world: int) -> int:
    """A rank of the plan's world; negative ranks count from the end (-1 = last)."""
    resolved = rank + world if rank < 0 else rank
    if not 0 <= resolved < world:
        raise PlanError(f"--rank {rank} is outside the plan's world of {world} ranks")
    return resolved


def decoder_layers(chunks) -> list[tuple[int, str]]:
    """(global 1-based layer number, "moe"|"dense") of this rank's decoder layers (not MTP)."""
    from megatron.core.transformer.moe.moe_layer import MoELayer

    return [(layer.layer_number, "moe" if isinstance(layer.mlp, MoELayer) else "dense")
            for chunk in chunks for layer in chunk.decoder.layers]


def _cleanup() -> None:
    import torch
    from megatron.core import parallel_state

    try:
        parallel_state.destroy_model_parallel()
    except Exception:  # noqa: BLE001 - nothing was initialised
        pass
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _unexpected(exc: BaseException, plan, rank: int) -> RuntimeFailure:
    """An exception megatron-core raised that the runtime has no name for, as one line."""
    if os.environ.get("MOEFORGE_TRACEBACK"):
        traceback.print_exception(exc)
    text = " ".join(str(exc).split()) or "(no message)"
    if len(text) > 400:
        text = text[:400] + " ..."
    return RuntimeFailure(f"building rank {rank} of {plan.path} failed: "
                          f"{type(exc).__name__}: {text}; MOEFORGE_TRACEBACK=1 shows "
                          "megatron-core's traceback")


def dry_run(plan, rank: int, substitutions: list, estimate_for=None) -> dict:
    """Build rank ``rank``'s shard; memory is estimated for ``estimate_for`` (the plan as
    written, when --local-spec substituted the implementation) or ``plan``."""
    try:
        return _dry_run(plan, rank, substitutions, estimate_for)
    except RuntimeFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - becomes one line, never a traceback
        raise _unexpected(exc, plan, rank) from None
    finally:
        _cleanup()  # so the next rank (or plan) can be built in this process


def _dry_run(plan, rank: int, substitutions: list, estimate_for=None) -> dict:
    import torch
    from megatron.core import parallel_state

    from . import cpu_support

    cpu_support.install()
    init_fake_world(plan.layout["world_size"], rank)
    model.init_parallel(plan, create_gloo_process_groups=False)
    cfg, ignored = model.build_config(
        plan, {"use_cpu_initialization": True, "perform_initialization": False})
    with torch.device("meta"), cpu_support.device_scope(force=True):
        if model.use_transformer_engine(plan):
            chunks = model.build_model(plan, cfg, cast_dtype=False)
        else:
            with kernels_for_construction(cfg, substitutions):
                chunks = model.build_model(plan, cfg, cast_dtype=False,
                                           spec_hook=spec_hook(cfg, substitutions),
                                           local_backend=local_backend(cfg, substitutions))
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
    return {
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


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise PlanError(f"--rank must be an integer or a comma-separated list (negative counts "
                        f"from the last rank), got {text!r}") from None
    if not ranks:
        raise PlanError(f"--rank names no rank: {text!r}")
    return ranks


def run_plan(path: str, rank_args: list[int], local_spec: bool) -> dict:
    """Dry-run ``path`` for each of ``rank_args``; one result, or {"plan", "ranks"}."""
    plan = plan_mod.load(path)
    written, subs = plan, []
    if local_spec:
        plan, subs = substitute_local(plan)
    try:
        gate.check(plan)
    except BackendMissing as err:
        raise BackendMissing(err.message + "\nFor parameter counts and memory, --local-spec "
                             "builds the same architecture without these backends.") from None
    world = plan.layout["world_size"]
    ranks = list(dict.fromkeys(resolve_rank(r, world) for r in rank_args))
    try:
        results = [dry_run(plan, r, copy.deepcopy(subs), estimate_for=written) for r in ranks]
    except RuntimeFailure as err:
        if not local_spec and type(err) is RuntimeFailure:
            err.message += (" (--local-spec maps plan values that need TE/DeepEP/APEX to what "
                            "the local spec builds)")
        raise
    return results[0] if len(results) == 1 else {"plan": str(plan.path), "ranks": results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.dryrun", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", nargs="+", help="plan.json (several: dry-run each in turn)")
    parser.add_argument("--rank", default="0",
                        help="global rank to build, or a comma-separated list; negative counts "
                             "from the last rank, e.g. 0,-1 (default 0)")
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--local-spec", action="store_true",
                        help="map plan values that need TE/DeepEP/HybridEP/APEX to what the "
                             "local spec builds (each mapping is listed in the report)")
    args = parser.parse_args(argv)
    failures: list[RuntimeFailure] = []
    entries = []
    try:
        ranks = parse_ranks(args.rank)
    except RuntimeFailure as err:
        report_and_exit(err, prog="runtime.dryrun")
    for path in args.plan:
        try:
            entries.append(run_plan(path, ranks, args.local_spec))
        except RuntimeFailure as err:
            if len(args.plan) == 1:
                report_and_exit(err, prog="runtime.dryrun")
            print(f"runtime.dryrun: {path}: {err.kind}: {err.message}", file=sys.stderr,
                  flush=True)
            failures.append(err)
            entries.append({"plan": path, "error": {"kind": err.kind, "message": err.message,
                                                    "exit_code": err.exit_code}})
        except Exception as exc:  # noqa: BLE001 - plan loading/gating bugs: one line, too
            err = RuntimeFailure(f"{path}: {type(exc).__name__}: {exc}")
            if len(args.plan) == 1:
                report_and_exit(err, prog="runtime.dryrun")
            print(f"runtime.dryrun: {err.kind}: {err.message}", file=sys.stderr, flush=True)
            failures.append(err)
            entries.append({"plan": path, "error": {"kind": err.kind, "message": err.message,
                                                    "exit_code": err.exit_code}})
    result = entries[0] if len(args.plan) == 1 else {"plans": entries}
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")
    return failures[0].exit_code if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
