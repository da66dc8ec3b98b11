"""Ranking: estimate every candidate analytically, then confirm the fastest through the pipeline.

The analytic pass patches one compiled base plan per candidate (space.Candidate.patched_plan) and
runs compiler/estimate's memory.peak and steptime.estimate on it: sub-millisecond, so thousands of
candidates fit in the time budget; of a layout's pipeline splits it prices those splits.Pruning says
can be fastest.  The confirmation compiles the fastest candidates' recipes with
compiler/driver.py, the same rules and solver as `moeforge check` (the planner has no rules of its
own), and re-estimates each from its real plan: the numbers printed are the compiled plan's.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from moeforge.compiler import driver, project
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.estimate import memory, steptime
from moeforge.compiler.estimate.steptime_terms import elementwise_bytes
from moeforge.compiler.knobs.layout import Layout
from moeforge.compiler.planner import space, splits
from moeforge.compiler.recipe import integers, validate
from moeforge.compiler.recipe.compose import display_path
from moeforge.compiler.recipe.load import load_file
from moeforge.compiler.resources import BUILTIN_RECIPES

GIB = memory.GIB
CONFIRM_BUDGET = 150     # pipeline compiles per search at most (~16 ms each on this machine)
PER_LAYER = ("tp_comm", "cp_comm", "ep_a2a", "overhead")   # the step-time items that grow with a rank's layers


class PlannerError(Exception):
    """Bad input or no answer: one line for the user, exit 1."""


@dataclass
class Evaluated:
    cand: space.Candidate
    lay: Layout
    mem: memory.Estimate | None = None
    pp_rank: int = 0
    time: steptime.StepTime | None = None
    feasible: bool = True
    confirmed: bool = False
    reasons: list = field(default_factory=list)
    plan: dict | None = None
    # dispatchers of this layout the model prices identically (same step time and memory), each
    # confirmed legal by the rules: shown on this row, not as rows of their own
    equivalent: list = field(default_factory=list)

    @property
    def memory_gb(self) -> float:
        """Peak memory per rank in GiB (the table heads it GB), the unit the platform's memory_gb is read in."""
        return self.mem.total / GIB

    @property
    def step_s(self) -> float:
        """Estimated step seconds; infinity when there is no estimate, so such a candidate sorts last."""
        return self.time.total_s if self.time else float("inf")


@dataclass
class Result:
    setting: space.Setting
    ranked: list            # confirmed legal and within memory, best first
    rejected: list          # rule- or memory-rejected, with reasons
    considered: int         # (layout, mbs, dispatcher, overlap, recompute) combinations estimated
    kept: int               # of those, within memory
    estimated: list = field(default_factory=list)   # every candidate within memory, fastest estimate first
    compiles: int = 0       # pipeline compiles spent (the baseline and the confirmations)
    # within memory, past the confirmation budget: estimated only (not compiled through the rules), fastest
    # first, so that --top N lists the N best of everything within memory, not only of what was confirmed
    unconfirmed: list = field(default_factory=list)


# ------------------------------------------------------------------------ documents
def document(kind: str, name: str) -> tuple[dict, Path]:
    """A platform or model document: the project's recipes/<kind>s/ first, then the built-in catalogue."""
    for top in (project.recipes(), BUILTIN_RECIPES):
        path = top / f"{kind}s" / f"{name}.yaml"
        if path.is_file():
            try:  # the compiler's own loader (bounded; a bad file is one line at its place), 1.0 read as 1
                doc = load_file(path, display_path(path, project.recipes()))
                if not isinstance(doc.data, dict):
                    return {}, path
                schema = validate.validator(validate.document_schema(doc.data, kind)).schema
                data, errors = integers.applied(doc.data, integers.wanted(schema, integers.floats(doc.data)), doc.pos)
                if errors:
                    raise CompileError(errors)
            except CompileError as exc:
                raise PlannerError(exc.diagnostics[0].render().splitlines()[0]) from None
            return data, path
    known = sorted({p.stem for top in (project.recipes(), BUILTIN_RECIPES) if (top / f"{kind}s").is_dir()
                    for p in (top / f"{kind}s").glob("*.yaml")})
    raise PlannerError(f"unknown {kind} {name!r}: known {kind}s are {', '.join(known)} "
                       f"(files in recipes/{kind}s/)")


def setting(model: str, platform: str, gpus: int, seq: int | None = None, gbs: int | None = None,
            force_balance: bool = False) -> space.Setting:
    """Load and check the model and platform for a search; refuses sizes out of range and partial nodes."""
    for name, value in (("--gpus", gpus), ("--seq", seq), ("--gbs", gbs)):
        if value is not None and value < 1:
            raise PlannerError(f"{name} must be a positive integer, got {value}")
        if value is not None and value > space.MAX_SIZE[name]:
            raise PlannerError(f"{name} {value} is more than moeforge plans for (at most {space.MAX_SIZE[name]})")
    mdoc, _ = document("model", model)
    pdoc, _ = document("platform", platform)
    try:  # the step-time model needs the platform's performance block: say so before searching
        steptime.performance({"platform": dict(pdoc, name=platform)})
    except steptime.PerformanceError as exc:
        raise PlannerError(str(exc)) from None
    per_node = pdoc.get("gpus_per_node") or 1
    if gpus % per_node:  # a recipe holds whole nodes (resources.nodes) of the platform's gpus_per_node
        raise PlannerError(f"--gpus {gpus} is not a whole number of {platform} nodes of {per_node} GPUs: "
                           f"use a multiple of {per_node}")
    arch = dict(mdoc.get("architecture") or {})
    arch.update({k: v for k, v in (mdoc.get("moe") or {}).items() if k in ("num_experts", "router_topk")})
    arch["mtp_num_layers"] = mdoc.get("mtp_num_layers")
    if seq is None:  # the default, within the model's positions (Megatron-LM refuses a longer sequence)
        seq = min(space.DEFAULT_SEQ, arch.get("max_position_embeddings") or space.DEFAULT_SEQ)
    gbs = space.DEFAULT_SEQS_PER_GPU * gpus if gbs is None else gbs
    return space.Setting(model, platform, gpus, seq, gbs, arch, pdoc, force_balance)


class Compiler:
    """Compiles candidate recipe documents in memory (driver.compile of a dict), against the project's model and
    platform (or the built-in ones), each distinct document once."""

    NAME = "plan-layout-candidate"  # where a candidate's diagnostics are placed (it is no file)

    def __init__(self, s: space.Setting):
        self.setting = s
        self.cache: dict = {}
        self.count = 0

    def close(self):
        """Nothing to remove (kept for the callers' try/finally)."""

    def compile(self, doc: dict, explain: bool = False) -> dict:
        """The plan of a recipe document; CompileError when the rules reject it (``explain``: with the
        places and values of each error, as check shows them; not cached)."""
        if explain:
            return driver.compile(doc, name=self.NAME).plan
        key = json.dumps(doc, sort_keys=True, default=repr)
        if key in self.cache:
            hit = self.cache[key]
            if isinstance(hit, CompileError):
                raise hit
            return hit
        self.count += 1
        try:
            out = driver.compile(doc, explain_errors=False, name=self.NAME).plan
        except CompileError as exc:
            self.cache[key] = exc
            raise
        self.cache[key] = out
        return out


def reasons_of(exc: CompileError) -> list[str]:
    """The error diagnostics of a refused compile as `code: message`, a rejected candidate's reasons."""
    return [f"{d.code}: {d.message}" for d in exc.diagnostics if d.is_error] or [str(exc)]


def measure(ev: Evaluated, plan: dict, capacity_gb: float | None) -> Evaluated:
    """Memory and step time of a plan; over capacity -> infeasible with the numbers as the reason."""
    ev.mem, ev.pp_rank = memory.peak(plan, ev.lay)
    ev.time = steptime.estimate(plan, ev.lay)
    if capacity_gb and ev.mem.total > capacity_gb * GIB:
        ev.feasible = False
        ev.reasons.append(f"memory {ev.memory_gb:.1f} GB > {capacity_gb:g} GB (pp rank {ev.pp_rank})")
    return ev


# ------------------------------------------------------------------------ the search
def _fits(cand, lay, s, base, states_by_rank: dict, memo: dict) -> tuple[bool, memory.Estimate, int]:
    est, rank = memory.peak(cand.patched_plan(base, s, lay, memo), lay, states_by_rank)
    return (not s.capacity_gb or est.total <= s.capacity_gb * GIB), est, rank


def _lightest_recompute(cand, lay, s, base, options, start: int, states_by_rank: dict, memo: dict):
    """The cheapest recompute option from ``start`` on that fits (recompute only adds time), or None
    with the full-recompute miss.  ``start`` first (the options before it did not fit a lighter
    configuration of the layout: most fit there), then the heaviest, so a layout that cannot fit costs
    two estimates.  ``states_by_rank``: the layout's per-rank parameters and states (memory.peak), shared
    by its candidates."""
    def fits(i):
        c = replace(cand, recompute=options[i][0], modules=options[i][1])
        return (c, *_fits(c, lay, s, base, states_by_rank, memo))

    last = len(options) - 1
    c, ok, est, rank = fits(start)
    if ok:
        return c, est, rank, start
    if start == last:
        return None, est, rank, len(options)
    heaviest, ok, est, rank = fits(last)
    if not ok:
        return None, est, rank, len(options)
    for i in range(start + 1, last):
        c, ok, est2, rank2 = fits(i)
        if ok:
            return c, est2, rank2, i
    return heaviest, est, rank, last


def analytic(s: space.Setting, base: dict, progress=None) -> tuple[list, list, int]:
    """Every candidate within memory, estimated; one memory-rejected entry per layout that cannot fit.

    Memory grows with the micro-batch size and with EP overlap (one more micro-batch in flight), so
    the search for a recompute option starts where the smaller configuration of the layout ended."""
    options = space.recompute_options(s)
    kept, rejected, considered = [], [], 0
    # per layout (``shape``: the candidate whatever its micro-batch size): where the recompute search ended
    # (with and without EP overlap), and what depends on the layout alone, whatever the micro-batch size,
    # dispatcher and overlap: the ranks' parameters and states (memory.rank_states), and with the
    # recompute option the stages' FLOPs (steptime.stages; with the micro-batch size, which sets the expert
    # GEMMs' efficiency and so the busiest stage, steptime.stage_facts)
    hint: dict = {}
    states_of: dict = {}
    ranks_of: dict = {}
    facts_of: dict = {}
    weights, perf = splits.Weights.of(base), steptime.performance(base)
    pruning = splits.Pruning(s.arch, weights, len(options))   # which pipeline splits of a layout to price
    memo: dict = {}   # each layout's part of the patched plans (space.Candidate.patched_plan)
    for cand, lay in space.layouts(s, weights):
        if progress is not None:
            progress.update(1)
        shape = replace(cand, mbs=1)
        for overlap in (False, True) if cand.ep > 1 else (False,):
            probe = replace(cand, ep_overlap=overlap)
            if not space.variant_runs(probe):
                continue
            lighter = pruning.lighter(cand, overlap)
            if lighter is not None and (lighter == 0 or not _fits(
                    replace(probe, recompute=options[lighter - 1][0], modules=options[lighter - 1][1]),
                    lay, s, base, states_of.setdefault(shape, {}), memo)[0]):
                continue
            start = max(hint.get((shape, False), 0), hint.get((shape, True), 0) if overlap else 0)
            variants = [v for v in space.variants(s, cand) if v.ep_overlap == overlap]
            considered += len(variants)
            if start >= len(options):
                chosen = None
                est, rank = None, 0
            else:
                chosen, est, rank, hint[(shape, overlap)] = _lightest_recompute(
                    probe, lay, s, base, options, start, states_of.setdefault(shape, {}), memo)
            if chosen is not None and not space.variant_runs(chosen):
                chosen = est = None   # it fits only with a recompute option the rules refuse with EP overlap
            if chosen is None:
                pruning.record(cand, overlap, len(options))
                hint[(shape, overlap)] = len(options)
                if est is not None:
                    full = replace(probe, recompute=options[-1][0], modules=options[-1][1])
                    ev = Evaluated(full, lay, est, rank, feasible=False)
                    ev.reasons.append(f"memory {est.total / GIB:.1f} GB > {s.capacity_gb:g} GB even with full "
                                      f"recompute (pp rank {rank})")
                    rejected.append(ev)
                continue
            key = (shape, chosen.recompute, chosen.modules)
            for v in variants:
                v = replace(v, recompute=chosen.recompute, modules=chosen.modules)
                ev = Evaluated(v, lay, est, rank)
                patched = v.patched_plan(base, s, lay, memo)
                if key + (v.mbs,) not in facts_of:
                    if key not in ranks_of:
                        ranks_of[key] = steptime.stages(patched, lay)
                    facts_of[key + (v.mbs,)] = steptime.stage_facts(patched, lay, ranks_of[key])
                ev.time = steptime.estimate(patched, lay, facts_of[key + (v.mbs,)])
                kept.append(ev)
            facts = facts_of[key + (cand.mbs,)]
            comm = max(sum(e.time.items[k] for k in PER_LAYER) for e in kept[-len(variants):])
            pruning.record(cand, overlap, hint[(shape, overlap)], comm / max(1, facts["stage"]["layers"]),
                           kept[-1].time.items["compute"] / steptime.compute_weight(
                               facts["stage"]["flops"], perf,
                               elementwise=elementwise_bytes(base, perf, facts["stage"]["layers"])))
    kept.sort(key=lambda e: (e.step_s, e.cand.key()))
    return kept, rejected, considered


def base_plan(comp: Compiler, s: space.Setting) -> dict:
    """The plan the candidates are patched into: DP = all GPUs, so its GBS is one sequence per GPU (the asked GBS
    need not suit this layout; patched_plan writes it in).  PlannerError where the rules refuse the model."""
    template = space.Candidate().recipe(replace(s, gbs=s.gpus))
    try:
        return comp.compile(template)
    except CompileError:
        raise PlannerError(f"{s.model} on {s.platform} cannot be planned: the rules refuse it before any layout "
                           f"is chosen: {_document_errors(comp, template)}") from None


def search(s: space.Setting, top: int = 10, keep_rejected: bool = False, progress: bool = False) -> Result:
    """Estimate all candidates, then confirm the fastest through the pipeline, at most CONFIRM_BUDGET compiles."""
    comp = Compiler(s)
    try:
        base = base_plan(comp, s)
        bar = _progress_bar(progress)
        try:
            kept, rejected, considered = analytic(s, base, bar)
        finally:
            if bar is not None:
                bar.close()
        ranked, priced = [], {}
        rest = []   # past the confirmation budget: listed as estimated only
        for i, ev in enumerate(kept):
            twin = _dispatcher_twin(ev, ranked, priced)
            if len(ranked) >= top and twin is None:
                break
            if comp.count >= CONFIRM_BUDGET:
                rest = kept[i:]
                break
            estimate = (ev.step_s, ev.mem.total)
            try:
                real = comp.compile(ev.cand.recipe(s))
            except CompileError as exc:
                ev.feasible, ev.confirmed = False, True
                ev.reasons = reasons_of(exc)
                rejected.append(ev)
                continue
            if twin is not None:  # legal, and priced like a listed row: named on that row
                twin.equivalent.append(ev.cand.dispatcher_text())
                continue
            ev.confirmed, ev.plan = True, real
            measure(ev, real, s.capacity_gb)
            priced[id(ev)] = estimate
            (ranked if ev.feasible else rejected).append(ev)
        ranked.sort(key=lambda e: (e.step_s, e.cand.key()))
        return Result(s, ranked, rejected if keep_rejected else [], considered, len(kept), kept, comp.count,
                      _estimated_only(rest, top - len(ranked)))
    finally:
        comp.close()


def _document_errors(comp: Compiler, template: dict) -> str:
    """The first two errors of the template recipe, at their places in the user's model and platform documents,
    each with its fix."""
    try:
        comp.compile(template, explain=True)
        return "it compiles when explained (a moeforge bug: please report it)"
    except CompileError as explained:
        exc = explained
    places = {display_path(document(kind, name)[1], project.recipes())
              for kind, name in (("model", comp.setting.model), ("platform", comp.setting.platform))}
    out = []
    for d in [d for d in exc.diagnostics if d.is_error][:2]:
        where = f"{d.pos}: " if d.pos is not None and d.pos.file in places else ""
        out.append(f"{where}{d.code}: {d.message}" + (f" (help: {d.help})" if d.help else ""))
    return "; ".join(out) or str(exc)


def _estimated_only(rest: list, room: int) -> list:
    """Up to ``room`` of the analytic candidates the confirmation budget did not reach, fastest first, a
    dispatcher priced like a listed row's named on that row (as _dispatcher_twin does for confirmed rows)."""
    out, rows = [], {}
    for ev in rest:
        key = (replace(ev.cand, dispatcher="", backend=None), ev.step_s, ev.mem.total)
        if key in rows:
            rows[key].equivalent.append(ev.cand.dispatcher_text())
            continue
        if len(out) >= room:
            break
        rows[key] = ev
        out.append(ev)
    return out


def _dispatcher_twin(ev: Evaluated, ranked: list, priced: dict) -> Evaluated | None:
    """The ranked candidate that differs from ``ev`` only in its dispatcher and that the analytic
    model priced the same (inside one NVLink domain alltoall, DeepEP and HybridEP cost alike)."""
    for r in ranked:
        same = replace(ev.cand, dispatcher=r.cand.dispatcher, backend=r.cand.backend) == r.cand
        if same and priced.get(id(r)) == (ev.step_s, ev.mem.total):
            return r
    return None


def _progress_bar(wanted: bool):
    """tqdm on stderr, only for an interactive terminal."""
    if not wanted or not sys.stderr.isatty():
        return None
    from tqdm import tqdm  # lazy: only an interactive terminal shows a progress bar

    return tqdm(desc="layouts", unit="layout", file=sys.stderr, leave=False, delay=1.0)  # only a long search shows it


def evaluate_recipe(recipe: str) -> Evaluated:
    """The estimate of one given recipe (`plan-layout --evaluate`)."""
    plan = driver.compile(recipe).plan
    try:
        steptime.performance(plan)
    except steptime.PerformanceError as exc:
        raise PlannerError(str(exc)) from None
    lay = Layout.from_plan(plan["layout"])
    tc, tr = plan["transformer_config"], plan["training"]
    mods = tuple(tc.get("recompute_modules") or ()) if tc.get("recompute_granularity") == "selective" else ()
    counted = [n for n in ("embedding", "loss") if tc.get(f"account_for_{n}_in_pipeline_split")]
    split = tc.get("pipeline_model_parallel_layout") or ("account" if len(counted) == 2 else
                                                           f"account ({counted[0]})" if counted else "even")
    cand = space.Candidate(tp=lay.tp, pp=lay.pp, vpp=lay.vpp, cp=lay.cp, ep=lay.ep, etp=lay.expert_tp, split=split,
                           mbs=tr["micro_batch_size"], dispatcher=tc.get("moe_token_dispatcher_type") or "alltoall",
                           backend=tc.get("moe_flex_dispatcher_backend")
                           if tc.get("moe_token_dispatcher_type") == "flex" else None,
                           ep_overlap=bool(tc.get("overlap_moe_expert_parallel_comm")),
                           delay_wgrad=bool(tc.get("delay_wgrad_compute")),
                           recompute=tc.get("recompute_granularity"), modules=mods)
    ev = Evaluated(cand, lay, confirmed=True, plan=plan)
    return measure(ev, plan, (plan["platform"].get("gpu") or {}).get("memory_gb"))
