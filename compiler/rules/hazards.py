"""Field hazards: settings that pass Megatron's own validation and then NaN, hang, crash or train the wrong thing.

The rules (this package's other modules) mirror what Megatron checks; a hazard is what it does not check and the
field found out at run time, each tied to the software versions it was seen with. A hazard is data beside the
rules, in the same expression language: `when` over knob fields (evaluated like a rule's), `affected` the
versions it holds for (((platform.software key, ">=3.5.19,<3.6"), ...), empty: every version, i.e. open),
`fixed_in` the first release that fixed it, `fix` the knob values that avoid it.

Why separate from the rules: a rule is Megatron's verdict (an error the solver must respect); a hazard is
evidence from the field, and a platform's versions decide whether it applies. The driver makes the ones that
apply hard constraints for `auto` knobs (an auto knob never resolves into one) and warns about a pinned match;
the plan lists those cleared only by the platform's versions, so a node with other versions can stop first.

Each hazard's evidence says how it was verified: `reported` (an issue or PR thread read at its source),
`source` (the failing or fixing line read in megatron-core's code at the named versions), `measured`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.rules.expr import TRUE, F, Has, IsSet, Not, Or, evaluate

SYMPTOMS = ("nan", "hang", "crash", "wrong-result", "slowdown")
EVIDENCE_KINDS = ("reported", "source", "measured")
# the platform.software keys a hazard's versions may name (schemas/platform.v1.json)
PACKAGES = ("megatron_core", "megatron_bridge", "transformer_engine", "torch", "nccl", "nvshmem", "deep_ep_version",
            "cuda", "container")  # container: the tag of platform.container_image (e.g. 26.04), not a software key

MLM = "https://github.com/NVIDIA/Megatron-LM"
MB = "https://github.com/NVIDIA-NeMo/Megatron-Bridge"
DEEPEP = "https://github.com/deepseek-ai/DeepEP"
SITE = "megatron/core"  # megatron-core's package, where `source` evidence was read (0.16.1 and 0.19.2 installed)


@dataclass(frozen=True)
class Evidence:
    url: str
    kind: str        # reported | source | measured
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Hazard:
    id: str
    symptom: str                 # nan | hang | crash | wrong-result | slowdown
    summary: str                 # what happens, in one line
    when: object                 # Expr over knob fields: the configuration that meets it
    fix: dict                    # knob field -> value that avoids it (the smallest change)
    fix_text: str                # the fix in words (an upgrade first when there is one)
    evidence: tuple
    affected: tuple = ()         # ((package, spec), ...) where it holds; () = every version (open)
    fixed_in: tuple = ()         # ((package, version), ...) the first release with the fix
    # the configuration of the field report: knob values (and software versions) that meet it
    reported: dict = field(default_factory=dict)
    reported_software: dict = field(default_factory=dict)

    @property
    def fields(self) -> frozenset:
        """The knobs the condition reads: the driver guards the solver's choice of any of them."""
        return self.when.fields()

    def matches(self, values: dict):
        """True / False / UNKNOWN: whether these knob values meet the hazard's condition."""
        return evaluate(self.when, values)

    def versions(self, software: dict | None) -> tuple[str, tuple]:
        """('applies' | 'cleared' | 'may apply', the packages the platform does not state)."""
        missing, cleared = [], False
        for package, spec in self.affected:
            have = (software or {}).get(package)
            if have is None or isinstance(have, bool):
                missing.append(package)
            elif not spec_holds(spec, str(have)):
                cleared = True
        if cleared:
            return "cleared", ()
        return ("may apply", tuple(missing)) if missing else ("applies", ())

    @property
    def applies_when(self) -> dict:
        """The plan contract's form: {package: spec}."""
        return dict(self.affected)


def spec_holds(spec: str, version: str) -> bool:
    """'>=3.5.19,<3.6' against '3.5.20' -> True (pre-release suffixes ignored, as in the rules' versions)."""
    have = version_int(version)
    for clause in spec.split(","):
        clause = clause.strip()
        op = clause.rstrip("0123456789.")
        want = version_int(clause[len(op):])
        ok = {">=": have >= want, ">": have > want, "<=": have <= want, "<": have < want, "==": have == want}.get(op)
        if ok is None:
            raise ValueError(f"bad version clause {clause!r} in {spec!r}")
        if not ok:
            return False
    return True


# ----------------------------------------------------------------------------- the catalogue

IMPL, MODULES = F("cuda_graph_impl"), F("cuda_graph_modules")
EP, TP, PP = (F(f"{x}_model_parallel_size") for x in ("expert", "tensor", "pipeline"))
CP = F("context_parallel_size")
EP_OVERLAP = F("overlap_moe_expert_parallel_comm").is_(True)
DISPATCHER, BACKEND = F("moe_token_dispatcher_type"), F("moe_flex_dispatcher_backend")
MTP = IsSet(F("mtp_num_layers")) & (F("mtp_num_layers") >= 1)
# DeepEP only runs where it is installed (a platform without it is refused by the dispatcher rules)
USES_DEEPEP = (DISPATCHER == "flex") & (BACKEND == "deepep") & F("deep_ep_installed").is_(True)
MOE = IsSet(F("num_moe_experts")) & (F("num_moe_experts") > 1)
FP8 = IsSet(F("fp8"))
MXFP8 = FP8 & (F("fp8_recipe") == "mxfp8")
MC_PRE_0_17, MC_PRE_0_18, MC_PRE_0_19 = ((("megatron_core", f"<{v}"),) for v in ("0.17.0", "0.18.0", "0.19.0"))

HAZARDS: tuple[Hazard, ...] = (
    Hazard(id="MXFP8_PARAM_GATHER_WITHOUT_DP_OVERLAP", symptom="nan",
           summary="MXFP8 parameters gathered through the reused gradient buffer without DP communication overlap: "
                   "NaN loss from iteration 2 (DeepSeek-V3, Qwen3-235B)",
           when=MXFP8 & F("fp8_param").is_(True) & F("reuse_grad_buf_for_mxfp8_param_ag").is_(True)
           & Or(F("overlap_grad_reduce").is_(False), F("overlap_param_gather").is_(False)),
           fix={"overlap_grad_reduce": True, "overlap_param_gather": True},
           fix_text="upgrade megatron-core to >= 0.18.0, or turn on overlap.grad_reduce and overlap.param_gather "
                    "(or precision.reuse_grad_buf_for_mxfp8_param_ag off)",
           evidence=(Evidence(f"{MLM}/issues/2272", "reported", "guard #2270/#2271 was reverted; the thread names "
                                                                "#4769 as the fix"),
                     Evidence(f"{MLM}/pull/4800", "reported", "the fix as the issue tracker lists it (core 0.18.0)")),
           affected=MC_PRE_0_18, fixed_in=(("megatron_core", "0.18.0"),),
           reported={"fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param": True, "reuse_grad_buf_for_mxfp8_param_ag": True,
                     "overlap_grad_reduce": False, "overlap_param_gather": False},
           reported_software={"megatron_core": "0.16.1"}),
    Hazard(id="TE_GRAPH_ATTN_WITH_EP_OVERLAP_UNDER_VPP", symptom="nan",
           summary="Transformer Engine CUDA graphs of attention with EP communication overlap under PP with VPP: "
                   "grad norm oscillates up to ~2e7, NaN near iteration 91 (Qwen3-235B, TP2 PP8 VPP4 EP8)",
           when=(IMPL == "transformer_engine") & Has(MODULES, "attn") & EP_OVERLAP & (PP > 1)
           & IsSet(F("virtual_pipeline_model_parallel_size")),
           fix={"cuda_graph_impl": "none"},
           fix_text="open: drop the TE CUDA graphs (cuda_graph.impl: none), the reporter's workaround",
           evidence=(Evidence(f"{MLM}/issues/5966", "reported", "megatron-core 0.19.0, TE 2.16.0; open"),),
           reported={"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"],
                     "overlap_moe_expert_parallel_comm": True, "pipeline_model_parallel_size": 8,
                     "virtual_pipeline_model_parallel_size": 4, "expert_model_parallel_size": 8},
           reported_software={"megatron_core": "0.19.0", "transformer_engine": "2.16.0"}),
    Hazard(id="TE_GRAPH_EP_DISPATCH_HANG_MXFP8_PP", symptom="hang",
           summary="TE-scoped CUDA graphs with EP >= 32, PP and MXFP8: hang at iteration 0 in dispatch_with_permute "
                   "right after capture, whatever the scopes (Qwen3-235B on GB200, NeMo 26.02)",
           when=(IMPL == "transformer_engine") & (EP >= 32) & (PP > 1) & MXFP8,
           fix={"cuda_graph_impl": "none"},
           fix_text="open: train without TE-scoped CUDA graphs (cuda_graph.impl: none)",
           evidence=(Evidence(f"{MB}/issues/3517", "reported", "TP1 PP8 EP32, fp8_mx, GB200, NeMo 26.02; every "
                                                               "cuda_graph_scope tried hangs; open"),),
           reported={"cuda_graph_impl": "transformer_engine", "expert_model_parallel_size": 32,
                     "pipeline_model_parallel_size": 8, "fp8": "e4m3", "fp8_recipe": "mxfp8"}),
    Hazard(id="LOCAL_GRAPH_CORRUPTS_EXPERT_BIAS", symptom="wrong-result",
           summary="local CUDA graphs with a router expert bias: warmup and capture accumulate (and eval-mode capture "
                   "clears) the persistent expert bias, loss curves drift",
           when=(IMPL == "local") & F("moe_router_enable_expert_bias").is_(True),
           fix={"cuda_graph_impl": "transformer_engine"},
           fix_text="upgrade megatron-core to >= 0.18.0, or use cuda_graph.impl: transformer_engine (scoped) or none",
           evidence=(Evidence(f"{MLM}/pull/4433", "reported", "expert bias accumulated on graph warmup, cleared by "
                                                              "eval() during capture"),
                     Evidence(f"{SITE}/transformer/cuda_graphs.py", "source",
                              "0.19.2 keeps router expert_bias out of warmup (comment at line 1148); 0.16.1 has no "
                              "such handling")),
           affected=MC_PRE_0_18, fixed_in=(("megatron_core", "0.18.0"),),
           reported={"cuda_graph_impl": "local", "moe_router_enable_expert_bias": True},
           reported_software={"megatron_core": "0.16.1"}),
    Hazard(id="EP_OVERLAP_WITH_CUSTOM_PIPELINE_LAYOUT", symptom="hang",
           summary="EP all-to-all overlap with a custom pipeline layout (empty stages, an odd number of MoE layers "
                   "per stage): ranks issue NCCL calls in different orders and deadlock",
           when=EP_OVERLAP & IsSet(F("pipeline_model_parallel_layout")),
           fix={"pipeline_model_parallel_layout": None},
           fix_text="open: drop parallelism.pipeline_layout (even split) or turn off moe.overlap.ep_comm",
           evidence=(Evidence(f"{MLM}/issues/1852", "reported", "custom layouts; odd MoE layers per stage deadlock "
                                                                "A2A overlap; open"),
                     Evidence(f"{MLM}/issues/1810", "reported", "one shared CUDA event lets ranks launch comm ops in "
                                                                "different orders; open")),
           reported={"overlap_moe_expert_parallel_comm": True, "pipeline_model_parallel_layout": "Et|(tt|)*29t|L"}),
    Hazard(id="DEEPEP_INTERNODE_NVSHMEM_3_5_19", symptom="hang",
           summary="DeepEP normal-mode dispatch across nodes with NVSHMEM >= 3.5.19 and a DeepEP without PR #564: "
                   "`DeepEP error: timeout (dispatch CPU)` at the first inter-node dispatch",
           when=USES_DEEPEP & (EP > F("nvlink_domain")),
           fix={"moe_flex_dispatcher_backend": "hybridep"},
           fix_text="open in DeepEP's main: build DeepEP with deepseek-ai/DeepEP#564, or use NVSHMEM < 3.5.19, or "
                    "keep EP within one NVLink domain, or use the hybridep backend",
           evidence=(Evidence(f"{DEEPEP}/issues/553", "reported", "H100 RoCE clusters, NVSHMEM 3.5.19"),
                     Evidence(f"{DEEPEP}/issues/707", "reported", "main lacks the #564 adaptation; hangs in "
                                                                  "notify_dispatch; open"),
                     Evidence(f"{DEEPEP}/pull/564", "reported", "the NVSHMEM >= 3.5.19 adaptation"),
                     Evidence("https://github.com/NVIDIA-NeMo/Automodel/issues/3967", "reported",
                              "NVSHMEM 3.6.5, 16 nodes: same timeout; asks to backport #564")),
           affected=(("nvshmem", ">=3.5.19"),),
           reported={"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep",
                     "deep_ep_installed": True, "expert_model_parallel_size": 16, "nvlink_domain": 8},
           reported_software={"nvshmem": "3.5.19"}),
    Hazard(id="EXPERT_GRAD_NORM_UNDERCOUNT_EP_TP", symptom="wrong-result",
           summary="EP > 1 with TP > 1: the gradient norm omits some experts, so clipping applies less than "
                   "configured (logged grad and param norms are wrong too)",
           when=MOE & (EP > 1) & (TP > 1) & (F("clip_grad") > 0),
           fix={"tensor_model_parallel_size": 1},
           fix_text="upgrade megatron-core to >= 0.19.0, or parallelism.tp: 1",
           evidence=(Evidence(f"{MLM}/pull/5916", "reported", "usually with --moe-grouped-gemm; merged for 0.19.0"),),
           affected=MC_PRE_0_19, fixed_in=(("megatron_core", "0.19.0"),),
           reported={"num_moe_experts": 128, "expert_model_parallel_size": 8, "tensor_model_parallel_size": 2,
                     "clip_grad": 1.0},
           reported_software={"megatron_core": "0.16.1"}),
    Hazard(id="EXPERT_GRADS_MISREDUCED_ETP_NE_TP", symptom="wrong-result",
           summary="EP = 1 with an expert TP different from TP: expert gradients are reduced over the wrong group "
                   "(ETP > TP mixes unrelated gradients, TP > ETP gives each rank part of it), so ranks diverge",
           when=MOE & (EP == 1) & IsSet(F("expert_tensor_parallel_size"))
           & (F("expert_tensor_parallel_size") != TP),
           fix={"expert_tensor_parallel_size": None},
           fix_text="upgrade megatron-core to >= 0.19.0, or leave parallelism.etp unset (ETP = TP)",
           evidence=(Evidence(f"{MLM}/pull/5916", "reported", "the PR's 'uncommon case'; merged for 0.19.0"),
                     Evidence(f"{MLM}/issues/1628", "reported", "TP1 EP1 ETP4 on 8 GPUs: loss curve departs from "
                                                                "TP1 EP4 ETP1 (same checkpoint)")),
           affected=MC_PRE_0_19, fixed_in=(("megatron_core", "0.19.0"),),
           reported={"num_moe_experts": 8, "expert_model_parallel_size": 1, "expert_tensor_parallel_size": 4,
                     "tensor_model_parallel_size": 1},
           reported_software={"megatron_core": "0.16.1"}),
    Hazard(id="MTP_WITH_CONTEXT_PARALLEL_NAN", symptom="nan",
           summary="MTP with CP > 1: rolling the labels can leave a CP rank no valid token, and the MTP loss "
                   "divides 0 by 0; NaN from iteration 0",
           when=MTP & (CP > 1),
           fix={"context_parallel_size": 1},
           fix_text="upgrade megatron-core to >= 0.17.0, or parallelism.cp: 1",
           evidence=(Evidence(f"{MLM}/pull/3396", "reported", "num_tokens.clamp(min=1)"),
                     Evidence(f"{SITE}/models/gpt/gpt_model.py", "source",
                              "0.16.1 line 646 divides torch.sum(mtp_loss) by num_tokens unclamped; 0.19.2 "
                              "transformer/multi_token_prediction.py clamps it (lines 862, 889)")),
           affected=MC_PRE_0_17, fixed_in=(("megatron_core", "0.17.0"),),
           reported={"mtp_num_layers": 1, "context_parallel_size": 2},
           reported_software={"megatron_core": "0.16.1"}),
    Hazard(id="MTP_PER_TOKEN_LOSS_UNDERWEIGHTED", symptom="wrong-result",
           summary="MTP with calculate_per_token_loss: MTP gradients are scaled by the main loss's token count, "
                   "so the MTP loss is under-weighted",
           when=MTP & F("calculate_per_token_loss").is_(True),
           fix={"calculate_per_token_loss": False},
           fix_text="upgrade megatron-core to >= 0.17.0, or training.calculate_per_token_loss: false",
           evidence=(Evidence(f"{MLM}/pull/3159", "reported", "fixes #2417"),
                     Evidence(f"{SITE}/models/gpt/gpt_model.py", "source",
                              "0.16.1 line 656 applies mtp_loss_scale * mtp_loss with no token-count correction; "
                              "0.19.2 multiplies by original_num_tokens / num_tokens")),
           affected=MC_PRE_0_17, fixed_in=(("megatron_core", "0.17.0"),),
           reported={"mtp_num_layers": 1, "calculate_per_token_loss": True},
           reported_software={"megatron_core": "0.16.1"}),
    Hazard(id="BLOCKWISE_FP8_PARAM_GATHER_TP_ALLTOALL_HOPPER", symptom="crash",
           summary="blockwise FP8 with FP8 parameter gather, TP > 1 and the alltoall dispatcher on Hopper: "
                   "`GEMM with Float8BlockwiseQTensor requires GEMM_READY format`",
           when=FP8 & (F("fp8_recipe") == "blockwise") & F("fp8_param").is_(True) & (TP > 1)
           & (DISPATCHER == "alltoall") & (F("gpu_major") == 9),
           fix={"fp8_param": False},
           fix_text="open: precision.fp8_param: false (or parallelism.tp: 1)",
           evidence=(Evidence(f"{MLM}/issues/1863", "reported", "TE 2.9.0.dev, torch 2.8 (NGC 25.08), Megatron dev "
                                                                "2025-10; open"),),
           reported={"fp8": "e4m3", "fp8_recipe": "blockwise", "fp8_param": True, "tensor_model_parallel_size": 2,
                     "moe_token_dispatcher_type": "alltoall", "gpu_major": 9}),
    Hazard(id="MOE_AUX_LOSS_PER_TOKEN_SCALED_BY_TP", symptom="wrong-result",
           summary="per-token loss with TP or CP > 1: the MoE aux and z losses' gradients depend on the TP/CP size",
           when=MOE & F("calculate_per_token_loss").is_(True) & Or(TP > 1, CP > 1)
           & F("aux_loss_coeff_zero").is_(False),
           fix={"calculate_per_token_loss": False},
           fix_text="upgrade megatron-core (0.19.2 has the fix), or training.calculate_per_token_loss: false",
           evidence=(Evidence(f"{MLM}/pull/5047", "reported", "multiplies the scale by tp_cp_group.size()"),
                     Evidence(f"{SITE}/transformer/moe/router.py", "source",
                              "0.19.2 line 633 scales aux_loss by num_local_tokens * tp_cp_group.size(); 0.16.1 does "
                              "not (the first release with the fix was not checked: 0.19.2 stands for it)")),
           affected=(("megatron_core", "<0.19.2"),), fixed_in=(("megatron_core", "0.19.2"),),
           reported={"num_moe_experts": 64, "calculate_per_token_loss": True, "tensor_model_parallel_size": 2,
                     "context_parallel_size": 1, "aux_loss_coeff_zero": False},
           reported_software={"megatron_core": "0.16.1"}),
    Hazard(id="MXFP8_PARAM_GATHER_FORCED_SYNC_STALE", symptom="wrong-result",
           summary="MXFP8 parameter gather through the reused gradient buffer with param-gather overlap: a forced "
                   "parameter sync (checkpoint save) all-gathers stale or zeroed data over the parameters",
           when=MXFP8 & F("fp8_param").is_(True) & F("reuse_grad_buf_for_mxfp8_param_ag").is_(True)
           & F("overlap_param_gather").is_(True) & IsSet(F("save")),
           fix={"reuse_grad_buf_for_mxfp8_param_ag": False},
           fix_text="upgrade megatron-core (0.19.2 has #5236), or precision.reuse_grad_buf_for_mxfp8_param_ag: false",
           evidence=(Evidence(f"{MLM}/pull/5236", "reported", "generalized fix for mxfp8 param gather (main, 2026-06)"),
                     Evidence(f"{SITE}/optimizer/distrib_optimizer.py", "source",
                              "0.19.2 line 2887 (and optimizer.py line 1594) restage with reuse_grad_buf and "
                              "overlap_param_gather; 0.16.1's distributed optimizer has no such path (first fixed "
                              "release not checked: 0.19.2 stands for it)")),
           affected=(("megatron_core", "<0.19.2"),), fixed_in=(("megatron_core", "0.19.2"),),
           reported={"fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param": True, "reuse_grad_buf_for_mxfp8_param_ag": True,
                     "overlap_param_gather": True, "save": "/ckpt"},
           reported_software={"megatron_core": "0.16.1"}),
    # Megatron-Bridge's docs/releases/known-issues.md, by container release (the tag of platform.container_image)
    Hazard(id="NEMO_25_09_MTP_CURRENT_SCALING_FP8", symptom="wrong-result",
           summary="NeMo 25.09: MTP loss does not converge with current-scaling (tensorwise) FP8 (the workaround the "
                   "release gives for DeepSeek, whose subchannel FP8 pretraining does not work there)",
           when=MTP & FP8 & (F("fp8_recipe") == "tensorwise"),
           fix={"fp8": None},
           fix_text="use a later container (25.11 or newer), or train MTP models in BF16",
           evidence=(Evidence(f"{MB}/blob/main/docs/releases/known-issues.md", "reported", "section 25.09"),),
           affected=(("container", "==25.09"),), fixed_in=(("container", "25.11"),),
           reported={"mtp_num_layers": 1, "fp8": "e4m3", "fp8_recipe": "tensorwise"},
           reported_software={"container": "25.09"}),
    Hazard(id="NEMO_25_11_DEEPEP_H100_TIMEOUT", symptom="hang",
           summary="NeMo 25.11: DeepSeek-V3 on H100 with DeepEP fails with `DeepEP error: timeout (dispatch CPU)`",
           when=USES_DEEPEP & (F("gpu_product") == "H100"),
           fix={"moe_token_dispatcher_type": "alltoall"},
           fix_text="use a later container (26.02 lists no such issue), or the alltoall dispatcher",
           evidence=(Evidence(f"{MB}/blob/main/docs/releases/known-issues.md", "reported", "section 25.11"),),
           affected=(("container", "==25.11"),), fixed_in=(("container", "26.02"),),
           reported={"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep",
                     "deep_ep_installed": True, "gpu_product": "H100"},
           reported_software={"container": "25.11"}),
)

BY_ID = {h.id: h for h in HAZARDS}


def _check():
    ids = [h.id for h in HAZARDS]
    if len(set(ids)) != len(ids):
        raise RuntimeError("duplicate hazard ids")
    for h in HAZARDS:
        if h.symptom not in SYMPTOMS or not h.evidence or any(e.kind not in EVIDENCE_KINDS for e in h.evidence):
            raise RuntimeError(f"hazard {h.id}: bad symptom or evidence")
        if any(p not in PACKAGES for p, _ in h.affected + h.fixed_in):
            raise RuntimeError(f"hazard {h.id}: unknown package")
        for _, spec in h.affected:
            spec_holds(spec, "0")  # a malformed spec fails here, at import, not in a user's compile


_check()


# ----------------------------------------------------------------------------- reading a platform and a plan

_TAG = re.compile(r":([0-9]{2}\.[0-9]{2})(?:[.-][0-9A-Za-z.-]*)?$")


def platform_versions(platform: dict | None) -> dict:
    """The versions hazards read: platform.software, plus `container` from platform.container_image's tag
    (nvcr.io/nvidia/nemo:26.04 -> 26.04; absent when the image has no such tag)."""
    platform = platform if isinstance(platform, dict) else {}
    out = dict(platform.get("software") or {})
    match = _TAG.search(str(platform.get("container_image") or ""))
    if match:
        out["container"] = match.group(1)
    return out


def as_rule(h: Hazard):
    """The hazard as a hard rule for the solver: an auto knob never resolves into it."""
    from moeforge.compiler.rules import Rule  # lazy: rules/__init__ loads the catalogue (not this module)

    return Rule(id=f"HAZARD_{h.id}", severity="error", when=TRUE, require=Not(h.when),
                message=f"field hazard ({h.symptom}): {h.summary}", source=", ".join(e.url for e in h.evidence),
                fix=h.fix_text, origin="moeforge")


def cleared_by_versions(values: dict, software: dict) -> list[Hazard]:
    """Hazards the configuration meets that the platform's versions alone clear (a node with other versions
    would hit them): the plan's `hazards` list, for the runtime's preflight."""
    return [h for h in HAZARDS if h.affected and h.versions(software)[0] == "cleared" and h.matches(values) is True
            and all(p != "container" for p, _ in h.affected)]


def plan_entry(h: Hazard) -> dict:
    """One item of plan.json's `hazards` (schemas/plan.v1.json)."""
    return {"id": h.id, "symptom": h.symptom, "summary": h.summary, "fix": h.fix_text, "applies_when": h.applies_when}
