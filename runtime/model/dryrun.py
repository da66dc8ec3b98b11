"""``python -m moeforge.runtime.dryrun PLAN.json [PLAN.json ...] --rank R``: build one rank's shard.

Why: "does this layout fit, and what lands on each rank?" should be answered before a job is
queued.  One process joins torch's fake process group as rank R of the plan's world, initialises
megatron-core's parallel state without gloo groups, and builds that rank's GPTModel chunks on the
meta device (shapes and parameter counts are real, nothing is allocated, so a 671B layout fits in
a laptop's memory).  It prints JSON: parameter counts (total, dense/attention, expert,
embedding), the layers and the realised configuration: facts of the built shard.  The memory a
step needs is an estimate, and moeforge has one memory model, the compiler's: `moeforge dryrun`
adds it to this report per rank (compiler/commands/dryrun_report.py).  The backend gate runs first, as for
training.

``--local-spec`` builds a plan with megatron-core's local spec when Transformer Engine, DeepEP,
HybridEP, grouped_gemm or APEX's CUDA extensions are absent: every plan value that only those
backends can build is mapped to one the local spec builds with the same parameter shapes, and
each mapping is listed in the report under ``substitutions`` (field, plan value, value used,
why; the mappings and stand-ins are in ``local_spec.py``).

``--rank`` takes a comma-separated list; negative ranks count from the end (``-1`` is the last
rank of the plan's world).  Several plans can be given: each is dry-run in turn in this one
process (megatron-core is imported once) and the JSON is ``{"plans": [...]}``; a plan that fails
gets an ``error`` entry, the others still run, and the exit code is the first failure's.
Every failure is a one-line message and a non-zero exit, never a traceback
(``MOEFORGE_TRACEBACK=1`` prints megatron-core's traceback of an unexpected failure too).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

from . import build as model, realised
from ..plan import document as plan_mod, gate
from ..errors import BackendMissing, PlanError, RuntimeFailure, Stopped, report_and_exit, stage
from .local_spec import construction_stand_ins, local_backend, spec_hook, substitute_local


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


def dry_run(plan, rank: int, substitutions: list) -> dict:
    """Build rank ``rank``'s shard (``plan``: with --local-spec, the substituted plan)."""
    environ = dict(os.environ)  # GPTModel sets Transformer Engine's NVTE_*_ATTN for its attention backend
    try:
        with stage(f"building rank {rank} of {plan.path}"):
            return _dry_run(plan, rank, substitutions)
    finally:
        _cleanup()  # so the next rank (or plan) can be built in this process
        os.environ.clear()  # ... with its own attention backend (megatron-core refuses another's variables)
        os.environ.update(environ)


def _dry_run(plan, rank: int, substitutions: list) -> dict:
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
            with construction_stand_ins(cfg, substitutions):
                chunks = model.build_model(plan, cfg, cast_dtype=False,
                                           spec_hook=spec_hook(cfg, substitutions),
                                           local_backend=local_backend(cfg, substitutions))
    checked = realised.compare(plan, cfg, chunks)
    counts = model.count_parameters(chunks)
    ps = parallel_state
    pp_rank = ps.get_pipeline_model_parallel_rank()
    dp, edp = ps.get_data_parallel_world_size(), ps.get_expert_data_parallel_world_size()
    layers = decoder_layers(chunks)
    kinds = [kind for _, kind in layers]
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
    subs: list = []
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
        results = [dry_run(plan, r, copy.deepcopy(subs)) for r in ranks]
    except RuntimeFailure as err:
        if not local_spec and isinstance(err, Stopped):
            err.message += (" (--local-spec maps plan values that need TE/DeepEP/APEX to what "
                            "the local spec builds)")
        raise
    return results[0] if len(results) == 1 else {"plan": str(plan.path), "ranks": results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeforge.runtime.dryrun", description=__doc__,
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
        report_and_exit(err, prog="moeforge.runtime.dryrun")
    for path in args.plan:
        try:
            entries.append(run_plan(path, ranks, args.local_spec))
        except RuntimeFailure as err:
            if len(args.plan) == 1:
                report_and_exit(err, prog="moeforge.runtime.dryrun")
            print(f"moeforge.runtime.dryrun: {path}: {err.kind}: {err.message}", file=sys.stderr,
                  flush=True)
            failures.append(err)
            entries.append({"plan": path, "error": {"kind": err.kind, "message": err.message,
                                                    "exit_code": err.exit_code}})
        except Exception as exc:  # noqa: BLE001 - plan loading/gating bugs: one line, too
            err = RuntimeFailure(f"{path}: {type(exc).__name__}: {exc}")
            if len(args.plan) == 1:
                report_and_exit(err, prog="moeforge.runtime.dryrun")
            print(f"moeforge.runtime.dryrun: {err.kind}: {err.message}", file=sys.stderr, flush=True)
            failures.append(err)
            entries.append({"plan": path, "error": {"kind": err.kind, "message": err.message,
                                                    "exit_code": err.exit_code}})
    result = entries[0] if len(args.plan) == 1 else {"plans": entries}
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")
    return failures[0].exit_code if failures else 0

