"""`moeforge import`: a recipe and a model file from a launch a team already has.

Inputs (detected from the text):
- a `pretrain_gpt.py` / torchrun command line, or a shell script in the style of Megatron-LM's
  examples (bash arrays `GPT_MODEL_ARGS=(--num-layers 24 ...)`, `${ARR[@]}`, `export VAR=...`,
  line continuations, comments). The script is never executed: a small expander substitutes the
  variables and arrays the script itself assigns; any other `${VAR}` is kept literally (moeforge
  resolves it at launch, as it does in recipe paths);
- an args file (moeforge's own megatron-lm.args: one flag per line, `#` comments; its
  `# not written: NAME=VALUE: why` lines carry the values Megatron-LM has no flag for, and are read back);
- the `MODEL_ARGS:` mapping of a Megatron-LM functional-test `model_config.yaml`;
- a Megatron-Bridge override list (`model.tensor_model_parallel_size=2` lines).

Every flag goes through the one knob table (compiler.knobs): its Megatron-LM argument dest (flags,
negated forms, choices and Megatron-LM's defaults from compiler/data/megatron_lm_args.json, Megatron-LM
0.19.2's parser as data) or its Megatron-Bridge path. Architecture goes to the model file, the rest to
the v3 recipe. A flag absent from a Megatron-LM launch has Megatron-LM's default, so the recipe pins
every value where that default differs from moeforge's (and every `auto` knob: the launch decided it).
A Bridge override list only states what it overrides (the rest is the Bridge recipe's, unknown here).
Flags nobody can map are listed (returned, printed, and written as comments), never dropped.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import knobs as K
from . import project
from .compose import NAME
from .launch_text import (ImportError_, args_file_words, detect, freq_value, functional_test_words, guess_platform,
                          knob_value, launch_words, parse_flags, platform_docs)
from .field_catalogue import megatron_fields
from .layout import LayoutError, vpp_from_layers_per_virtual_stage
from .megatron_args import DERIVED, RUNTIME_ONLY, lm_parser
from .rules.expr import version_int


@dataclass
class Imported:
    kind: str                     # launch | args | functional-test | bridge
    recipe: dict
    model: dict
    platform: str
    platform_reason: str
    unmapped: list = field(default_factory=list)   # [(text, why)]
    notes: list = field(default_factory=list)      # what the importer decided on its own, for the header


def _put(doc: dict, dotted: str, value) -> None:
    node = doc
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


# Dests read by the composites below (not one knob to one argument), or computed by moeforge itself.
COMPOSITE = {"swiglu", "quick_geglu", "squared_relu", "bias_swiglu_fusion", "bias_gelu_fusion", "no_persist_layer_norm",
             "group_query_attention", "num_query_groups", "moe_layer_freq", "max_position_embeddings",
             "untie_embeddings_and_output_weights", "grad_reduce_in_bf16", "bf16", "fp16", "transformer_impl",
             "distributed_backend", "exit_signal_handler", "exit_signal", "use_persistent_ckpt_worker", "mock_data",
             "data_path", "tokenizer_type", "null_tokenizer_eod_id", "load", "lr_warmup_iters", "lr_warmup_fraction",
             "eval_interval", "padded_vocab_size", "make_vocab_size_divisible_by", "pad_vocab_size",
             "num_layers_per_virtual_pipeline_stage", "train_samples", "lr_decay_samples", "lr_warmup_samples"}
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rope_type",
              "rotary_scaling_factor", "mscale", "mscale_all_dim")
TOKENIZERS = {"NullTokenizer": None, "HuggingFaceTokenizer": "huggingface", "SentencePieceTokenizer": "sentencepiece",
              "GPTSentencePieceTokenizer": "sentencepiece"}


# Megatron-LM validate_args rewrites deprecated flags before anything reads them (arguments.py, "Deprecated
# arguments" and the CUDA-graph block): dest -> (the dest it sets, the value it sets; None: the flag's own value).
RENAMED = {"recompute_activations": ("recompute_granularity", "selective"),
           "enable_cuda_graph": ("cuda_graph_impl", "local"),
           "external_cuda_graph": ("cuda_graph_impl", "transformer_engine"),
           "cuda_graph_scope_deprecated": ("cuda_graph_modules", None)}
# ... and refuses these (its own words)
REFUSED = {"batch_size": "--batch-size argument is no longer valid, use --micro-batch-size instead",
           "warmup": "--warmup argument is no longer valid, use --lr-warmup-fraction instead",
           "model_parallel_size": "--model-parallel-size is no longer valid, use --tensor-model-parallel-size instead",
           "checkpoint_activations": "--checkpoint-activations is no longer valid, use --recompute-activations, or, "
                                     "for more control, --recompute-granularity and --recompute-method."}


def _as_validate_args_reads(given: dict, flags: dict, bad: list) -> dict:
    """The launch's dests as validate_args leaves them: deprecated flags renamed, refused ones reported."""
    out = dict(given)
    for dest, why in REFUSED.items():
        if out.pop(dest, None) not in (None, False):
            bad.append((flags.get(dest, dest), f"Megatron-LM refuses it: {why}"))
    for dest, (new, value) in RENAMED.items():
        if out.get(dest) in (None, False):
            out.pop(dest, None)
            continue
        own = out.pop(dest)
        if out.get(new) not in (None, "none", []):
            bad.append((flags.get(dest, dest), f"Megatron-LM refuses it beside {flags.get(new, new)}"))
            continue
        out[new] = own if value is None else value
        flags[new] = flags.get(dest, dest)
    return out


def _padded_vocab(arch: dict, g, recipe: dict, decided: list) -> None:
    """The vocabulary Megatron-LM builds without --padded-vocab-size: the tokenizer's, padded up to a multiple
    of --make-vocab-size-divisible-by x TP (build_tokenizer.py vocab_size_with_padding). A NullTokenizer's is
    --vocab-size; any other tokenizer's is its own, which the launch does not say."""
    multiple = int(g("make_vocab_size_divisible_by", _lm_default("make_vocab_size_divisible_by"))) * int(
        recipe.get("parallelism", {}).get("tp") or 1)
    tokenizer = g("tokenizer_type")
    if tokenizer not in (None, "NullTokenizer"):
        decided.append(f"architecture.vocab_size: the model's vocabulary is {tokenizer}'s, padded to a multiple of "
                       f"{multiple}; the launch does not say it" + (
                           f" (--vocab-size {arch['vocab_size']} is imported as it; check it)"
                           if arch.get("vocab_size") else ": write it into the model file"))
        return
    vocab = arch.get("vocab_size")
    if vocab is None or not g("pad_vocab_size", True):
        return
    padded = -(-int(vocab) // multiple) * multiple
    if padded != int(vocab):
        arch["vocab_size"] = padded
        decided.append(f"architecture.vocab_size: {padded} (Megatron-LM pads --vocab-size {vocab} to a multiple of "
                       f"--make-vocab-size-divisible-by x TP = {multiple}); the launch's NullTokenizer ends "
                       f"documents with id {int(vocab) - 1}, a recipe's with {padded - 1}")


def _samples_as_iterations(g, recipe: dict, decided: list) -> None:
    """A launch counted in samples (--train-samples, --lr-decay-samples, --lr-warmup-samples) as a recipe's
    iterations of --global-batch-size samples: Megatron-LM runs train_samples // global_batch_size iterations
    (training.py update_train_iters, no batch-size ramp-up) and moves its LR schedule by that many samples a
    step, so a schedule point falls within one iteration of where the launch has it."""
    gbs = recipe.get("training", {}).get("global_batch_size")
    if not gbs:
        return
    for dest, path in (("train_samples", "training.train_iters"), ("lr_decay_samples", "schedule.decay_iters"),
                       ("lr_warmup_samples", "schedule.warmup")):
        samples = g(dest)
        if samples is None or (dest == "lr_warmup_samples" and int(samples) == 0):
            continue
        iters = int(samples) // int(gbs) if dest == "train_samples" else round(int(samples) / int(gbs))
        _put(recipe, path, iters)
        decided.append(f"{path}: {iters} (--{dest.replace('_', '-')} {samples} in iterations of "
                       f"{gbs} samples)")


def _lm_default(dest: str):
    for entry in lm_parser()["options"].values():
        if entry["dest"] == dest:
            return entry["default"]
    return None


def from_lm(dests: dict, platform: dict, notes: dict, launcher: dict, bad: list,
            data_note: str | None = None) -> tuple[dict, dict, list]:
    """(recipe body, model body, decisions) from Megatron-LM dests. `notes`: plan name -> value Megatron-LM
    has no flag for (moeforge's own args files say them)."""
    mcore_text = str(platform.get("software", {}).get("megatron_core") or "0.19.2")
    mcore = version_int(mcore_text)
    flags = dict(dests.get("__flags__", {}))
    given = _as_validate_args_reads({d: v for d, v in dests.items() if d != "__flags__"}, flags, bad)
    recipe: dict = {}
    model: dict = {"architecture": {}, "moe": {}}
    decided: list[str] = []
    used: set = set()

    def value_of(k: K.Knob):
        """(value, explicit) for a knob: the flag's value, else Megatron-LM's default; None: nothing to say."""
        for dest in k.lm_dests(mcore):
            if dest in given:
                used.add(dest)
                return knob_value(k, given[dest]), True
        dests_ = k.lm_dests(mcore)
        if not dests_:
            return None, False
        return knob_value(k, _lm_default(dests_[0])), False

    mla = given.get("multi_latent_attention") is True
    yarn_pos = given.get("position_embedding_type") == "yarn"
    for k in K.KNOBS:
        if not k.path or k.field in K.COMPUTED or k.path.startswith(("launch.", "runtime.")):
            continue
        if k.lm_dests(mcore) and set(k.lm_dests(mcore)) & COMPOSITE and k.field != "vocab_size":
            continue
        shared = {"rotary_scaling_factor", "mscale", "mscale_all_dim"} & set(k.lm_dests(mcore))
        if shared and (k.field.startswith("yarn_") == mla):
            continue  # MLA's own YaRN fields with --multi-latent-attention, ordinary attention's otherwise
        name = k.name_for(mcore)
        if name in notes:  # moeforge's args file: a value Megatron-LM has no flag for
            _put_path(recipe, model, k.path, notes[name])
            continue
        try:
            value, explicit = value_of(k)
        except (ValueError, SyntaxError) as exc:
            dest = next(d for d in k.lm_dests(mcore) if d in given)
            bad.append((flags.get(dest, dest), f"{k.path}: {exc}"))
            continue
        if not explicit:
            if not k.lm_dests(mcore):
                continue
            if k.field in MLA_FIELDS and not mla:
                continue
            if k.field.startswith("yarn_") and not yarn_pos:
                continue
            if k.default is None and value is not None and not (k.field in MLA_FIELDS or k.field.startswith("yarn_")):
                continue  # Megatron-LM's default where megatron-core has none: not stated by the launch
            if value is None and k.default is not None and k.kind in ("int", "float", "str"):
                continue  # Megatron-LM has no default (a required argument): moeforge's applies
            if value == k.default and not k.auto:
                continue
            if k.field == "cp_comm_type" and value == ["p2p"]:
                continue
        if k.field == "cp_comm_type" and isinstance(value, list):
            if len(value) != 1:
                bad.append((flags.get("cp_comm_type", "--cp-comm-type"), "one value per layer: a recipe has one"))
                continue
            value = value[0]
        if k.kind == "set" and value == []:
            value = None
        _put_path(recipe, model, k.path, value)

    arch, moe = model["architecture"], model["moe"]
    for key, k in (("architecture", "num_layers"), ("architecture", "hidden_size"),
                   ("architecture", "num_attention_heads"), ("architecture", "vocab_size"),
                   ("moe", "num_experts"), ("moe", "router_topk")):  # the model schema requires them
        if k not in model[key]:
            dest = K.BY_PATH[f"model.{key}.{k}"].lm_dest(mcore)
            if _lm_default(dest) is not None:
                model[key][k] = _lm_default(dest)
    layout = recipe.get("parallelism", {}).get("pipeline_layout")
    if layout and recipe["parallelism"].get("vpp") is None:
        vpp = _layout_vpp(layout, int(recipe["parallelism"].get("pp") or 1))
        recipe["parallelism"]["vpp"] = vpp
        if vpp:
            decided.append(f"parallelism.vpp: {vpp} (the virtual stages --pipeline-model-parallel-layout implies)")
    graphs = recipe.get("cuda_graph", {})
    if graphs.get("impl", "none") != "none" and not graphs.get("te_rng_tracker") and "transformer_engine" in (
            graphs["impl"], given.get("transformer_impl", _lm_default("transformer_impl"))):
        graphs["te_rng_tracker"] = True
        decided.append("cuda_graph.te_rng_tracker: true (Megatron-LM's validate_args turns it on for CUDA graphs)")
    par = recipe.setdefault("parallelism", {})
    if par.get("etp") is None and int(par.get("tp") or 1) > 1:
        par["etp"] = int(par["tp"])  # a recipe's unset ETP is the solver's choice (LAYOUT_ETP_DEFAULT_DIFFERS)
        decided.append(f"parallelism.etp: {par['etp']} (Megatron-LM's validate_args sets an unset "
                       "--expert-tensor-parallel-size to --tensor-model-parallel-size)")
    per = given.get("num_layers_per_virtual_pipeline_stage")
    if per is not None and par.get("vpp") is None and arch.get("num_layers"):
        try:
            par["vpp"] = vpp_from_layers_per_virtual_stage(
                int(arch["num_layers"]), int(par.get("pp") or 1), int(per), bool(par.get("account_for_embedding")),
                bool(par.get("account_for_loss")))
        except LayoutError as exc:
            bad.append((flags["num_layers_per_virtual_pipeline_stage"], f"Megatron-LM refuses it: {exc}"))
        else:
            decided.append(f"parallelism.vpp: {par['vpp']} (the virtual stages of {per} layers each that "
                           "--num-layers-per-virtual-pipeline-stage makes, as validate_args counts them)")
    p2p = recipe.get("overlap", {})
    if p2p.get("p2p") and par.get("vpp") is None:
        p2p["p2p"] = False  # what the launch runs; a recipe asking for it warns (PP_OVERLAP_NEEDS_VPP)
        if int(par.get("pp") or 1) > 1:
            decided.append("overlap.p2p: false (Megatron-LM's validate_args turns PP communication overlap "
                           "off without the interleaved schedule)")
    if par.get("sp") and int(par.get("tp") or 1) == 1:
        par["sp"] = False  # what the launch runs; a recipe asking for it at TP = 1 is refused (LAYOUT_SP_NEEDS_TP)
        decided.append("parallelism.sp: false (Megatron-LM's validate_args turns --sequence-parallel off at TP = 1)")
    # --- composites ---------------------------------------------------------------------------------
    g = given.get
    if g("swiglu"):
        arch.update(activation="swiglu", gated_linear_unit=True)
    elif g("quick_geglu"):
        arch.update(activation="quick_gelu", gated_linear_unit=True)
    elif g("squared_relu"):
        arch["activation"] = "squared_relu"
    else:
        decided.append("activation: gelu (Megatron-LM's default), left to megatron-core's default (gelu)")
    swiglu = bool(g("swiglu"))
    fusion_dest = "bias_swiglu_fusion" if swiglu else "bias_gelu_fusion"
    fusion = g(fusion_dest, _lm_default(fusion_dest))
    _put(recipe, "kernels.bias_activation_fusion", fusion)
    _put(recipe, "kernels.persist_layer_norm", not g("no_persist_layer_norm", False))
    if g("group_query_attention") and g("num_query_groups") is not None:
        arch["num_query_groups"] = int(g("num_query_groups"))
    elif arch.get("num_attention_heads") is not None:
        arch["num_query_groups"] = arch["num_attention_heads"]
        if g("num_query_groups") is not None:
            bad.append((flags["num_query_groups"], "without --group-query-attention Megatron-LM ignores it"))
    freq = g("moe_layer_freq", 1)
    try:
        moe["layer_freq"] = freq_value(freq)
    except (ValueError, SyntaxError):
        bad.append((flags.get("moe_layer_freq", str(freq)), "not an integer or a [0/1] list expression"))
    if g("max_position_embeddings") is not None:
        arch["max_position_embeddings"] = int(g("max_position_embeddings"))
    arch["untie_embeddings_and_output_weights"] = bool(g("untie_embeddings_and_output_weights", False))
    if g("padded_vocab_size") is not None and g("vocab_size") is None:
        arch["vocab_size"] = int(g("padded_vocab_size"))
    elif g("padded_vocab_size") is not None and int(g("padded_vocab_size")) != arch.get("vocab_size"):
        bad.append((flags["padded_vocab_size"], f"differs from --vocab-size {arch.get('vocab_size')}: the model "
                    "uses --vocab-size"))
    elif g("padded_vocab_size") is None:
        _padded_vocab(arch, g, recipe, decided)
    dtype = "bf16" if g("bf16") else "fp16" if g("fp16") else "fp32"
    _put(recipe, "precision.dtype", dtype)
    # Megatron-LM validate_args: BF16 accumulates and reduces gradients in FP32 unless --grad-reduce-in-bf16 or
    # --main-grads-dtype bf16
    _put(recipe, "optimizer.grad_reduce_in_fp32", bool(g("accumulate_allreduce_grads_in_fp32"))
         or (dtype == "bf16" and not g("grad_reduce_in_bf16") and g("main_grads_dtype", "fp32") == "fp32"))
    if g("transformer_impl") == "local" and platform.get("software", {}).get("transformer_engine"):
        decided.append("--transformer-impl local: the platform has Transformer Engine, so moeforge builds "
                       "the Transformer Engine spec")
    backend = g("distributed_backend")
    if backend and backend != (platform.get("distributed_backend") or "nccl"):
        bad.append((flags["distributed_backend"], f"the platform's backend is {platform.get('distributed_backend')}"))
    # --- training I/O -------------------------------------------------------------------------------
    if data_note in ("synthetic", "learnable"):
        _put(recipe, "data.kind", data_note)
    else:
        if mcore >= version_int("0.17.0"):
            _put(recipe, "runtime.entrypoint", "megatron-lm")
        if g("data_path"):
            paths = list(g("data_path"))
            if len(paths) % 2 == 0 and all(_number(p) for p in paths[::2]):
                _put(recipe, "data.blend", [{"weight": float(w), "path": p} for w, p in zip(paths[::2], paths[1::2])])
            else:
                _put(recipe, "data.paths", paths)
            _put(recipe, "data.kind", "indexed")
        elif g("mock_data"):
            _put(recipe, "data.kind", "mock")
    tok = g("tokenizer_type")
    if tok is not None:
        if tok not in TOKENIZERS:
            bad.append((flags["tokenizer_type"], "moeforge's tokenizer.type is null, byte, huggingface or "
                        "sentencepiece"))
        else:
            kind = TOKENIZERS[tok]
            if tok == "NullTokenizer" and str(g("null_tokenizer_eod_id")) == str(K.BYTE_EOD):
                kind = "byte"
            if kind is not None:
                _put(recipe, "tokenizer.type", kind)
    save, load = g("save"), g("load")
    if load is not None and load != save:
        _put(recipe, "checkpoint.load", load)
    elif save is not None and load is None:
        _put(recipe, "checkpoint.load", "none")
    _samples_as_iterations(g, recipe, decided)
    if g("lr_warmup_fraction") is not None:
        _put(recipe, "schedule.warmup", float(g("lr_warmup_fraction")))
    elif g("lr_warmup_iters") not in (None, "0"):
        _put(recipe, "schedule.warmup", int(g("lr_warmup_iters")))
    iters = int(g("eval_iters", _lm_default("eval_iters")))
    if iters > 0:
        interval = g("eval_interval", _lm_default("eval_interval")) or recipe.get("training", {}).get("train_iters")
        if interval is not None:
            _put(recipe, "eval.interval", int(interval))
    elif "eval" in recipe:
        recipe["eval"].pop("interval", None)
    # --- world size ----------------------------------------------------------------------------------
    nodes = _nodes(recipe, platform, notes, launcher, decided)
    if nodes:
        _put(recipe, "resources.nodes", nodes)
    no_recipe_path = _no_recipe_path(mcore)
    for dest in given:
        if dest == "optimizer" and given[dest] == "adam":
            continue  # what every recipe trains with
        if dest not in used and dest not in COMPOSITE and dest not in _consumed_io(given):
            bad.append((flags.get(dest, dest), no_recipe_path.get(dest) or _why_no_knob(dest)))
    if not moe.get("num_experts"):
        raise ImportError_("the launch has no --num-experts: moeforge compiles Mixture-of-Experts recipes")
    model["architecture"] = {k: v for k, v in arch.items()}
    return recipe, model, decided


# Megatron-LM arguments outside megatron-core's configs that change what trains, and no recipe states
TRAINING_ONLY_IN_LM = {
    "optimizer": "a recipe trains with Adam",
    "lr_warmup_init": "a recipe's warm-up starts from LR 0",
    "use_tp_pp_dp_mapping": "a recipe orders ranks TP-CP-EP-DP-PP, megatron-core's default",
    "finetune": "a recipe resumes with its optimizer state and iteration count",
    "no_load_optim": "a recipe resumes with its optimizer state",
    "no_load_rng": "a recipe resumes with its RNG state",
}


def _why_no_knob(dest: str) -> str:
    """Why an argument without a knob is dropped: a megatron-core config field or one of TRAINING_ONLY_IN_LM
    changes what trains (the import then trains differently from the launch); any other is launch-only."""
    if dest in TRAINING_ONLY_IN_LM or dest.startswith("muon_"):
        why = TRAINING_ONLY_IN_LM.get(dest, TRAINING_ONLY_IN_LM["optimizer"])
        return f"changes what trains, and no recipe setting says it: {why}"
    if dest in megatron_fields()["all"]:
        return "a megatron-core setting no recipe states: the imported recipe runs megatron-core's default"
    return "a Megatron-LM argument moeforge has no knob for (launch-only)"


def _no_recipe_path(mcore: int) -> dict[str, str]:
    """Megatron-LM dest -> why an import drops it, for the table's rows without a recipe path: one the plan states
    (a plan section, a Bridge path, or computed: compiler/plan.py) is fixed by moeforge; a lint-only one is read by
    lint-config alone, and a recipe runs megatron-core's default."""
    return {dest: (f"moeforge's plan states it, no recipe does: {k.doc or 'derived from other settings'}"
                   if k.section or k.bridge_paths or k.field in K.COMPUTED
                   else f"no recipe setting (a recipe runs megatron-core's default {k.default!r})"
                   + (f": {k.doc}" if k.doc else ""))
            for k in K.KNOBS if k.path is None for dest in k.lm_dests(mcore)}


def _layout_vpp(layout: str, pp: int) -> int | None:
    """The virtual pipeline size a layout string implies (its stages / PP; None for one per rank)."""
    text = layout
    for _ in range(20):
        new = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
        if new == text:
            break
        text = new
    stages = text.count("|") + 1
    return stages // pp if pp and stages % pp == 0 and stages // pp > 1 else None


def _consumed_io(given: dict) -> set:
    return {"lr_warmup_iters", "lr_warmup_fraction", "eval_iters", "eval_interval", "save", "load"}


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _put_path(recipe: dict, model: dict, path: str, value) -> None:
    if path.startswith("model."):
        _put(model, path[len("model."):], value)
    else:
        _put(recipe, path, value)


def _nodes(recipe: dict, platform: dict, notes: dict, launcher: dict, decided: list) -> int | None:
    per = int(platform.get("gpus_per_node") or 8)
    par = recipe.get("parallelism", {})
    tp, pp, cp, ep = (int(par.get(k) or 1) for k in ("tp", "pp", "cp", "ep"))
    etp = par.get("etp") or tp
    training = recipe.get("training", {})
    mbs, gbs = training.get("micro_batch_size", 1), training.get("global_batch_size")
    env = launcher.get("env", {})
    nnodes = launcher.get("nnodes") or env.get("NNODES") or env.get("NUM_NODES") or env.get("SLURM_NNODES")
    if nnodes and str(nnodes).isdigit():
        return int(nnodes)
    world = env.get("WORLD_SIZE")
    if world and str(world).isdigit():
        return max(1, int(world) // per)
    if isinstance(notes.get("num_microbatches"), int) and gbs:
        world = gbs // (mbs * notes["num_microbatches"]) * tp * cp * pp
        return max(1, -(-world // per))
    import math
    need = math.lcm(tp * cp * pp, etp * ep * pp)
    nodes = max(1, -(-need // per))
    decided.append(f"resources.nodes: {nodes} (the launch does not say; the fewest nodes that fit "
                   f"TP*CP*PP = {tp * cp * pp} and ETP*EP*PP = {etp * ep * pp})")
    return nodes


# ----------------------------------------------------------------------- Bridge overrides

def from_bridge(text: str) -> tuple[dict, dict, list]:
    by_path = {p: k for k in K.KNOBS for p in k.bridge_paths}
    by_path.update({p: k for k in K.FACTS for p in k.bridge_paths})
    recipe, model, bad = {}, {"architecture": {}, "moe": {}}, []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        key, _, raw = s.lstrip("+").partition("=")
        if key in ("mixed_precision", "comm_overlap") or key.endswith(("._target_", "params_dtype", "pipeline_dtype")):
            continue  # structure of the override list, not a setting
        try:
            value = yaml.safe_load(raw) if raw else None
        except yaml.YAMLError:
            value = raw
        if key in ("mixed_precision.bf16", "mixed_precision.fp16"):
            if value:
                _put(recipe, "precision.dtype", key.rsplit(".", 1)[1])
            continue
        k = by_path.get(key)
        if k is None or not k.path or k.field in K.COMPUTED:
            bad.append((s, "no moeforge knob reads this Megatron-Bridge path"))
            continue
        if k.lm_values and not isinstance(value, str):
            value = {m: p for p, m in k.lm_values}.get(value, value)
        value = k.plan_value(value)
        _put_path(recipe, model, k.path, value)
    recipe.setdefault("precision", {}).setdefault("dtype", "fp32")
    return recipe, model, bad


# ----------------------------------------------------------------------- the whole import

def import_text(text: str, name: str = "<launch>", platform: str | None = None, root: Path | None = None,
                recipe_name: str | None = None) -> Imported:
    kind = detect(text, name)
    root = project.recipes() if root is None else root
    platforms = platform_docs(root)
    notes, rid, launcher = {}, None, {"env": {}}
    if kind == "bridge":
        dests, bad = {}, []
    else:
        if kind == "args":
            words, notes, rid = args_file_words(text)
        elif kind == "functional-test":
            words, launcher = functional_test_words(text)
        else:
            words, launcher = launch_words(text)
        dests, bad = parse_flags(words)
    if platform is None:
        platform, reason = guess_platform(text, dests, platforms)
        if platform is None:
            raise ImportError_(f"cannot tell the platform: {reason}; pass --platform NAME "
                               f"(one of {', '.join(platforms)})")
    else:
        reason = "given: --platform"
        if platform not in platforms:
            raise ImportError_(f"--platform {platform}: no such platform (one of {', '.join(platforms)})")
    pdoc = platforms[platform]
    if kind == "bridge":
        recipe_body, model_body, bad = from_bridge(text)
        decided = ["Megatron-Bridge overrides state only what they override: every other value is moeforge's "
                   "default or the solver's (not the Bridge recipe's)"]
    else:
        recipe_body, model_body, decided = from_lm(dests, pdoc, notes, launcher, bad, notes.get("kind"))
    if recipe_name is not None and not NAME.fullmatch(recipe_name):
        raise ImportError_(f"--name {recipe_name!r}: a recipe and model name is 1 to 64 letters, digits, '.', '_' "
                           "and '-', starting with a letter or digit")
    base = recipe_name or _name_of(rid, name)
    model_doc = {"schema": "moeforge/model/v1", "name": base, "family": "imported",
                 "description": f"Imported by moeforge import from {Path(name).name} ({kind}).", **model_body}
    if "mtp_num_layers" not in model_doc:
        model_doc["mtp_num_layers"] = None
    recipe = {"schema": f"moeforge/recipe/v3", "revision": 1, "name": base, "platform": platform, "model": base,
              **recipe_body}
    return Imported(kind, recipe, model_doc, platform, reason, bad, decided)


def _name_of(rid: str | None, name: str) -> str:
    stem = rid.replace("/", "-") if rid else Path(name).stem or "launch"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "launch"
    return f"{stem}-imported"[:64]
