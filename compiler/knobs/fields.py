"""Which field names exist, and where: megatron-core per release, Megatron-LM, Megatron-Bridge.

Why: lint-config accepts a name when some front-end reads it, warns about a name none reads, and
infers the front-end from the names only one of them has; those decisions share this catalogue
(compiler/data/megatron_fields.json and megatron_lm_flags.json, plus the Bridge provider fields).
"""
from __future__ import annotations

import functools
import json

from moeforge.compiler.diagnostics import error
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.resources import MEGATRON_DATA

DATA = MEGATRON_DATA / "megatron_fields.json"
LM_FLAGS = MEGATRON_DATA / "megatron_lm_flags.json"
OWN_KEYS = ("gpu", "versions", "frontend", "launch")  # launch: what lint-config read off a launch (lint/launch.py)

_FIELDS: dict | None = None


def megatron_fields() -> dict:
    """{'versions': {'0.16.1': [...], ...}, 'all': set, 'megatron_lm_args': [...]} (cached)."""
    global _FIELDS
    if _FIELDS is None:
        raw = json.loads(DATA.read_text())
        versions = {v: frozenset(names) for v, names in raw["versions"].items()}
        every = set(raw.get("reference_0_19", ()))
        for names in versions.values():
            every |= names
        _FIELDS = {"versions": versions, "all": frozenset(every),
                   "megatron_lm_args": frozenset(raw.get("megatron_lm_args", ()))}
    return _FIELDS


_KNOWN: frozenset | None = None


def known_names() -> frozenset:
    """Every name a flat config may use (Megatron's fields and flags, knobs, facts, own keys); others are unknown."""
    global _KNOWN
    if _KNOWN is None:
        f = megatron_fields()
        _KNOWN = frozenset(set(f["all"]) | set(f["megatron_lm_args"]) | set(K.BY_FIELD) | set(K.FACT_BY_FIELD)
                           | set(OWN_KEYS) | lm_names() | BRIDGE_PROVIDER_FIELDS | lm_parser_dests())
    return _KNOWN


@functools.lru_cache(maxsize=4096)
def did_you_mean(name: str, n: int = 3, cutoff: float = 0.75) -> tuple[str, ...]:
    """The known names closest to an unknown one (difflib's ratio >= cutoff, best first).

    Why not plain difflib.get_close_matches over every name: ~1,500 names cost ~6 ms per unknown
    key.  A ratio 2M/(la+lb) >= cutoff needs M <= min(la, lb), so only names whose length lies in
    [la*c/(2-c), la*(2-c)/c] can qualify; the candidates are bucketed by length once, and a name
    asked about twice (the same typo in every config of a sweep) is answered from the cache."""
    import difflib  # lazy: only a misspelled name needs it

    by_length = _names_by_length()
    lo, hi = len(name) * cutoff / (2 - cutoff), len(name) * (2 - cutoff) / cutoff
    pool = [w for length, words in by_length.items() if lo <= length <= hi for w in words]
    return tuple(difflib.get_close_matches(name, pool, n=n, cutoff=cutoff))


@functools.lru_cache(maxsize=1)
def _names_by_length() -> dict[int, tuple[str, ...]]:
    out: dict[int, list[str]] = {}
    for w in sorted(known_names() - set(OWN_KEYS)):
        out.setdefault(len(w), []).append(w)
    return {k: tuple(v) for k, v in out.items()}


def lm_parser_dests() -> frozenset:
    """Every argument dest of the stored Megatron-LM parser (compiler/data/megatron_lm_args.json)."""
    raw = json.loads((MEGATRON_DATA / "megatron_lm_args.json").read_text())
    return frozenset(e["dest"] for e in raw["options"].values())


def fields_for(mcore: int) -> tuple[str, frozenset] | None:
    """The catalogued field list of the same major.minor release (None: not catalogued)."""
    for v, names in megatron_fields()["versions"].items():
        if version_int(v) // 1000 == mcore // 1000:
            return v, names
    return None


def supported_megatron_core() -> list[str]:
    """The megatron-core releases moeforge knows (their field lists are catalogued): a platform's
    megatron_core must be one of them, up to the patch release."""
    return list(megatron_fields()["versions"])


def megatron_core_diagnostics(software, pos) -> list:
    """An error when a platform's software.megatron_core is not a supported release (pos: its Position)."""
    mcore = software.get("megatron_core") if isinstance(software, dict) else None
    if not isinstance(mcore, str) or fields_for(version_int(mcore)) is not None:
        return []
    known = ", ".join(".".join(v.split(".")[:2]) + ".x" for v in supported_megatron_core())
    return [error("E_MEGATRON_CORE_VERSION", f"megatron-core {mcore} is not supported; supported releases: {known}",
                  pos, help=f"set software.megatron_core to a release of {known}")]


# Megatron-Bridge GPTModelProvider / MLA provider fields that are not megatron-core
# TransformerConfig fields (megatron-bridge 0.6.2 models/gpt_provider.py).
BRIDGE_PROVIDER_FIELDS = frozenset((
    "dense_grouped_gemm", "fp16_lm_cross_entropy", "hf_model_id", "hf_model_revision", "make_vocab_size_divisible_by",
    "mtp_enabled", "parallel_output", "restore_modelopt_state", "rope_scaling", "rope_scaling_factor",
    "scatter_embedding_sequence_parallel", "seq_len_interpolation_factor", "share_embeddings_and_output_weights",
    "should_pad_vocab", "tp_comm_overlap_cfg", "transformer_layer_spec", "use_arbitrary_attention_mask",
    "use_transformer_engine_full_layer_spec", "position_embedding_type", "rotary_base", "rotary_percent",
    "vocab_size", "seq_length"))
# Names every front-end has (a flat lint-config mapping carries them whoever reads it).
NEUTRAL_NAMES = frozenset(("micro_batch_size", "global_batch_size", "seq_length", "world_size", "train_iters",
                           "lr", "seed", "use_megatron_fsdp"))
# Megatron-LM argument dests that name a megatron-core field differently (arguments.py 0.19).
LM_ALIASES = {"num_experts": "num_moe_experts", "te_rng_tracker": "use_te_rng_tracker",
              "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
              "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
              "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
              "fp8_param_gather": "fp8_param", "fp4_param_gather": "fp4_param"}

# Knob fields that are Megatron-LM training arguments (data, tokenizer, checkpoints, LR schedule, logging,
# evaluation, the optimizer's numbers, the distributed backend): the table has rows for them, yet they stay
# Megatron-LM names when lint-config infers the front-end from the names a configuration uses.
LM_ARGUMENT_KNOBS = frozenset({k.field for k in K.KNOBS if k.section in K.IO_SECTIONS}
                              | {"min_lr", "adam_beta1", "adam_beta2", "adam_eps", "use_persistent_ckpt_worker",
                                 "exit_signal_handler", "exit_signal", "distributed_backend"})

_LM_NAMES: frozenset | None = None


def lm_names() -> frozenset:
    """Megatron-LM argument dests (0.16.1 and 0.19 flag lists) that only Megatron-LM has."""
    global _LM_NAMES
    if _LM_NAMES is None:
        raw = json.loads(LM_FLAGS.read_text())
        names = {f[2:].replace("-", "_") for v, flags in raw.items() if not v.startswith("_") for f in flags}
        names |= set(LM_ALIASES) | {"num_layers_per_virtual_pipeline_stage", "recompute_activations"}
        knobs = (set(K.BY_FIELD) | set(K.FACT_BY_FIELD)) - LM_ARGUMENT_KNOBS
        _LM_NAMES = frozenset(names - set(megatron_fields()["all"]) - knobs
                              - BRIDGE_PROVIDER_FIELDS - NEUTRAL_NAMES - set(OWN_KEYS))
    return _LM_NAMES
