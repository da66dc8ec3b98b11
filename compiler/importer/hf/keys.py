"""config.json's keys as the Hugging Face reader reads them (compiler/importer/hf/reader.py): each under its
aliases, checked for what it holds, with its source, and the transformers class's default for a key a config.json
leaves out (compiler/data/hf_class_defaults.json)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache

from moeforge.compiler.importer.hf import families as F
from moeforge.compiler.launch_reader.text import ImportError_
from moeforge.compiler.resources import MEGATRON_DATA

DEFAULTS = MEGATRON_DATA / "hf_class_defaults.json"  # package data of `compiler`, in a checkout and a wheel
_MISSING = object()

# What each key the reader reads holds: "count" an integer >= 1, "index" an integer >= 0, "number", "flag" a
# boolean, "name" a string, "indices" a list of integers >= 0; checked as it is read, so a wrong one is one line.
KINDS = {
    **dict.fromkeys(("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size",
                     "num_key_value_heads", "head_dim", "max_position_embeddings", "q_lora_rank", "kv_lora_rank",
                     "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "full_attention_interval",
                     "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                     "linear_num_value_heads", "sliding_window", "moe_intermediate_size", "moe_layer_freq",
                     "decoder_sparse_step", "n_group", "topk_group", "original_max_position_embeddings", *F.EXPERTS,
                     *F.TOPK), "count"),
    # shared_expert_intermediate_size 0: no shared expert (Qwen3-Coder-480B-A35B; Bridge converts it so)
    **dict.fromkeys(("shared_expert_intermediate_size", "n_shared_experts", "moe_num_shared_experts",
                     "num_nextn_predict_layers", "mtp_num_hidden_layers", "first_k_dense_replace"), "index"),
    **dict.fromkeys(("rms_norm_eps", "attention_dropout", "initializer_range", "swiglu_limit", "router_aux_loss_coef",
                     "aux_loss_alpha", "routed_scaling_factor", "rope_theta", "partial_rotary_factor", "factor",
                     "beta_fast", "beta_slow", "mscale", "mscale_all_dim"), "number"),
    **dict.fromkeys(("mlp_bias", "attention_bias", "qkv_bias", "use_bias", "use_qk_norm", "tie_word_embeddings",
                     "norm_topk_prob", "seq_aux", "use_sliding_window", "truncate"), "flag"),
    **dict.fromkeys(("hidden_act", "scoring_func", "topk_method", "rope_type", "type"), "name"),
    "mlp_only_layers": "indices",
}


# The largest value each count may hold: far past any published model (DeepSeek-V3: 61 layers, 256 experts, hidden
# 7168, vocabulary 129280; Llama 4: 202048 tokens, 10M positions), and small enough that a reader that loops over
# layers, or a model document that lists them, stays small (num_hidden_layers 10**12 once ran 36 s and exhausted
# memory). Everything else counted is a width or a size: at most 2**24.
LAYERS_MAX = 4096
COUNT_MAX = {**dict.fromkeys(("num_hidden_layers", "first_k_dense_replace", "num_nextn_predict_layers",
                              "mtp_num_hidden_layers", "moe_layer_freq", "decoder_sparse_step",
                              "full_attention_interval"), LAYERS_MAX),
             **dict.fromkeys(F.EXPERTS + F.TOPK + ("n_shared_experts", "moe_num_shared_experts", "n_group",
                                                   "topk_group"), 1 << 16),
             **dict.fromkeys(("max_position_embeddings", "original_max_position_embeddings", "sliding_window"),
                             1 << 30)}
SIZE_MAX = 1 << 24
NUMBER_MAX = 1e12   # rope_theta reaches 1e8 (Llama 4: 5e5; some long-context models 1e9); no ratio or epsilon is near


class HfRefused(ImportError_):
    """A family or a feature moeforge's runtime cannot build (one message naming each)."""


@lru_cache(maxsize=1)
def class_defaults() -> dict:
    """{config class: {key: default}}: transformers' defaults for keys a config.json leaves out."""
    return json.loads(DEFAULTS.read_text(encoding="utf-8"))["classes"]


@dataclass
class Read:
    """A model document's fields with their sources, and what the import noticed on its way."""
    fields: dict = field(default_factory=dict)     # "architecture.num_layers" -> (value, source)
    notes: list = field(default_factory=list)
    unread: dict = field(default_factory=dict)     # config.json keys no field came from -> value

    def put(self, path: str, value, source: str) -> None:
        """Record one read value with the config key (or code) it came from, for the document's comments."""
        self.fields[path] = (value, source)


class Keys:
    """config.json's keys, each looked up under its aliases, then the class's default; every key read is kept."""

    def __init__(self, data: dict, family: F.Family, prefix: str = "", outer: dict | None = None):
        self.data, self.family, self.prefix, self.outer = data, family, prefix, outer or {}
        self.defaults = class_defaults().get(family.config_class, {})
        self.read: set = set()

    def has(self, *names) -> bool:
        """Whether config.json sets any of these aliases to a value (a null counts as absent)."""
        return any(self.data.get(n) is not None for n in names)

    def get(self, *names, default=_MISSING, required: bool = False, null: bool = False):
        """(value, source) of the first name present (None counts as absent unless `null`: a null that means
        "none", as q_lora_rank's), else of the class default, else `default` (source None); no default: the config
        is refused, naming the key. A `required` key (the model's shape) has no class default: a config.json
        without it is not read with another model's size."""
        self.read.update(n for n in names if n in self.data)  # aliases: every spelling present says the same
        for n in names:
            if self.data.get(n) is not None or (null and n in self.data):
                return typed(self.data[n], n, f"{self.prefix}{n}"), f"{self.prefix}{n}"
        for n in names if not required else ():
            if self.defaults.get(n) is not None:
                return self.defaults[n], f"{names[0]} absent: {self.family.config_class}'s default"
        if default is not _MISSING:
            return default, None
        raise ImportError_(f"{self.prefix}{names[0]}: missing; expected it in a {self.family.name} config.json"
                           + (f" (or {' / '.join(names[1:])})" if len(names) > 1 else ""))

    def rope(self) -> tuple[dict, dict]:
        """RoPE settings as one mapping, as transformers standardises them (rope_parameters in transformers 5; the
        rope_theta / rope_scaling / partial_rotary_factor keys of configs written before it), with each one's
        source; the class's defaults stand in for what a config.json leaves out."""
        self.read.update({"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"})
        rope, where = {}, {}
        for key in ("rope_scaling", "rope_parameters"):
            mapping = self.data.get(key)
            if mapping is not None and not isinstance(mapping, dict):
                raise ImportError_(f"{self.prefix}{key}: expected a mapping, got {mapping!r}")
            for k, v in (mapping or {}).items():
                where[k] = f"{self.prefix}{key}.{k}"
                rope[k] = typed(v, k, where[k])
        for key in ("rope_theta", "partial_rotary_factor"):
            if key not in rope:
                value, src = self.get(key, default=None)
                default = (self.defaults.get("rope_parameters") or {}).get(key)
                if value is None and default is not None:
                    value, src = default, f"{key} absent: {self.family.config_class}'s default"
                if value is not None:
                    rope[key], where[key] = value, src
        return rope, where


def typed(value, key: str, src: str):
    """`value` as KINDS says `key` holds it (None passes: a key's null is read where it is looked up)."""
    kind = KINDS.get(key)
    if value is None or kind is None:
        return value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("count", "index"):
        top = COUNT_MAX.get(key, SIZE_MAX)
        if number and _finite(value) and int(value) == value and (kind == "count") <= int(value) <= top:
            return int(value)
        expected = "an integer from " + ("1" if kind == "count" else "0") + f" to {top}"
    elif kind == "number" and number and _finite(value) and abs(value) <= NUMBER_MAX:
        return value
    elif kind == "flag" and isinstance(value, bool):
        return value
    elif kind == "name" and isinstance(value, str):
        return value
    elif kind == "indices" and isinstance(value, list) and all(typed(v, "first_k_dense_replace", src) == v
                                                               for v in value):
        return value
    else:
        expected = {"number": f"a finite number of magnitude at most {NUMBER_MAX:g}", "flag": "true or false", "name": "a string",
                    "indices": "a list of layer numbers"}[kind]
    raise ImportError_(f"{src}: expected {expected}, got {json.dumps(value)}")


def _finite(value) -> bool:
    """An int is finite however large (math.isfinite of 10**4000 raises OverflowError); a float unless inf/nan."""
    return isinstance(value, int) or math.isfinite(value)
