"""Backend availability gate, run before any model is built.

Why: megatron-core only discovers a missing DeepEP/HybridEP/Transformer Engine/grouped_gemm
deep inside model construction (an assertion or ImportError after minutes of start-up), and a
run that silently falls back to another dispatcher produces numbers for a configuration nobody
asked for.  An import failure is an environment limitation, not performance data: the gate
stops the run with the package, the plan value that needs it and the alternative.

Requirements come from ``runtime.requires`` in the plan and are also derived from the plan's
values, so a plan whose ``requires`` list is incomplete is still gated.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from ..errors import BackendMissing
from .document import Plan


@dataclass(frozen=True)
class Requirement:
    module: str  # import name
    package: str  # what to install
    needed_for: str  # the plan value that needs it
    alternative: str  # the plan change that avoids it
    attribute: str | None = None  # a name the module must export (e.g. deep_ep.HybridEPBuffer)


def derived_requirements(plan: Plan) -> list[Requirement]:
    """Requirements implied by plan values, whatever ``runtime.requires`` says."""
    tc, impl = plan.transformer_config, plan.runtime.get("transformer_impl", "local")
    reqs: list[Requirement] = []
    dispatcher = tc.get("moe_token_dispatcher_type")
    backend = tc.get("moe_flex_dispatcher_backend", "deepep")
    if dispatcher == "flex" and (backend == "deepep" or tc.get("moe_enable_deepep")):
        reqs.append(Requirement(
            "deep_ep", "deep_ep (DeepEP, https://github.com/deepseek-ai/DeepEP)",
            "transformer_config.moe_token_dispatcher_type = 'flex' with "
            "moe_flex_dispatcher_backend = 'deepep'",
            "set moe_token_dispatcher_type: alltoall", attribute="Buffer"))
    elif dispatcher == "flex" and backend == "ncclep":
        # megatron-core >= 0.19 takes the NCCL EP kernels from transformer_engine.pytorch.ep.
        reqs.append(Requirement(
            "transformer_engine.pytorch.ep", "transformer_engine[pytorch] with NCCL EP support",
            "transformer_config.moe_token_dispatcher_type = 'flex' with "
            "moe_flex_dispatcher_backend = 'ncclep'",
            "set moe_token_dispatcher_type: alltoall"))
    elif dispatcher == "flex" and backend == "hybridep":
        # megatron-core's fused_a2a does `from deep_ep import HybridEPBuffer`.
        reqs.append(Requirement(
            "deep_ep", "deep_ep built from the hybrid-ep branch (HybridEP, "
            "https://github.com/deepseek-ai/DeepEP/tree/hybrid-ep)",
            "transformer_config.moe_token_dispatcher_type = 'flex' with "
            "moe_flex_dispatcher_backend = 'hybridep'",
            "set moe_token_dispatcher_type: alltoall", attribute="HybridEPBuffer"))
    if impl == "transformer_engine":
        reqs.append(Requirement(
            "transformer_engine", "transformer_engine[pytorch]",
            "runtime.transformer_impl = 'transformer_engine'",
            "set runtime.transformer_impl: local (megatron-core local layer spec)"))
    for knob in ("moe_permute_fusion", "moe_router_fusion"):
        if tc.get(knob) and impl != "transformer_engine":
            # megatron-core imports these fused kernels from Transformer Engine.
            reqs.append(Requirement(
                "transformer_engine", "transformer_engine[pytorch]",
                f"transformer_config.{knob} = true (fused kernels from Transformer Engine)",
                f"set {knob}: false"))
    if tc.get("gradient_accumulation_fusion"):
        # the output layer is megatron-core's ColumnParallelLinear whatever the spec; it refuses to build without
        # APEX's kernel (tensor_parallel/layers.py), which Transformer Engine does not bring
        reqs.append(Requirement(
            "fused_weight_gradient_mlp_cuda", "APEX with its CUDA extensions (pip install --global-option=--cpp_ext "
            "--global-option=--cuda_ext, https://github.com/NVIDIA/apex)",
            "transformer_config.gradient_accumulation_fusion = true",
            "set training.gradient_accumulation_fusion: false (and platform.software.apex: false, so that "
            "the compiler keeps it off)"))
    if plan.section("optimizer").get("use_precision_aware_optimizer"):
        # megatron-core's OptimizerConfig takes FusedAdam (with its precision arguments) from Transformer Engine
        reqs.append(Requirement(
            "transformer_engine.pytorch.optimizers", "transformer_engine[pytorch] >= 1.13",
            "optimizer.use_precision_aware_optimizer = true (Transformer Engine's FusedAdam)",
            "set optimizer.precision_aware: false (and the optimizer's dtypes to float32)", attribute="FusedAdam"))
    legacy = bool(tc.get("moe_use_legacy_grouped_gemm"))
    if tc.get("moe_grouped_gemm") and (impl == "local" or legacy) and _has_legacy_grouped_mlp():
        # Before megatron-core 0.18 the local spec (and the legacy path under TE) builds
        # GroupedMLP, which imports grouped_gemm.  From 0.18 on the local spec builds
        # SequentialMLP instead; the realised-configuration check reports that.
        reqs.append(Requirement(
            "grouped_gemm", "grouped_gemm (https://github.com/fanshiqing/grouped_gemm)",
            "transformer_config.moe_grouped_gemm = true with "
            + ("moe_use_legacy_grouped_gemm = true" if legacy else "transformer_impl = 'local'"),
            "set moe_grouped_gemm: false (SequentialMLP experts)"
            + ("" if legacy else " or use transformer_impl: transformer_engine (TEGroupedMLP)")))
    return reqs


def _has_legacy_grouped_mlp() -> bool:
    """megatron-core < 0.18 (read from package metadata, without importing it)."""
    import importlib.metadata

    for dist in ("megatron-core", "megatron_core"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        try:
            major, minor = (int(x) for x in version.split(".")[:2])
        except ValueError:
            return True
        return (major, minor) < (0, 18)
    return True


def plan_requirements(plan: Plan) -> list[Requirement]:
    """``runtime.requires`` entries first, then derived ones not already listed."""
    reqs = [
        Requirement(
            module=r["module"],
            package=r.get("package") or r["module"],
            needed_for=r.get("needed_for") or "the plan",
            alternative=r.get("alternative") or "see the plan's EXPLAIN.md",
            attribute=r.get("attribute"),
        )
        for r in plan.runtime.get("requires", [])
    ]
    seen = {(r.module, r.attribute) for r in reqs}
    for r in derived_requirements(plan):
        if (r.module, r.attribute) not in seen and (r.module, None) not in seen:
            reqs.append(r)
            seen.add((r.module, r.attribute))
    return reqs


def probe(req: Requirement) -> str | None:
    """None if ``req`` imports (and exports its attribute), else why not."""
    try:
        spec = importlib.util.find_spec(req.module)
    except Exception as exc:  # a dotted name imports its parents, which may fail anyhow
        return f"import {req.module.rsplit('.', 1)[0]} failed: {type(exc).__name__}: {exc}"
    if spec is None:
        return f"no module named {req.module!r} is installed"
    try:
        mod = importlib.import_module(req.module)
    except Exception as exc:  # TE raises RuntimeError/OSError when CUDA libraries are missing
        return f"import {req.module} failed: {type(exc).__name__}: {exc}"
    if req.attribute and not hasattr(mod, req.attribute):
        return f"{req.module} is installed but does not provide {req.attribute}"
    return None


def check(plan: Plan) -> list[Requirement]:
    """Raise BackendMissing listing every unavailable requirement; return those checked."""
    reqs = plan_requirements(plan)
    failures = [(r, why) for r in reqs if (why := probe(r)) is not None]
    if failures:
        lines = []
        for r, why in failures:
            lines.append(
                f"module '{r.module}' (package {r.package}) is unavailable: {why}\n"
                f"  needed for: {r.needed_for}\n"
                f"  alternative: {r.alternative}"
            )
        raise BackendMissing(
            "\n".join(lines)
            + "\nNo model was built. An import failure is an environment limitation, "
            "not performance data."
        )
    return reqs
