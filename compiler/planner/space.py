"""The candidate space: every layout worth estimating, as recipe documents.

A candidate is built as the recipe it stands for (Candidate.recipe), so the legality check, the
emitted file and the estimate all see the same document.  Only arithmetic prunes here (sizes that
do not fold: compiler/knobs/layout.py LayoutError; a batch that does not split into micro-batches or into the
interleaved schedule's groups, a sequence that does not split over TP, EP overlap without VPP under
PP or with full recompute: asked of the catalogue's own rules, BATCH_RULES and VARIANT_RULES);
legality is the rule catalogue's, through the pipeline (search.py).  How the layers split over a
pipeline is splits.py's.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.layout import Layout, LayoutError, num_microbatches
from moeforge.compiler.rules import BY_ID
from moeforge.compiler.rules.expr import evaluate
from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.rules.precision import PERMUTE_FUSION_TE
from moeforge.compiler.planner import splits

POW2 = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MBS = (1, 2, 4)
VPP = (2, 4, 8)
# Bridge-like defaults when --seq/--gbs are not given: Megatron-Bridge perf recipes train MoE models
# at seq 4096 and GBS = 16 sequences per GPU for the smaller rows (shared/reference/
# bridge-perf-configs-subset.md: qwen3_30b_a3b h100 64 GPUs GBS 4096 = 64 per GPU; deepseek_v3 h100
# 64 GPUs GBS 1024 = 16 per GPU); we take the conservative 16 per GPU.
DEFAULT_SEQ = 4096
DEFAULT_SEQS_PER_GPU = 16
# What a plan is for: a million GPUs (the largest machines have a few hundred thousand), sequences and batches
# within 64-bit arithmetic; beyond, a search would only spend time (--gpus 2**40 took hours, BUG of issue 42).
MAX_SIZE = {"--gpus": 1 << 20, "--seq": 1 << 24, "--gbs": 1 << 32}
# Selective recompute module sets, cheapest first: Megatron-Bridge perf recipes' sets (same file:
# gpt_oss [layernorm,moe_act]; deepseek_v3 [mla_up_proj] and [mla_up_proj,mlp]; qwen3_next
# [layernorm,moe,moe_act]).  Full recompute last (megatron-core: granularity full, uniform, 1 layer).
# What every candidate pins besides its layout: Megatron-Bridge's MoE perf-recipe settings
# (perf_recipes/_common.py _benchmark_common: ddp.grad_reduce_in_fp32 False; use_distributed_optimizer;
# CommOverlapConfig turns on overlap_grad_reduce / overlap_param_gather with the distributed optimizer).
TRAINING_DEFAULTS = {"optimizer": {"distributed": True, "grad_reduce_in_fp32": False},
                     "overlap": {"grad_reduce": True, "param_gather": True}}
SELECTIVE = (("layernorm", "moe_act"), ("mla_up_proj",), ("mla_up_proj", "mlp"), ("layernorm", "moe", "moe_act"))


@dataclass(frozen=True)
class Setting:
    """What the user asked for, and the model/platform facts the space needs."""

    model: str
    platform: str
    gpus: int
    seq: int
    gbs: int
    arch: dict          # the model document's architecture + moe + mtp_num_layers
    plat: dict          # the platform document
    force_balance: bool = False   # benchmark routing (moe_router_force_load_balancing), as Bridge perf runs use

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node of the platform (1 when unstated): the unit --gpus must be a multiple of."""
        return self.plat.get("gpus_per_node") or 1

    @property
    def nodes(self) -> int:
        """Whole nodes the GPUs fill, at least one: resources.nodes of the emitted recipe."""
        return max(1, self.gpus // self.gpus_per_node)

    @property
    def capacity_gb(self) -> float | None:
        """The GPU's memory in GB, or None when the platform does not state it (no memory filter)."""
        return ((self.plat.get("gpu") or {}).get("memory_gb")) or None


@dataclass(frozen=True)
class Candidate:
    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int = 1
    mbs: int = 1
    split: str = "even"          # even | account (embedding and loss count as layers) | a pipeline layout
    dispatcher: str = "alltoall"
    backend: str | None = None   # flex backend: deepep | hybridep
    ep_overlap: bool = False
    delay_wgrad: bool = False
    recompute: str | None = None  # None | selective | full
    modules: tuple = ()

    def layout(self, s: Setting) -> Layout:
        """The candidate's Layout, as the estimators and the rules see it; an even split lets them place layers."""
        return Layout(world_size=s.gpus, tp=self.tp, cp=self.cp, pp=self.pp, ep=self.ep, etp=self.etp,
                      vpp=self.vpp, gpus_per_node=s.gpus_per_node,
                      num_layers=s.arch["num_layers"] if self.split == "even" else None)

    def key(self) -> tuple:
        """Sort key that breaks ties between equal estimates, so the ranking is deterministic."""
        return (self.tp, self.pp, self.vpp or 1, self.cp, self.ep, self.etp, self.mbs)

    def describe(self) -> str:
        """The parallel sizes in the table's and the description's short form (TP2 PP4 ...)."""
        text = f"TP{self.tp} PP{self.pp}" + (f" VP{self.vpp}" if self.vpp else "") + f" CP{self.cp} EP{self.ep}"
        return text + f" ETP{self.etp} MBS{self.mbs}"

    def split_text(self) -> str:
        """How the layers split over the pipeline: '-' without one, 'even', 'account' (embedding and loss
        counted as layers) or the pipeline layout."""
        return self.split if self.pp > 1 else "-"

    def dispatcher_text(self) -> str:
        """The dispatcher with its flex backend, if any, as the table prints it."""
        return self.dispatcher + (f"/{self.backend}" if self.backend else "")

    def overlap_text(self) -> str:
        """Which overlaps are on (ep, wgrad), `-` for none, as the table prints them."""
        return "+".join(n for n, on in (("ep", self.ep_overlap), ("wgrad", self.delay_wgrad)) if on) or "-"

    def recompute_text(self) -> str:
        """The recompute setting in the table's short form: `sel[modules]`, full or none."""
        if self.recompute == "selective":
            return "sel[" + ",".join(self.modules) + "]"
        return self.recompute or "none"

    @property
    def sp(self) -> bool:
        """Sequence parallelism wherever there is TP (as Megatron-Bridge's tuned MoE recipes run)."""
        return self.tp > 1

    def recipe(self, s: Setting, description: str | None = None) -> dict:
        """The recipe document (schemas/recipe.v3.json) this candidate stands for."""
        par = {"tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "etp": self.etp, "vpp": self.vpp,
               "sp": self.sp}
        if self.split == "account":
            par.update(account_for_embedding=True, account_for_loss=True)
        elif self.split != "even":
            par["pipeline_layout"] = self.split
        variant = self.variant_doc()
        moe = variant["moe"]
        software = s.plat.get("software") or {}
        if software.get("grouped_gemm"):
            moe["grouped_gemm"] = True   # TE grouped GEMM where the platform ships it (Megatron-Bridge MoE default)
        if version_int(software.get("transformer_engine")) >= version_int(PERMUTE_FUSION_TE):
            # TE's fused permutation, as Megatron-Bridge's MoE providers and perf recipes set it; the step-time
            # model does not price it (docs/layout-model.md, section 6)
            moe["permute_fusion"] = True
        # the router in FP32, as megatron-core asks from 32 experts on and moeforge's advice under that
        # (PRECISION_ROUTER_DTYPE_MANY_EXPERTS, PRECISION_ROUTER_FP32): the emitted recipe compiles without either
        moe["router"] = {"dtype": "fp32"}
        if s.force_balance:
            moe["router"]["force_load_balancing"] = True
        doc = {"schema": "moeforge/recipe/v3", "revision": 1,
               "name": f"{s.model}-{s.platform}-x{s.gpus}-planned",
               "description": description or f"{s.model} on {s.gpus} x {s.platform}: {self.describe()}, "
                                             f"{self.dispatcher_text()}, overlap {self.overlap_text()}, "
                                             f"recompute {self.recompute_text()} (moeforge plan-layout)",
               "platform": s.platform, "model": s.model, "resources": {"nodes": s.nodes},
               "parallelism": par, "precision": {"dtype": "bf16"}, "moe": moe,
               # Megatron-Bridge's training settings for these models (perf_recipes/_common.py): the distributed
               # optimizer, gradients reduced in bf16, DP communication overlapped with compute
               "optimizer": dict(TRAINING_DEFAULTS["optimizer"]), "overlap": dict(TRAINING_DEFAULTS["overlap"])}
        if self.vpp:
            # the interleaved schedule's P2P overlapped, as Megatron-Bridge sets it with VPP (CommOverlapConfig:
            # PP > 1 and VP > 1 -> overlap_p2p_comm; shared/reference/megatron-overlap-rules.md) and as the solver
            # prefers it (PREFER_P2P_OVERLAP_WITH_VPP); stated, so that the analytic pass, which patches this
            # document into a plan compiled without VPP, prices what the confirmation compiles
            doc["overlap"]["p2p"] = True
        if "recompute" in variant:
            doc["recompute"] = variant["recompute"]
        doc["training"] = dict(variant["training"], global_batch_size=s.gbs, seq_length=s.seq)
        return doc

    def variant_doc(self) -> dict:
        """The recipe's values that a layout's variants change (dispatcher, overlap, recompute, micro-batch)."""
        doc = {"moe": {"dispatcher": self.dispatcher, "flex_backend": self.backend,
                       "overlap": {"ep_comm": self.ep_overlap, "delay_wgrad": self.delay_wgrad}},
               "training": {"micro_batch_size": self.mbs}}
        if self.recompute == "full":
            doc["recompute"] = {"granularity": "full", "method": "uniform", "num_layers": 1}
        elif self.recompute == "selective":
            doc["recompute"] = {"granularity": "selective", "modules": list(self.modules)}
        return doc

    def patched_plan(self, base: dict, s: Setting, lay: Layout, memo: dict | None = None) -> dict:
        """A compiled plan with this candidate's recipe values written in, through the knob table
        (compiler/knobs/table.py), for the fast analytic estimate; the best are compiled for real.  ``memo``: the
        layout's part of the transformer config, kept per layout for its variants (variant_doc)."""
        plan = dict(base)
        key = (self.tp, self.pp, self.vpp, self.cp, self.ep, self.etp, self.split)
        layout_tc = None if memo is None else memo.get(key)
        if layout_tc is None:
            layout_tc = dict(base["transformer_config"])
            for name in ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers",
                         "pipeline_model_parallel_layout"):
                layout_tc.pop(name, None)
            _write(layout_tc, replace(self, **VARIANT_DEFAULTS).recipe(s))
            layout_tc["expert_tensor_parallel_size"] = self.etp
            layout_tc["virtual_pipeline_model_parallel_size"] = self.vpp
            if memo is not None:
                memo[key] = layout_tc
        tc = dict(layout_tc)
        _write(tc, self.variant_doc())
        plan["transformer_config"] = tc
        plan["layout"] = lay.plan_section()
        plan["training"] = dict(base["training"], micro_batch_size=self.mbs, global_batch_size=s.gbs,
                                num_microbatches=num_microbatches(s.gbs, self.mbs, lay.dp))
        return plan


VARIANT_DEFAULTS = {"dispatcher": "alltoall", "backend": None, "ep_overlap": False, "delay_wgrad": False,
                    "recompute": None, "modules": (), "mbs": 1}


def _write(tc: dict, doc: dict) -> None:
    """The transformer-config fields of a recipe document's values, written into ``tc`` through the knob table."""
    for path, value in _flat(doc).items():
        knob = K.BY_PATH.get(path)
        if knob is not None and knob.section == "tc":
            tc[knob.field] = copy.copy(value)


def _flat(doc: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ------------------------------------------------------------------------ enumeration
def _tp_options(s: Setting) -> list[int]:
    a = s.arch
    heads = [a["num_attention_heads"], a.get("num_query_groups") or a["num_attention_heads"]]
    heads += [a[k] for k in ("linear_num_key_heads", "linear_num_value_heads") if a.get(k)]
    domain = s.plat.get("nvlink_domain") or 1
    return [t for t in POW2 if t <= min(domain, s.gpus, 8) and all(h % t == 0 for h in heads)]


def _cp_options(s: Setting) -> list[int]:
    """CP only where each rank keeps at least 4096 tokens (shorter sequences: CP's exchange is not
    worth it; Megatron-Bridge uses CP only for long-context recipes)."""
    return [c for c in POW2 if c == 1 or (s.seq % (2 * c) == 0 and s.seq // c >= 4096)]


def _dispatchers(s: Setting, ep: int) -> list[tuple[str, str | None]]:
    if ep == 1:
        return [("alltoall", None)]
    sw = s.plat.get("software") or {}
    out = [("alltoall", None)]
    out += [("flex", name) for name, backend in K.FLEX_BACKENDS.items() if sw.get(backend.software)]
    return out


def divisors(n: int) -> list[int]:
    """Every size that divides n, smallest first (pairs up to the square root: a large GPU count is
    sqrt(n) steps, not n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


# The rules about the batch and the sequence alone: whether GBS splits into micro-batches over DP and into the groups
# the interleaved schedule runs, and whether each rank's sequence splits over TP under sequence parallelism.  The
# search asks them of every layout (their expressions, not a copy of their arithmetic), so layouts that cannot run
# the batch never take the confirmation budget.
BATCH_RULES = tuple(BY_ID[r] for r in ("LAYOUT_GBS_DIVISIBLE", "LAYOUT_INTERLEAVED_MICROBATCHES_AT_LEAST_PP",
                                       "LAYOUT_INTERLEAVED_MICROBATCHES_DIVISIBLE_BY_PP",
                                       "LAYOUT_SP_SEQ_DIVISIBLE_BY_TP"))


def batch_runs(s: Setting, cand: Candidate, lay: Layout) -> bool:
    """Whether BATCH_RULES hold for this layout's batch and sequence (each rule in force is evaluated concretely)."""
    env = {"global_batch_size": s.gbs, "micro_batch_size": cand.mbs, "data_parallel_size": lay.dp,
           "pipeline_model_parallel_size": cand.pp, "virtual_pipeline_model_parallel_size": cand.vpp,
           "seq_length": s.seq, "tensor_model_parallel_size": cand.tp, "context_parallel_size": cand.cp,
           "sequence_parallel": cand.sp}
    return all(evaluate(r.when, env) is False or evaluate(r.require, env) is True for r in BATCH_RULES)


# The rules about EP overlap that a layout and its recompute option decide (it needs VPP under pipeline parallelism
# and refuses full recompute): asked of each candidate before pricing, so that the confirmation's compiles are not
# spent on variants the rules refuse (DeepSeek-V3 on 64 B200 spent all 150 of them so and ranked 9 layouts).
VARIANT_RULES = tuple(BY_ID[r] for r in ("EP_OVERLAP_NEEDS_VPP", "EP_OVERLAP_NO_FULL_RECOMPUTE"))


def variant_runs(cand: Candidate) -> bool:
    """Whether VARIANT_RULES hold for this candidate's EP overlap, pipeline and recompute option."""
    env = {"overlap_moe_expert_parallel_comm": cand.ep_overlap, "pipeline_model_parallel_size": cand.pp,
           "virtual_pipeline_model_parallel_size": cand.vpp, "recompute_granularity": cand.recompute}
    return all(evaluate(r.when, env) is False or evaluate(r.require, env) is True for r in VARIANT_RULES)


def layouts(s: Setting, weights: splits.Weights):
    """(Candidate with the layout fields set, its Layout) for every size combination that folds and
    splits the batch.  PP and EP take every size that divides the GPU count (EP also the expert count),
    not powers of two alone: a 72-GPU NVL72 rack folds with PP 3 or 9; TP and CP stay powers of two
    (head counts and sequence halves).  Each pp x vpp takes the pipeline splits of splits.options
    (``weights``: the model's layers as the step-time model prices them)."""
    experts = s.arch.get("num_experts") or 1
    for tp in _tp_options(s):
        for cp in _cp_options(s):
            for pp in (p for p in divisors(s.gpus) if p <= s.arch["num_layers"]):
                for vpp in (None,) + (VPP if pp > 1 else ()):
                    for split, _, _ in splits.options(s.arch, weights, pp, vpp):
                        for ep in divisors(math.gcd(experts, s.gpus)):
                            for etp in sorted({1, tp}):
                                for mbs in MBS:
                                    cand = Candidate(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, mbs=mbs,
                                                     split=split)
                                    try:
                                        lay = cand.layout(s)
                                    except LayoutError:
                                        continue
                                    if not batch_runs(s, cand, lay):
                                        continue
                                    yield cand, lay


def recompute_options(s: Setting) -> list[tuple[str | None, tuple]]:
    """None, the selective sets whose modules this model has, full: cheapest first."""
    mla = bool(s.arch.get("multi_latent_attention"))
    sets = [m for m in SELECTIVE if ("mla_up_proj" in m) == mla]
    return [(None, ())] + [("selective", m) for m in sets] + [("full", ())]


def variants(s: Setting, cand: Candidate) -> list[Candidate]:
    """The time-only choices for one layout: dispatcher and backend, EP overlap, delayed wgrad."""
    out = []
    for disp, backend in _dispatchers(s, cand.ep):
        for overlap, wgrad in ((False, False), (True, False), (True, True)) if cand.ep > 1 else ((False, False),):
            out.append(replace(cand, dispatcher=disp, backend=backend, ep_overlap=overlap, delay_wgrad=wgrad))
    return out
