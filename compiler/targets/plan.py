"""The Plan: what the runtime builds, as plan.json (schemas/plan.v1.json).

Everything here is derived from the resolved values; field names are chosen for the
platform's megatron-core version through compiler/knobs/table.py, so the runtime can pass the
sections straight to megatron-core.
"""
from __future__ import annotations

import json
from dataclasses import asdict

from moeforge.compiler import __version__
from moeforge.compiler.diagnostics import CompileError, error
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.display import display
from moeforge.compiler.knobs.fields import megatron_fields
from moeforge.compiler.knobs.layout import Layout, num_microbatches
from moeforge.compiler.knobs.versions import version_int, version_text
from moeforge.compiler.recipe.validate import validator
from moeforge.compiler.rules import hazards
from moeforge.compiler.rules.cuda_graphs import FULL_ITER
from moeforge.compiler.rules.expr import evaluate
from moeforge.compiler.solver.inputs import env_vars
from moeforge.compiler.solver.values import Resolved

CHECKED = ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "overlap_moe_expert_parallel_comm",
           "delay_wgrad_compute", "moe_shared_expert_overlap", "expert_model_parallel_size",
           "expert_tensor_parallel_size", "cuda_graph_impl", "cuda_graph_scope", "cuda_graph_modules",
           "recompute_granularity", "recompute_method", "recompute_modules", "moe_router_force_load_balancing")
RUNTIME_ONLY = {"activation_func"}  # resolved by the runtime into a function


def build(r: Resolved) -> dict:
    """The plan, checked against schemas/plan.v1.json: the runtime reads it through the same schema."""
    plan = _build(r)
    bad = list(validator("plan.v1.json").iter_errors(plan))
    if bad:
        raise CompileError([error("E_PLAN_SCHEMA", f"moeforge built a plan its own schema refuses at "
                                  f"{'.'.join(map(str, e.absolute_path)) or '(plan)'}: {e.message}",
                                  help="this is a moeforge bug: please report it with the recipe") for e in bad])
    return plan


def _build(r: Resolved) -> dict:
    _check_positions(r)
    env, data = r.env, r.composed.data
    platform, model = data["platform"], data["model"]
    mcore = env["megatron_core"]
    sections = megatron_view(env, model, mcore)
    io = io_sections(env)
    tc = _existing(sections["tc"], mcore)
    layout = _layout(env)
    mbs, gbs = env["micro_batch_size"], env["global_batch_size"] or env["micro_batch_size"] * layout["dp"]
    return {
        "schema": "moeforge/plan/v1",
        "moeforge_version": __version__,
        "recipe": {"id": r.composed.recipe_id, "name": data.get("name", r.composed.recipe_id.replace("/", "-")),
                   "path": r.composed.file, "revision": data.get("revision"), **_overrides(r)},
        "platform": {**{k: platform.get(k) for k in ("name", "device", "gpu", "gpus_per_node", "nvlink_domain",
                                                     "distributed_backend", "software", "container_image")},
                     # the step-time model's inputs (compiler/estimate/steptime.py), where the platform has them
                     **({"performance": platform["performance"]} if platform.get("performance") else {}),
                     # the memory a rank may use (moeforge diagnose), where the platform states one
                     **({"memory_budget_gb": platform["memory_budget_gb"]} if platform.get("memory_budget_gb") else {})},
        "layout": layout,
        "transformer_config": tc,
        "model": sections["model"],
        **({"config_attributes": sections["yarn"]} if sections["yarn"] else {}),
        "ddp_config": {**sections["ddp"], "bucket_size": None},
        "optimizer": {"optimizer": "adam", **sections["optimizer"],
                      "use_distributed_optimizer": env["use_distributed_optimizer"]},
        "training": {**sections["training"], "global_batch_size": gbs,
                     "num_microbatches": num_microbatches(gbs, mbs, layout["dp"]),
                     "report_window": [min(2, env["train_iters"]), env["train_iters"]]},
        "runtime": {"transformer_impl": "transformer_engine" if env["transformer_engine"] else "local",
                    "schedule": pipeline_schedule(env), "requires": _requires(env),
                    "checked_fields": [f for f in CHECKED if f in tc], **io["runtime"]},
        **{section: io[section] for section in K.IO_SECTIONS if section != "runtime"},
        "env": environment(env),
        # `hazards` (the recipe's own check setting) is not a training decision: a plan does not change with it
        "decisions": [_decision(d) for _, d in sorted(r.decisions.items()) if d.field in K.BY_FIELD
                      and d.field != "hazards"],
        "warnings": [d.to_json() for d in r.diagnostics],
        # field hazards this plan escapes only by the platform's versions: the node's preflight checks them
        **({"hazards": [hazards.plan_entry(h) for h in cleared]} if (cleared := hazards.cleared_by_versions(
            env, hazards.platform_versions(platform))) else {}),
    }


def megatron_view(env: dict, model: dict, mcore: int) -> dict[str, dict]:
    """Every knob with a plan section, under its name in this megatron-core release (moeforge.compiler.knobs.table).

    What is not one knob to one field is spelled out here, once: the activation (gated + function),
    the per-layer MoE pattern, the position table length, tied embeddings, dtypes, and what
    megatron-core would fill in itself (stated, so it is checked).
    """
    out = {s: {} for s in ("tc", "model", "ddp", "optimizer", "training", "yarn")}
    flex = env["moe_token_dispatcher_type"] == "flex"
    backend = env["moe_flex_dispatcher_backend"] if flex else None
    for k in K.KNOBS:
        name, value = k.name_for(mcore), env.get(k.field)
        if k.section is None or name is None or k.section in K.IO_SECTIONS:
            continue
        if "{backend}" in name:
            name = name.format(backend=backend) if backend in ("deepep", "hybridep") else None
        if value is None and k.field == "cuda_graph_modules":
            value = []  # megatron-core's default "full" is deprecated and warns
        if value is None or name is None:
            continue
        out[k.section][name] = list(value) if k.kind == "set" else value
    tc, arch, moe = out["tc"], model.get("architecture", {}), model.get("moe", {})
    # DDP and optimizer fields no recipe sets (the knob table's derived rows), stated so that no front-end default
    # or Bridge recipe stands in: the front-ends' gradient NaN check, the DDP's copy of delayed wgrad (its hooks
    # wait for backward_dw), param all-gathers aligned across stages on the interleaved schedule (Megatron-LM and
    # Bridge's CommOverlapConfig), the DDP's and optimizer's copies of FP8 parameters, the MXFP8 buffer reuse,
    # param-gather overlap and the FP8 recipe
    out["ddp"].update(check_for_nan_in_grad=nan_check(env, out["tc"]),
                      average_in_collective=K.BY_FIELD["average_in_collective"].default,
                      delay_wgrad_compute=bool(env.get("delay_wgrad_compute")),
                      align_param_gather=(env.get("pipeline_model_parallel_size") or 1) > 1
                      and (env.get("virtual_pipeline_model_parallel_size") or 1) > 1)
    out["ddp"]["fp8_param_gather"] = bool(env.get("fp8_param"))  # Megatron-LM: one flag, --fp8-param-gather
    out["optimizer"]["reuse_grad_buf_for_mxfp8_param_ag"] = bool(env.get("reuse_grad_buf_for_mxfp8_param_ag"))
    out["optimizer"]["overlap_param_gather"] = bool(env.get("overlap_param_gather"))
    for name in K.OPTIMIZER_PRECISION:  # recipe settings; stated (megatron-core's defaults) for a partial env too
        out["optimizer"].setdefault(name, K.BY_FIELD[name].default)
    # the optimizer reads the FP8 recipe for FP8 parameters, and the precision-aware optimizer to decide whether
    # TE or megatron-core keeps the master weights (OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8),
    # FP8 or not: Megatron-LM copies --fp8-recipe (default delayed), Bridge mixed_precision.fp8_recipe (tensorwise)
    fp8_recipe_read = bool(env.get("fp8")) or out["optimizer"]["use_precision_aware_optimizer"]
    if fp8_recipe_read:
        out["optimizer"]["fp8_recipe"] = out["tc"].setdefault("fp8_recipe", K.BY_FIELD["fp8_recipe"].default)
    if not flex:
        tc.pop("moe_flex_dispatcher_backend", None)  # inert without flex: never emit a backend nobody uses
    for quant in ("fp8", "fp4"):
        if not env.get(quant) and not (quant == "fp8" and fp8_recipe_read):
            tc.pop(f"{quant}_recipe", None)
    # stated even where the document names none (megatron-core's gelu, not gated): a Bridge recipe's own SwiGLU
    # must not stand in for it
    tc["activation_func"], tc["gated_linear_unit"] = K.mlp_activation(arch) or ("gelu", False)
    # likewise every layer MoE (megatron-core's 1) where the document names no pattern: a Bridge recipe's own
    # dense-first pattern (DeepSeek-V3's) must not stand in for it
    tc["moe_layer_freq"] = moe["layer_freq"] if moe.get("layer_freq") is not None else 1
    if tc.get("ffn_hidden_size") is None and (width := K.effective("ffn_hidden_size", tc)) is not None:
        # megatron-core's default (TransformerConfig.__post_init__), stated: without --ffn-hidden-size
        # Megatron-LM's validate_args makes a SwiGLU MLP 2/3 as wide, and the estimates read the width
        tc["ffn_hidden_size"] = width
    if tc.get("recompute_modules") == [] or (tc.get("recompute_granularity") == "selective"
                                             and not tc.get("recompute_modules")):
        # what megatron-core fills in for None; stated, so it is checked.  [] is None too: Megatron-LM's
        # --recompute-modules takes at least one module, so no launch could hold an empty list
        tc["recompute_modules"] = ["core_attn"]
    if tc.get("add_bias_linear"):
        tc["add_qkv_bias"] = True  # megatron-core biases linear_qkv on either; Megatron-LM sets both (validate_args)
    if tc.get("expert_tensor_parallel_size") is None:
        tc["expert_tensor_parallel_size"] = env["tensor_model_parallel_size"]
    dtype = "bfloat16" if env["bf16"] else "float16" if env["fp16"] else "float32"
    tc["params_dtype"] = tc["pipeline_dtype"] = dtype
    tc["batch_p2p_comm"] = not env.get("overlap_p2p_comm", False)
    # the model document's positions, else the sequence length (Megatron-LM's default); _check_positions refuses
    # a sequence longer than the positions, as Megatron-LM does
    out["model"]["max_sequence_length"] = arch.get("max_position_embeddings") or env["seq_length"]
    out["model"]["share_embeddings_and_output_weights"] = not arch.get("untie_embeddings_and_output_weights", True)
    if tc.get("multi_latent_attention"):  # MLA builds its rotary embedding from the config, not GPTModel's arguments
        tc.update({k: out["model"][k] for k in ("rotary_base", "rotary_percent") if k in out["model"]})
        # null: no query compression, as Hugging Face, Megatron-LM and Bridge read it (MLATransformerConfig alone
        # would fill in 512)
        tc.setdefault("q_lora_rank", None)
        for name, value in K.MLA_DEFAULTS.items():
            tc.setdefault(name, value)
    else:  # MLATransformerConfig's own fields: inert without MLA (TransformerConfig has none), never emitted
        for name in ("q_lora_rank", *K.MLA_DEFAULTS):
            tc.pop(name, None)
    if out["model"].get("position_embedding_type") != "yarn":
        out["yarn"] = {}
    elif not tc.get("multi_latent_attention"):  # MLA reads its own fields (MLA_DEFAULTS above)
        for name, value in K.YARN_DEFAULTS.items():
            if out["yarn"].get(name) is None:
                out["yarn"][name] = value
    return out


def nan_check(env: dict, tc: dict) -> bool:
    """Megatron-LM's and Megatron-Bridge's per-step NaN check of the loss and gradients (on by default in both):
    off under a full-iteration CUDA graph, which both refuse to combine with it (validate_args,
    ConfigContainer.validate), and with FP16, whose dynamic loss scaling reads NaNs as a signal (validate_args
    turns it off)."""
    graphs = {"cuda_graph_impl": tc.get("cuda_graph_impl", "none"), "enable_cuda_graph": False,
              # megatron-core < 0.18 names the modules cuda_graph_scope (full iteration: local + [full_iteration])
              "cuda_graph_modules": tc.get("cuda_graph_modules") or tc.get("cuda_graph_scope") or []}
    return evaluate(FULL_ITER, graphs) is not True and not env.get("fp16")


def io_sections(env: dict) -> dict[str, dict]:
    """The training-I/O sections (knobs.IO_SECTIONS): every key stated, null included, under the plan's names.

    runtime: {entrypoint}; data: {kind, paths, blend, split, cache_dir, env_vars}; tokenizer: {type, path,
    vocab_size, eod_id}; checkpoint: {save, interval, load, keep_last, async, format, scheduler}; schedule: {decay,
    warmup_iters, warmup_fraction, decay_iters, wsd_decay_iters}; logging: {interval, tensorboard,
    wandb_project}; eval: {interval, iters}. Paths keep ${VAR} literally (the runtime resolves them at
    launch); data.env_vars names the variables the data paths use.
    """
    out: dict[str, dict] = {s: {} for s in K.IO_SECTIONS}
    for k in K.KNOBS:
        if k.section in K.IO_SECTIONS:
            out[k.section][k.name_for(0)] = env.get(k.field)
    data = out["data"]
    if data["blend"] is not None:
        data["blend"] = [{"weight": e["weight"], "path": e["path"]} for e in data["blend"]]
    data["env_vars"] = env_vars([env.get(f) for f in ("data_paths", "data_blend", "data_cache_path")])
    return out


def _check_positions(r: Resolved) -> None:
    """A sequence longer than the model document's max_position_embeddings is refused, as Megatron-LM's
    validate_args refuses it (it was silently raised to the sequence length: --max-position-embeddings then
    states a model other than the document's)."""
    composed = r.composed
    positions = (composed.data["model"].get("architecture") or {}).get("max_position_embeddings")
    seq = r.env.get("seq_length")
    if positions is not None and seq is not None and positions < seq:
        raise CompileError([error(
            "E_SEQ_PAST_MAX_POSITIONS", f"training.seq_length {seq} is longer than the model's "
            f"architecture.max_position_embeddings {positions}: Megatron-LM's validate_args asserts "
            "max_position_embeddings >= seq_length (megatron/training/arguments.py, 0.19)",
            composed.pos(("training", "seq_length")),
            help=f"set training.seq_length to at most {positions}, or raise model.architecture.max_position_embeddings "
                 f"(at {composed.pos(('model', 'architecture', 'max_position_embeddings'))}) if the model is meant "
                 "to train on longer sequences")])


def _existing(tc: dict, mcore: int) -> dict:
    """Only fields this megatron-core release has; a value it cannot take is a compile error."""
    known = config_fields(mcore)
    if known is None:
        return tc
    extra = {k: v for k, v in tc.items() if k not in known and k not in RUNTIME_ONLY}
    defaults = {k.name_for(mcore): k.default for k in K.KNOBS}
    lost = [f"{k} = {json.dumps(v)}" for k, v in extra.items()
            if v not in (None, False, [], {}) and v != defaults.get(k)]
    if lost:
        raise CompileError([error("E_NOT_IN_MEGATRON", f"megatron-core {version_text(mcore)} has no field for: "
                                  + ", ".join(lost), help="use a platform with a newer megatron-core, or drop the setting")])
    return {k: v for k, v in tc.items() if k not in extra}


def config_fields(mcore: int) -> frozenset | None:
    """TransformerConfig + ModelParallelConfig fields of the newest catalogued release <= mcore."""
    versions = sorted(megatron_fields()["versions"].items(), key=lambda kv: version_int(kv[0]))
    chosen = None
    for name, fields in versions:
        if version_int(name) <= mcore:
            chosen = fields
    return chosen if chosen is not None else (versions[0][1] if versions else None)


def _overrides(r) -> dict:
    """The --set values the plan was compiled with, as given (what `moeforge diagnose` compiles its fixes on)."""
    texts = list(dict.fromkeys(p.file[len("--set "):] for p in r.composed.origins.values()
                               if p.file.startswith("--set ")))
    return {"overrides": texts} if texts else {}


def _layout(env) -> dict:
    """The plan's layout section: sizes and the derived DP/EDP, from compiler/knobs/layout.py."""
    layout = Layout.from_values(env).plan_section()
    layout["nnodes"] = env["num_nodes"]
    return layout


def pipeline_schedule(env) -> str:
    """plan.runtime.schedule: the 1F1B pipeline schedule megatron-core runs (the LR schedule is plan.schedule)."""
    pipelined = env["pipeline_model_parallel_size"] > 1
    if env["overlap_moe_expert_parallel_comm"]:
        return "combined_1f1b"
    if pipelined:
        return "interleaved_1f1b" if env["virtual_pipeline_model_parallel_size"] else "1f1b"
    return "no_pipelining"


def _requires(env) -> list[dict]:
    out = []
    if env["moe_token_dispatcher_type"] == "flex" and env["moe_flex_dispatcher_backend"] in K.FLEX_BACKENDS:
        backend = K.FLEX_BACKENDS[env["moe_flex_dispatcher_backend"]]
        out.append({"module": backend.module, **({"attribute": backend.attribute} if backend.attribute else {}),
                    "package": backend.package,
                    "needed_for": f"moe.dispatcher=flex, moe.flex_backend={env['moe_flex_dispatcher_backend']}",
                    "alternative": "moe.dispatcher=alltoall"})
    if env["transformer_engine"]:
        out.append({"module": "transformer_engine", "package": "transformer-engine[pytorch]",
                    "needed_for": "the Transformer Engine layer spec (platform.software.transformer_engine)",
                    "alternative": "a platform without transformer_engine (local spec)"})
    return out


def environment(env) -> dict:
    """Launch-time environment variables the plan needs, each with its reason.

    Values follow Megatron-Bridge's perf recipes (perf_recipes/*, environment.py) and its perf
    harness topology rules (scripts/common/benchmark_parallelism.py).
    """
    out = {}
    if env["device"] != "cuda":
        return out

    def put(name, value, reason):
        out[name] = {"value": str(value), "reason": reason}

    tp, cp = env["tensor_model_parallel_size"], env["context_parallel_size"]
    product, ep = env["gpu_product"], env["expert_model_parallel_size"]
    flex = env["moe_token_dispatcher_type"] == "flex"
    backend = env["moe_flex_dispatcher_backend"] if flex else None
    put("TORCH_NCCL_HIGH_PRIORITY", 1, "Megatron-Bridge COMMON_PERF_ENV_VARS: NCCL on high-priority streams")
    if product in ("B200", "B300", "GB200", "GB300"):
        put("CUDA_DEVICE_MAX_CONNECTIONS", 32, f"{product}: the perf harness uses 32 connections on Blackwell")
    elif (tp > 1 or cp > 1) and not env["overlap_moe_expert_parallel_comm"]:
        put("CUDA_DEVICE_MAX_CONNECTIONS", 1, "TP/CP > 1 without EP overlap: one connection keeps TP/CP "
            "communication kernels ahead of compute")
    elif backend in ("deepep", "hybridep"):
        put("CUDA_DEVICE_MAX_CONNECTIONS", 32, f"flex dispatcher with {backend}: many concurrent streams")
    else:
        put("CUDA_DEVICE_MAX_CONNECTIONS", 8, "the perf harness default when TP/CP do not need strict ordering")
    if backend == "hybridep":
        nvl72 = env["nvlink_domain"] >= 72
        ranks = env.get("hybridep_ranks_per_nvlink_domain") or (ep if nvl72 else min(ep, 8))
        put("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", ranks, "HybridEP must know the EP ranks per NVLink "
            "domain: " + ("EP on NVL72" if nvl72 else "min(EP, 8) on NVL8") + "; a mismatch hurts speed and correctness")
        put("NVLINK_DOMAIN_SIZE", 72 if nvl72 else 8, "the platform's NVLink domain, for HybridEP")
        put("USE_MNNVL", 1 if nvl72 else 0, "multi-node NVLink " + ("present (NVL72)" if nvl72 else "absent"))
    if env.get("cuda_graph_impl", "none") != "none":
        put("NCCL_GRAPH_REGISTER", 0, "CUDA graphs: Megatron-Bridge perf recipes keep NCCL buffer registration "
            "out of captured graphs")
        put("TORCH_NCCL_AVOID_RECORD_STREAMS", 1, "CUDA graphs: avoid record_stream on NCCL tensors")
    if env.get("fine_grained_activation_offloading"):
        put("NVTE_CPU_OFFLOAD_V1", 1, "fine-grained activation offloading: Transformer Engine >= 2.10 would offload "
            "weights too without it (Megatron-LM validate_args and Megatron-Bridge refuse to start)")
    if env.get("tp_comm_overlap") or env["overlap_moe_expert_parallel_comm"]:
        put("NVTE_FWD_LAYERNORM_SM_MARGIN", 20, "overlapped communication: keep SMs free for comm kernels "
            "(Megatron-Bridge perf recipes use 10-20)")
        put("NVTE_BWD_LAYERNORM_SM_MARGIN", 20, "overlapped communication: keep SMs free for comm kernels "
            "(Megatron-Bridge perf recipes use 10-20)")
    return out


def _decision(d) -> dict:
    data = asdict(d)
    data["knob"] = display(d.field)
    return data
