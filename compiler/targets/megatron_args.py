"""Megatron-LM pretrain_gpt.py arguments for a plan, from the one table (moeforge.compiler.knobs.table).

Every plan value is looked up in the table (section and name -> Megatron-LM argument dest). The flag that sets a dest, its action (store_true / store_false / value / list) and
Megatron-LM's own default come from Megatron-LM's argument parser, stored as data
(compiler/data/megatron_lm_args.json, megatron-core 0.19.2's megatron/training); for a 0.16
platform only the flags that release has (compiler/data/megatron_lm_flags.json) are used. A value
is written when it differs from Megatron-LM's default; whatever cannot be written becomes a
comment line saying why, never a silent drop.
"""
from __future__ import annotations

import json
from functools import lru_cache

from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.resources import MEGATRON_DATA

SECTIONS = (("transformer_config", "tc"), ("model", "model"), ("ddp_config", "ddp"), ("optimizer", "optimizer"),
            ("training", "training"), ("config_attributes", "yarn"))
# Plan fields Megatron-LM derives itself from other arguments, and fields only moeforge's runtime reads.
DERIVED = {"params_dtype": "from --bf16/--fp16", "pipeline_dtype": "from --bf16/--fp16",
           "batch_p2p_comm": "the opposite of overlap_p2p_comm", "gated_linear_unit": "from the activation flag",
           "activation_func": "--swiglu / --quick-geglu / --squared-relu", "num_query_groups": "--group-query-attention",
           "moe_layer_freq": "--moe-layer-freq", "max_sequence_length": "--max-position-embeddings",
           "share_embeddings_and_output_weights": "--untie-embeddings-and-output-weights",
           "bias_activation_fusion": "--no-bias-swiglu-fusion / --no-bias-gelu-fusion",
           "persist_layer_norm": "--no-persist-layer-norm"}
# Plan fields that copy another section's value (megatron-core reads it from both configs): one flag, the owner's
COPIES = {("optimizer", "use_distributed_optimizer"): "ddp_config", ("optimizer", "overlap_param_gather"): "ddp_config",
          ("ddp", "delay_wgrad_compute"): "transformer_config", ("ddp", "check_for_nan_in_grad"): "the NaN check",
          ("ddp", "fp8_param_gather"): "transformer_config", ("optimizer", "fp8_recipe"): "transformer_config",
          ("optimizer", "reuse_grad_buf_for_mxfp8_param_ag"): "ddp_config"}
RUNTIME_ONLY = {"num_microbatches": "Megatron-LM derives it from the batch sizes and the data-parallel size",
                "report_window": "steps moeforge's runtime reports on",
                "bucket_size": "megatron-core's default bucketing",
                "optimizer": "Megatron-LM's default --optimizer adam"}
# Training-I/O plan values that are not Megatron-LM arguments of their own and need no note: the tokenizer's
# known vocab (Megatron-LM takes the model's, --vocab-size / --padded-vocab-size), the ${VAR} names, and
# which runtime runs the plan.
IO_QUIET = {("tokenizer", "vocab_size"), ("data", "env_vars"), ("runtime", "entrypoint"), ("checkpoint", "scheduler")}
# data.* read only for an indexed dataset
INDEXED_ONLY = {"paths", "blend", "split"}


@lru_cache(maxsize=1)
def lm_parser() -> dict:
    """The stored argparse dump (flags, dests, defaults) of the newest catalogued Megatron-LM release, read once."""
    return json.loads((MEGATRON_DATA / "megatron_lm_args.json").read_text())


@lru_cache(maxsize=1)
def flag_tables() -> dict:
    """flag -> kind of each catalogued Megatron-LM release (0.16.1 has no stored parser, only names)."""
    tables = {k: v for k, v in json.loads((MEGATRON_DATA / "megatron_lm_flags.json").read_text()).items()
              if not k.startswith("_")}
    parser = lm_parser()
    tables[parser["release"]] = {flag: entry["kind"] for flag, entry in parser["options"].items()}
    return tables


def release_for(mcore: str) -> str:
    """The Megatron-LM release whose flags apply: 0.16.1 before 0.17, else the stored parser's."""
    return "0.16.1" if version_int(mcore) < version_int("0.17.0") else lm_parser()["release"]


@lru_cache(maxsize=4)
def _by_dest(release: str) -> dict[str, list[tuple[str, dict]]]:
    """dest -> [(flag, parser entry)] for the flags this release has."""
    known = flag_tables().get(release)
    out: dict[str, list] = {}
    for flag, entry in lm_parser()["options"].items():
        if known is None or flag in known:
            out.setdefault(entry["dest"], []).append((flag, entry))
    return out


def lm_default(dest: str):
    """Megatron-LM's default for an argument (the stored parser's; None for one it does not have)."""
    options = _by_dest(lm_parser()["release"]).get(dest)
    return options[0][1]["default"] if options else None


@lru_cache(maxsize=4)
def knob_index(mcore: int) -> dict[tuple[str, str], K.Knob]:
    """(section, name in this megatron-core version) -> knob: how a plan's config field finds its flags."""
    return {(k.section, k.name_for(mcore)): k for k in K.KNOBS if k.section and k.name_for(mcore)}


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # window sizes and similar tuples: Megatron-LM's tuple_type reads "a,b"
        return ",".join(str(v) for v in value)
    return str(value)


def _set(by_dest: dict, dest: str, value) -> tuple[str, list[str]] | str | None:
    """(flag, values) that makes Megatron-LM hold `value` in `dest`; None when that is its default;
    a string saying why when no flag of this release can."""
    options = by_dest.get(dest)
    if not options:
        return "Megatron-LM has no flag for it"
    default = options[0][1]["default"]
    as_list = value if isinstance(value, list) else [value]
    if value == default or (value in ([], None) and default in ([], None)) or \
            (options[0][1]["kind"] == "list" and as_list == default):
        return None
    canonical = "--" + dest.replace("_", "-")  # among a value's aliases (--persistent-save-interval), its own name
    for flag, entry in sorted(options, key=lambda o: not isinstance(value, bool) and o[0] != canonical):
        kind = entry["kind"]
        if isinstance(value, bool):
            if (kind, value) in (("store_true", True), ("store_false", False)):
                return flag, []
        elif kind == "list":
            return flag, [_text(v) for v in (value if isinstance(value, list) else [value])]
        elif kind == "value":
            return flag, [_text(value)]
    return f"no flag sets it to {json.dumps(value)} (Megatron-LM's default is {json.dumps(default)})"


# Megatron-LM's per-layer pattern types (moe_freq_type, la_freq_type, no_rope_freq_type) read an integer or a Python
# list expression such as "([1]*3+[0]*1)*12"; "1,1,1,0", which _text writes for other lists, is refused
PATTERN_DESTS = {"moe_layer_freq", "window_attn_skip_freq", "linear_attention_freq", "no_rope_freq"}


def _layer_freq(value) -> str:
    """A per-layer pattern as a Megatron-LM list expression of runs, its shortest period once:
    [0,1,1] -> "([0]*1+[1]*2)", [1,1,1,0]*12 -> "([1]*3+[0]*1)*12"."""
    if not isinstance(value, list):
        return str(value)
    n = len(value)
    period = next(p for p in range(1, n + 1) if n % p == 0 and value == value[:p] * (n // p))
    runs: list[list] = []
    for v in value[:period]:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    body = "(" + "+".join(f"[{v}]*{k}" for v, k in runs) + ")"
    return body if period == n else f"{body}*{n // period}"


def tc_has_layout(plan: dict) -> bool:
    """Does the plan set a pipeline layout? Megatron-LM then refuses --num-virtual-stages-per-pipeline-rank."""
    return bool(plan["transformer_config"].get("pipeline_model_parallel_layout"))


def _composite(plan: dict, by_dest: dict) -> list[tuple[str, object]]:
    """(dest, value) pairs for the plan fields that are not one knob to one argument."""
    tc, model = plan["transformer_config"], plan["model"]
    out = []
    act, gated = tc.get("activation_func"), tc.get("gated_linear_unit")
    # the flag of this activation (a gated one needs the gate; squared ReLU's flag ignores it)
    flag = next((f for f, (func, needs_gate) in K.LM_ACTIVATIONS.items() if act == func and (gated or not needs_gate)),
                None)
    if flag:
        out.append((flag, True))
    if "bias_activation_fusion" in tc:  # Megatron-LM reads it from the flag of the activation in use
        out.append(("bias_swiglu_fusion" if flag == "swiglu" else "bias_gelu_fusion", tc["bias_activation_fusion"]))
    if "persist_layer_norm" in tc:
        out.append(("no_persist_layer_norm", not tc["persist_layer_norm"]))
    heads, groups = tc.get("num_attention_heads"), tc.get("num_query_groups")
    if groups and heads and groups < heads:
        out += [("group_query_attention", True), ("num_query_groups", groups)]
    if tc.get("moe_layer_freq") not in (None, 1):
        out.append(("moe_layer_freq", _layer_freq(tc["moe_layer_freq"])))
    if model.get("max_sequence_length"):
        out.append(("max_position_embeddings", model["max_sequence_length"]))
    out.append(("untie_embeddings_and_output_weights", not model.get("share_embeddings_and_output_weights", False)))
    if tc.get("bf16") and not plan["ddp_config"].get("grad_reduce_in_fp32", True):
        out.append(("grad_reduce_in_bf16", True))  # else validate_args reduces BF16 gradients in FP32
    out.append(("transformer_impl", plan["runtime"]["transformer_impl"]))  # the layer spec the runtime builds
    return out


def training_io(plan: dict, mcore: int) -> tuple[dict, list[str]]:
    """dest -> (plan name, value) for the training-I/O sections (knobs.IO_SECTIONS) and the platform's
    distributed backend, each dest from its knob row; and a note for each value Megatron-LM has no flag for.

    What is not one value to one flag: data.blend is --data-path W1 P1 W2 P2 ...; data.paths / blend / split
    are read for an indexed dataset only; checkpoint.load auto is the save directory (none: no --load);
    checkpoint.async also needs --use-persistent-ckpt-worker (else validate_args turns it off); checkpoint.scheduler
    is one of two switches (--override-opt_param-scheduler, --use-checkpoint-opt_param-scheduler); a save
    directory brings the exit-signal handler (the launchers forward SIGUSR1); eval.interval null is
    train_iters with --eval-iters 0 (Megatron-LM 0.19 divides by --eval-interval even without evaluation).
    """
    index = knob_index(mcore)
    wanted: dict = {}
    notes: list[str] = []

    def put(knob: K.Knob, name: str, value) -> None:
        for dest in knob.lm_dests(mcore):
            wanted[dest] = (name, value)

    data, ckpt = plan["data"], plan["checkpoint"]
    for section in K.IO_SECTIONS:
        for name, value in (plan.get(section) or {}).items():
            knob = index.get((section, name))
            if knob is None or (section, name) in IO_QUIET:
                continue  # plan.runtime's own fields (transformer_impl, schedule, ...)
            if section == "data" and name in INDEXED_ONLY and data["kind"] != "indexed":
                continue
            if not knob.lm_dests(mcore):
                if value is not None and value != knob.default:
                    notes.append(f"{name}={json.dumps(value)}: {knob.doc or 'Megatron-LM has no argument for it'}")
                continue
            if (section, name) == ("data", "blend") and value is not None:
                value = [str(v) for e in value for v in (e["weight"], e["path"])]
            elif (section, name) == ("checkpoint", "load"):
                value = ckpt["save"] if value == "auto" else None if value == "none" else value
            elif (section, name) == ("eval", "interval") and value is None:
                value = plan["training"]["train_iters"]  # no evaluation: --eval-iters 0 (eval.iters)
            value = knob.megatron_value(value)  # e.g. tokenizer type null -> NullTokenizer
            if value is not None:
                put(knob, name, value)
    if data["kind"] in ("synthetic", "learnable"):
        notes.append(f"kind={json.dumps(data['kind'])}: moeforge.runtime.train's generator; Megatron-LM reads --mock-data")
    if ckpt["async"]:
        put(K.knob("use_persistent_ckpt_worker"), "async", True)
    switch = K.RESUME_SCHEDULERS[ckpt["scheduler"]]
    if switch:
        put(K.knob(switch), "scheduler", True)
    if ckpt["save"] is not None:
        put(K.knob("exit_signal_handler"), "save", True)
        put(K.knob("exit_signal"), "save", K.EXIT_SIGNAL)
    put(K.knob("check_for_nan_in_loss_and_grad"), "cuda_graph_impl", plan["ddp_config"]["check_for_nan_in_grad"])
    backend = K.FACT_BY_FIELD["distributed_backend"]
    put(backend, "distributed_backend", plan["platform"].get("distributed_backend") or backend.default)
    return wanted, notes


def arguments(plan: dict) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(flag, values) pairs for pretrain_gpt.py, and a note for each plan value Megatron-LM cannot take."""
    mcore_text = plan["platform"]["software"]["megatron_core"]
    mcore, by_dest = version_int(mcore_text), _by_dest(release_for(mcore_text))
    index = knob_index(mcore)
    wanted, notes = {}, []
    for plan_key, section in SECTIONS:
        for name, value in (plan.get(plan_key) or {}).items():
            knob = index.get((section, name))
            if name in DERIVED or (section, name) in COPIES:
                continue  # written through the composite flags below, or from the section that owns it
            if knob is None and section == "tc" and name in plan["model"] and plan["model"][name] == value:
                continue  # MLA's copy of a GPTModel argument (plan.megatron_view): one flag, from plan.model
            if K.VARIANT_ONLY.get(name) == "multi_latent_attention" and not plan["transformer_config"].get(
                    "multi_latent_attention") and value is not None:
                notes.append(f"{name}={json.dumps(value)}: only multi-latent attention reads it (off here)")
                continue
            if knob is None:
                why = RUNTIME_ONLY.get(name, "not in moeforge's knob table")
                notes.append(f"{name}={json.dumps(value)}: {why}")
                continue
            dests = knob.lm_dests(mcore)
            if not dests:
                if value is not None and value != knob.default:
                    notes.append(f"{name}={json.dumps(value)}: {knob.doc or 'Megatron-LM has no argument for it'}")
                continue
            if dests == ("num_virtual_stages_per_pipeline_rank",) and tc_has_layout(plan):
                continue  # the layout string implies the virtual stages; Megatron-LM refuses both
            if value is not None:
                wanted.update((dest, (name, knob.megatron_value(value))) for dest in dests)
    for dest, value in _composite(plan, by_dest):
        wanted[dest] = (dest, value)
    io, io_notes = training_io(plan, mcore)
    wanted.update(io)
    notes += io_notes
    out = []
    for dest, (name, value) in wanted.items():
        result = _set(by_dest, dest, _layer_freq(value) if dest in PATTERN_DESTS and isinstance(value, list) else value)
        if isinstance(result, tuple):
            out.append(result)
        elif isinstance(result, str):
            notes.append(f"{name}={json.dumps(value)}: {result}")
    return sorted(out), sorted(notes)
