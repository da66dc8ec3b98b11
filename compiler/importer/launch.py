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

Every flag goes through the one knob table (moeforge.compiler.knobs.table): its Megatron-LM argument dest (flags,
negated forms, choices and Megatron-LM's defaults from compiler/data/megatron_lm_args.json, Megatron-LM
0.19.2's parser as data) or its Megatron-Bridge path. Architecture goes to the model file, the rest to
the v3 recipe. A flag absent from a Megatron-LM launch has Megatron-LM's default, so the recipe pins
every value where that default differs from moeforge's (and every `auto` knob: the launch decided it).
A launch is read as Megatron-LM's validate_args leaves it (compiler/importer/validate_args.py). A Bridge
override list only states what it overrides (the rest is the Bridge recipe's, unknown here;
compiler/importer/bridge.py). Flags nobody can map are listed (returned, printed, and written as comments),
never dropped.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from moeforge.compiler.knobs import table as K
from moeforge.compiler import project
from moeforge.compiler.recipe.compose import NAME
from moeforge.compiler.importer.bridge import from_bridge
from moeforge.compiler.importer.documents import nodes, put, put_path
from moeforge.compiler.importer.validate_args import (as_validate_args_reads, derive_layout, derive_mlp_width,
                                             padded_vocab, refuse_unplanned, samples_as_iterations,
                                             validate_args_rewrites, why_no_knob)
from moeforge.compiler.launch_reader.text import (ImportError_, args_file_words, detect, freq_value, functional_test_words, guess_platform,
                          knob_value, launch_words, parse_flags, platform_docs)
from moeforge.compiler.targets.megatron_args import lm_default
from moeforge.compiler.knobs.versions import version_int


@dataclass
class Imported:
    kind: str                     # launch | args | functional-test | bridge
    recipe: dict
    model: dict
    platform: str
    platform_reason: str
    unmapped: list = field(default_factory=list)   # [(text, why)]
    notes: list = field(default_factory=list)      # what the importer decided on its own, for the header


# Dests read by the composites below (not one knob to one argument), or computed by moeforge itself.
COMPOSITE = {"swiglu", "quick_geglu", "squared_relu", "bias_swiglu_fusion", "bias_gelu_fusion", "no_persist_layer_norm",
             "group_query_attention", "num_query_groups", "moe_layer_freq", "max_position_embeddings",
             "untie_embeddings_and_output_weights", "grad_reduce_in_bf16", "bf16", "fp16", "transformer_impl",
             "distributed_backend", "exit_signal_handler", "exit_signal", "use_persistent_ckpt_worker", "mock_data",
             "data_path", "tokenizer_type", "null_tokenizer_eod_id", "load", "lr_warmup_iters", "lr_warmup_fraction",
             "eval_interval", "padded_vocab_size", "make_vocab_size_divisible_by", "pad_vocab_size",
             "num_layers_per_virtual_pipeline_stage", "train_samples", "lr_decay_samples", "lr_warmup_samples",
             "lr_wsd_decay_samples"}
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rope_type",
              "rotary_scaling_factor", "mscale", "mscale_all_dim")
TOKENIZERS = {"NullTokenizer": None, "HuggingFaceTokenizer": "huggingface", "SentencePieceTokenizer": "sentencepiece",
              "GPTSentencePieceTokenizer": "sentencepiece"}


def from_lm(dests: dict, platform: dict, notes: dict, launcher: dict, bad: list,
            data_note: str | None = None) -> tuple[dict, dict, list]:
    """(recipe body, model body, decisions) from Megatron-LM dests. `notes`: plan name -> value Megatron-LM
    has no flag for (moeforge's own args files say them)."""
    mcore_text = str(platform.get("software", {}).get("megatron_core") or "0.19.2")
    mcore = version_int(mcore_text)
    flags = dict(dests.get("__flags__", {}))
    decided: list[str] = []
    given = as_validate_args_reads({d: v for d, v in dests.items() if d != "__flags__"}, flags, bad, decided)
    refuse_unplanned(given, flags, launcher.get("entry"))
    recipe: dict = {}
    model: dict = {"architecture": {}, "moe": {}}
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
        return knob_value(k, lm_default(dests_[0])), False

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
            put_path(recipe, model, k.path, notes[name])
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
        put_path(recipe, model, k.path, value)

    arch, moe = model["architecture"], model["moe"]
    for key, k in (("architecture", "num_layers"), ("architecture", "hidden_size"),
                   ("architecture", "num_attention_heads"), ("architecture", "vocab_size"),
                   ("moe", "num_experts"), ("moe", "router_topk")):  # the model schema requires them
        if k not in model[key]:
            dest = K.BY_PATH[f"model.{key}.{k}"].lm_dest(mcore)
            if lm_default(dest) is not None:
                model[key][k] = lm_default(dest)
    layout = recipe.get("parallelism", {}).get("pipeline_layout")
    if layout and recipe["parallelism"].get("vpp") is None:
        vpp = _layout_vpp(layout, int(recipe["parallelism"].get("pp") or 1))
        recipe["parallelism"]["vpp"] = vpp
        if vpp:
            decided.append(f"parallelism.vpp: {vpp} (the virtual stages --pipeline-model-parallel-layout implies)")
    derive_layout(recipe, arch, given, flags, bad, decided)
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
    derive_mlp_width(arch, given, decided)
    swiglu = bool(g("swiglu"))
    fusion_dest = "bias_swiglu_fusion" if swiglu else "bias_gelu_fusion"
    fusion = g(fusion_dest, lm_default(fusion_dest))
    put(recipe, "kernels.bias_activation_fusion", fusion)
    put(recipe, "kernels.persist_layer_norm", not g("no_persist_layer_norm", False))
    validate_args_rewrites(recipe, model, decided)
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
        padded_vocab(arch, g, recipe, decided, launcher.get("dirs", []))
    dtype = "bf16" if g("bf16") else "fp16" if g("fp16") else "fp32"
    put(recipe, "precision.dtype", dtype)
    # Megatron-LM validate_args: BF16 accumulates and reduces gradients in FP32 unless --grad-reduce-in-bf16 or
    # --main-grads-dtype bf16
    put(recipe, "optimizer.grad_reduce_in_fp32", bool(g("accumulate_allreduce_grads_in_fp32"))
         or (dtype == "bf16" and not g("grad_reduce_in_bf16") and g("main_grads_dtype", "fp32") == "fp32"))
    if g("transformer_impl") == "local" and platform.get("software", {}).get("transformer_engine"):
        decided.append("--transformer-impl local: the platform has Transformer Engine, so moeforge builds "
                       "the Transformer Engine spec")
    backend = g("distributed_backend")
    if backend and backend != (platform.get("distributed_backend") or "nccl"):
        bad.append((flags["distributed_backend"], f"the platform's backend is {platform.get('distributed_backend')}"))
    # --- training I/O -------------------------------------------------------------------------------
    if data_note in ("synthetic", "learnable"):
        put(recipe, "data.kind", data_note)
    else:
        if mcore >= version_int("0.17.0"):
            put(recipe, "runtime.entrypoint", "megatron-lm")
        if g("data_path"):
            paths = list(g("data_path"))
            if len(paths) % 2 == 0 and all(_number(p) for p in paths[::2]):
                put(recipe, "data.blend", [{"weight": float(w), "path": p} for w, p in zip(paths[::2], paths[1::2])])
            else:
                put(recipe, "data.paths", paths)
            put(recipe, "data.kind", "indexed")
        elif g("mock_data"):
            put(recipe, "data.kind", "mock")
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
                put(recipe, "tokenizer.type", kind)
    save, load = g("save"), g("load")
    if load is not None and load != save:
        put(recipe, "checkpoint.load", load)
    elif save is not None and load is None:
        put(recipe, "checkpoint.load", "none")
    if save is None and recipe.get("checkpoint", {}).get("interval") is not None:
        recipe["checkpoint"].pop("interval")  # inert without a directory; a recipe refuses it (CHECKPOINT_INTERVAL_...)
        bad.append((flags.get("save_interval", "--save-interval"), "without --save Megatron-LM never saves"))
    samples_as_iterations(g, recipe, decided)
    if g("lr_warmup_fraction") is not None:
        put(recipe, "schedule.warmup", float(g("lr_warmup_fraction")))
    elif g("lr_warmup_iters") not in (None, "0"):
        put(recipe, "schedule.warmup", int(g("lr_warmup_iters")))
    iters = int(g("eval_iters", lm_default("eval_iters")))
    if iters > 0:
        interval = g("eval_interval", lm_default("eval_interval")) or recipe.get("training", {}).get("train_iters")
        if interval is not None:
            put(recipe, "eval.interval", int(interval))
    elif "eval" in recipe:
        recipe["eval"].pop("interval", None)
    # --- world size ----------------------------------------------------------------------------------
    count = nodes(recipe, platform, notes, launcher, decided)
    if count:
        put(recipe, "resources.nodes", count)
    no_recipe_path = _no_recipe_path(mcore)
    for dest in given:
        if dest == "optimizer" and given[dest] == "adam":
            continue  # what every recipe trains with
        if dest not in used and dest not in COMPOSITE and dest not in _consumed_io(given):
            bad.append((flags.get(dest, dest), no_recipe_path.get(dest) or why_no_knob(dest)))
    if not moe.get("num_experts"):
        raise ImportError_("the launch has no --num-experts: moeforge compiles Mixture-of-Experts recipes")
    model["architecture"] = {k: v for k, v in arch.items()}
    return recipe, model, decided


def _no_recipe_path(mcore: int) -> dict[str, str]:
    """Megatron-LM dest -> why an import drops it, for the table's rows without a recipe path: one the plan states
    (a plan section, a Bridge path, or computed: compiler/targets/plan.py) is fixed by moeforge; a lint-only one is read by
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


# ----------------------------------------------------------------------- the whole import

def import_text(text: str, name: str = "<launch>", platform: str | None = None, root: Path | None = None,
                recipe_name: str | None = None) -> Imported:
    """Turn a launch (script, args file, functional test or Bridge recipe) into recipe and model documents."""
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
            words, launcher = launch_words(text, None if name in ("-", "<launch>") else name)
        dests, bad = parse_flags(words)
        launcher["dirs"] = [Path.cwd()] if name in ("-", "<launch>") else [Path(name).resolve().parent, Path.cwd()]
    if platform is None:
        platform, reason = guess_platform(text, dests, platforms, launcher.get("nproc_per_node"))
        if platform is None:
            raise ImportError_(f"cannot tell the platform: {reason}; pass --platform NAME "
                               f"(one of {', '.join(platforms)})")
    else:
        reason = "given: --platform"
        if platform not in platforms:
            raise ImportError_(f"--platform {platform}: no such platform (one of {', '.join(platforms)})")
    pdoc = platforms[platform]
    if kind == "bridge":
        recipe_body, model_body, bad, decided = from_bridge(text, pdoc)
        decided.insert(0, "Megatron-Bridge overrides state only what they override: every other value is "
                       "moeforge's default or the solver's (not the Bridge recipe's)")
    else:
        recipe_body, model_body, decided = from_lm(dests, pdoc, notes, launcher, bad, notes.get("kind"))
        decided += [f"shell: {n}" for n in launcher.get("notes", [])]
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
