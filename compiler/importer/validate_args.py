"""What Megatron-LM's validate_args does to a launch's arguments before anything reads them, for `moeforge
import` (compiler/importer/launch.py): deprecated flags renamed or refused, the layout values it derives, the
vocabulary build_tokenizer pads, a launch counted in samples, and why a dropped argument matters. An import
reads a launch as it runs."""
from __future__ import annotations

from moeforge.compiler.importer import vocab
from moeforge.compiler.importer.documents import has_path, put_path
from moeforge.compiler.importer.documents import put
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.fields import megatron_fields
from moeforge.compiler.knobs.layout import LayoutError, vpp_from_layers_per_virtual_stage
from moeforge.compiler.launch_reader.text import ImportError_
from moeforge.compiler.lint.frontends import validate_args_rewrites as rewrites
from moeforge.compiler.targets.megatron_args import lm_default

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


def refuse_unplanned(given: dict, flags: dict, entry: str | None) -> None:
    """A launch moeforge cannot plan, refused before anything is written: a Mamba hybrid (its layers come from
    --hybrid-layer-pattern, which overrides --num-layers in validate_args; pretrain_mamba.py / pretrain_hybrid.py)."""
    pattern = given.get("hybrid_layer_pattern") or given.get("hybrid_override_pattern")
    if pattern or (entry or "").startswith(("pretrain_mamba", "pretrain_hybrid")):
        what = f"--hybrid-layer-pattern {pattern}" if pattern else entry
        raise ImportError_(f"a Mamba-hybrid launch ({what}): its layers come from the pattern "
                           f"({', '.join(sorted(set(str(pattern or '')) - set('|/ ')) or 'M, *')} layers), not "
                           "--num-layers; moeforge plans GPT models of attention and MLP/MoE layers only")


def as_validate_args_reads(given: dict, flags: dict, bad: list, decided: list | None = None) -> dict:
    """The launch's dests as validate_args leaves them: deprecated flags renamed, refused ones reported, and
    megatron-core's own rewrite of the deprecated --moe-layer-recompute (TransformerConfig.__post_init__)."""
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
    if out.pop("moe_layer_recompute", False):
        text = flags.get("moe_layer_recompute", "--moe-layer-recompute")
        if out.get("recompute_granularity") == "full":
            bad.append((text, "megatron-core refuses it: Do not set --moe-layer-recompute with full recompute "
                              "granularity."))
        else:
            modules = list(out.get("recompute_modules") or lm_default("recompute_modules") or ["core_attn"])
            modules += [] if "moe" in modules else ["moe"]
            out.update(recompute_granularity="selective", recompute_modules=modules)
            flags.setdefault("recompute_granularity", text)
            flags.setdefault("recompute_modules", text)
            if decided is not None:
                decided.append(f"recompute: selective, modules {modules} (megatron-core's TransformerConfig turns "
                               "the deprecated --moe-layer-recompute into 'moe' among the recompute modules)")
    return out


def validate_args_rewrites(recipe: dict, model: dict, decided: list) -> None:
    """What Megatron-LM's validate_args rewrites (compiler/lint/frontends.py, the one list lint-config applies
    too: bias-activation fusion off without linear bias, ...), applied to the imported documents and noted."""
    def get(path):
        node = model if path.startswith("model.") else recipe
        for part in path.split(".")[1 if path.startswith("model.") else 0:]:
            node = node[part]
        return node

    env, given = {}, {}
    for k in K.KNOBS:
        if k.path and has_path(recipe, model, k.path):
            env[k.field] = given[k.field] = get(k.path)
        elif k.path:
            env[k.field] = k.default_for("megatron-lm")
    env["activation_func"], env["gated_linear_unit"] = K.mlp_activation(model.get("architecture", {})) or (
        "gelu", False)
    for field_, before, after, why in rewrites(env, given):
        k = K.BY_FIELD.get(field_)
        if k is None or not k.path or after == before:
            continue
        put_path(recipe, model, k.path, after)
        decided.append(f"{k.path.removeprefix('model.')}: {str(after).lower() if isinstance(after, bool) else after}"
                       f" ({why})")


def padded_vocab(arch: dict, g, recipe: dict, decided: list, dirs: list) -> None:
    """The vocabulary Megatron-LM builds without --padded-vocab-size: the tokenizer's (compiler/importer/vocab.py),
    padded up to a multiple of --make-vocab-size-divisible-by x TP (build_tokenizer.py vocab_size_with_padding).
    When it cannot be known here, the note says so and names the key to set."""
    tp = int(recipe.get("parallelism", {}).get("tp") or 1)
    size, how = vocab.tokenizer_vocab(g, dirs)
    if size is None:
        multiple = vocab.padded(1, g, tp)[1]
        fix = (f"set model.{vocab.KEY} in the model file to the tokenizer's vocabulary padded up to a multiple of "
               f"{multiple}")
        if arch.get("vocab_size") is not None:  # the launch's own --vocab-size, which this tokenizer does not read
            decided.append(f"{vocab.KEY}: {arch['vocab_size']} is the launch's --vocab-size, which Megatron-LM does "
                           f"not read with this tokenizer; the model's own cannot be known here ({how}): check it, "
                           f"or {fix}")
        else:
            decided.append(f"{vocab.KEY}: unknown here ({how}); {fix}")
        return
    built, multiple = vocab.padded(size, g, tp)
    arch["vocab_size"] = built
    padding = f", padded to a multiple of --make-vocab-size-divisible-by x TP = {multiple}" if built != size else ""
    decided.append(f"{vocab.KEY}: {built} ({how}: {size}{padding})")
    tok = g("tokenizer_type", lm_default("tokenizer_type"))
    if tok == "NullTokenizer" and built != size:
        decided.append(f"tokenizer: the launch's NullTokenizer ends documents with id {size - 1}, a recipe's with "
                       f"{built - 1}")


def samples_as_iterations(g, recipe: dict, decided: list) -> None:
    """A launch counted in samples (--train-samples, --lr-decay-samples, --lr-warmup-samples,
    --lr-wsd-decay-samples) as a recipe's
    iterations of --global-batch-size samples: Megatron-LM runs train_samples // global_batch_size iterations
    (training.py update_train_iters, no batch-size ramp-up) and moves its LR schedule by that many samples a
    step, so a schedule point falls within one iteration of where the launch has it."""
    gbs = recipe.get("training", {}).get("global_batch_size")
    if not gbs:
        return
    for dest, path in (("train_samples", "training.train_iters"), ("lr_decay_samples", "schedule.decay_iters"),
                       ("lr_warmup_samples", "schedule.warmup"), ("lr_wsd_decay_samples", "schedule.wsd_decay_iters")):
        samples = g(dest)
        if samples is None or (dest == "lr_warmup_samples" and int(samples) == 0):
            continue
        iters = int(samples) // int(gbs) if dest == "train_samples" else round(int(samples) / int(gbs))
        put(recipe, path, iters)
        decided.append(f"{path}: {iters} (--{dest.replace('_', '-')} {samples} in iterations of "
                       f"{gbs} samples)")


def derive_mlp_width(arch: dict, given: dict, decided: list) -> None:
    """validate_args' MLP width without --ffn-hidden-size: 4 x hidden, or for SwiGLU 2/3 of it rounded down to a
    multiple of 64 (megatron-core's own default is 4 x hidden, so a SwiGLU launch's width is written down)."""
    if arch.get("ffn_hidden_size") is None and given.get("swiglu") and arch.get("hidden_size"):
        arch["ffn_hidden_size"] = int((4 * int(arch["hidden_size"]) * 2 / 3) / 64) * 64
        decided.append(f"architecture.ffn_hidden_size: {arch['ffn_hidden_size']} (Megatron-LM's validate_args "
                       "makes a SwiGLU MLP without --ffn-hidden-size 2/3 of 4 x hidden wide)")


def derive_layout(recipe: dict, arch: dict, given: dict, flags: dict, bad: list, decided: list) -> None:
    """The parallel layout and CUDA-graph values validate_args derives or turns off (arguments.py): an unset ETP
    is TP, --num-layers-per-virtual-pipeline-stage is a VPP size, PP communication overlap is off without VPP,
    SP is off at TP 1, and CUDA graphs turn Transformer Engine's RNG tracker on."""
    graphs = recipe.get("cuda_graph", {})
    if graphs.get("impl", "none") != "none" and not graphs.get("te_rng_tracker") and "transformer_engine" in (
            graphs["impl"], given.get("transformer_impl", lm_default("transformer_impl"))):
        graphs["te_rng_tracker"] = True
        decided.append("cuda_graph.te_rng_tracker: true (Megatron-LM's validate_args turns it on for CUDA graphs)")
    par = recipe.setdefault("parallelism", {})
    if par.get("etp") is None:
        par["etp"] = int(par.get("tp") or 1)  # a recipe's unset ETP is the solver's (LAYOUT_ETP_DEFAULT_DIFFERS)
        if par["etp"] > 1:
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


# Megatron-LM arguments outside megatron-core's configs that change what trains, and no recipe states
TRAINING_ONLY_IN_LM = {
    "optimizer": "a recipe trains with Adam",
    "lr_warmup_init": "a recipe's warm-up starts from LR 0",
    "use_tp_pp_dp_mapping": "a recipe orders ranks TP-CP-EP-DP-PP, megatron-core's default",
    "finetune": "a recipe resumes with its optimizer state and iteration count",
    "no_load_optim": "a recipe resumes with its optimizer state",
    "no_load_rng": "a recipe resumes with its RNG state",
    "hybrid_layer_pattern": "a recipe builds a GPT model of attention and MLP/MoE layers (Mamba hybrids are not "
                            "planned)",
}
# argument families that share one reason: prefix -> the TRAINING_ONLY_IN_LM entry
FAMILIES = {"muon_": "optimizer", "mamba_": "hybrid_layer_pattern", "hybrid_": "hybrid_layer_pattern"}


def why_no_knob(dest: str) -> str:
    """Why an argument without a knob is dropped: a megatron-core config field or one of TRAINING_ONLY_IN_LM
    changes what trains (the import then trains differently from the launch); any other is launch-only."""
    reason = dest if dest in TRAINING_ONLY_IN_LM else next(
        (key for prefix, key in FAMILIES.items() if dest.startswith(prefix)), None)
    if reason:
        return f"changes what trains, and no recipe setting says it: {TRAINING_ONLY_IN_LM[reason]}"
    if dest in megatron_fields()["all"]:
        return "a megatron-core setting no recipe states: the imported recipe runs megatron-core's default"
    return "a Megatron-LM argument moeforge has no knob for (launch-only)"
