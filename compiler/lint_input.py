"""Reading a flat Megatron configuration the way megatron-core reads it, for lint-config.

Parses YAML/JSON with line numbers, coerces each field to its knob kind (clear UnusableInput
errors otherwise), maps the deprecated spellings (cuda_graph_scope, the per-backend SM counts,
a list-valued moe_layer_freq) onto the canonical knobs, reads the `gpu:` and `versions:` keys
into platform facts, and marks what nobody can know as UNKNOWN.
"""
from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import knobs as K
from .rules.expr import UNKNOWN, version_int


DATA = Path(__file__).resolve().parent / "data" / "megatron_fields.json"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
OWN_KEYS = ("gpu", "versions", "frontend")
LM_FLAGS = Path(__file__).resolve().parent / "data" / "megatron_lm_flags.json"
VERSION_KEYS = ("torch", "transformer_engine", "megatron_core")
GPU_MAJOR = {"A100": 8, "H100": 9, "H200": 9, "B100": 10, "B200": 10, "B300": 10, "GB200": 10, "GB300": 10}
# knobs that are not megatron-core dataclass fields but whose "not given" value is known
NON_MCORE_DEFAULTS = {"use_megatron_fsdp": False, "global_batch_size": None,
                      "hybridep_ranks_per_nvlink_domain": None}
SEVERITY_ORDER = {"error": 0, "warning": 1, "advice": 2, "info": 3}
_VERSION_RE = re.compile(r"^\d+(\.\d+){0,3}([.+-]?[A-Za-z0-9.+-]*)?$")


class UnusableInput(Exception):
    """The input cannot be linted (exit 2)."""


@dataclass
class Finding:
    rule: str
    severity: str
    message: str
    megatron_message: str | None
    fields: list
    origin: str = "moeforge"
    source: str = ""
    fix: str = ""
    line: int = 0
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "message": self.message,
                "megatron_message": self.megatron_message, "fields": self.fields,
                "origin": self.origin, "source": self.source, "fix": self.fix, "line": self.line}


@dataclass
class Config:
    """A configuration read for linting: env for the rules, what was given, where."""
    env: dict
    given: dict                    # field -> value as written
    lines: dict                    # top-level key -> 1-based line
    display: dict                  # placeholder -> text, for megatron messages
    findings: list                 # problems found while reading (unknown fields, ...)
    frontend: str = "megatron-core"  # who reads it: megatron-core | megatron-lm | bridge
    frontend_reason: str = ""      # why (stated, --frontend, or inferred from which names)
    written: dict = field(default_factory=dict)   # env before the front-end's rewrites (silent rules)
    rewrites: list = field(default_factory=list)  # [(field, before, after, why)] the front-end applies


# ----------------------------------------------------------------------- field catalogue

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
    global _KNOWN
    if _KNOWN is None:
        f = megatron_fields()
        _KNOWN = frozenset(set(f["all"]) | set(f["megatron_lm_args"]) | set(K.BY_FIELD) | set(K.FACT_BY_FIELD)
                           | set(OWN_KEYS) | lm_names() | BRIDGE_PROVIDER_FIELDS)
    return _KNOWN


def _fields_for(mcore: int) -> tuple[str, frozenset] | None:
    """The catalogued field list of the same major.minor release (None: not catalogued)."""
    for v, names in megatron_fields()["versions"].items():
        if version_int(v) // 1000 == mcore // 1000:
            return v, names
    return None



# ----------------------------------------------------------------------- front-ends

# Megatron-Bridge: the sections of a ConfigContainer (nested mappings or dotted keys such as
# comm_overlap.overlap_p2p_comm), and GPTModelProvider / MLA provider fields that are not
# megatron-core TransformerConfig fields (megatron-bridge 0.6.2 models/gpt_provider.py).
BRIDGE_SECTIONS = ("model", "comm_overlap", "ddp", "train", "optimizer", "mixed_precision", "dataset",
                   "checkpoint", "logger", "scheduler", "rng", "tokenizer", "dist")
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
FRONTEND_WORDS = {"megatron-core": "megatron-core", "mcore": "megatron-core", "megatron-lm": "megatron-lm",
                  "mlm": "megatron-lm", "bridge": "bridge", "megatron-bridge": "bridge"}

_LM_NAMES: frozenset | None = None


def lm_names() -> frozenset:
    """Megatron-LM argument dests (0.16.1 and 0.19 flag lists) that only Megatron-LM has."""
    global _LM_NAMES
    if _LM_NAMES is None:
        raw = json.loads(LM_FLAGS.read_text())
        names = {f[2:].replace("-", "_") for v, flags in raw.items() if not v.startswith("_") for f in flags}
        names |= set(LM_ALIASES) | {"num_layers_per_virtual_pipeline_stage", "recompute_activations"}
        _LM_NAMES = frozenset(names - set(megatron_fields()["all"]) - set(K.BY_FIELD) - set(K.FACT_BY_FIELD)
                              - BRIDGE_PROVIDER_FIELDS - NEUTRAL_NAMES - set(OWN_KEYS))
    return _LM_NAMES


def _bridge_layout(data: dict) -> list[str]:
    return [k for k in data if (k in BRIDGE_SECTIONS and isinstance(data[k], (dict, str)) and k != "frontend")
            or ("." in k and k.split(".", 1)[0] in BRIDGE_SECTIONS)]


def infer_frontend(data: dict) -> tuple[str, str]:
    """(front-end, why) from the names a mapping uses."""
    nested = _bridge_layout(data)
    bridge_only = sorted(k for k in data if k in BRIDGE_PROVIDER_FIELDS - lm_names() - NEUTRAL_NAMES
                         and k not in ("position_embedding_type", "rotary_base", "rotary_percent", "vocab_size",
                                       "make_vocab_size_divisible_by", "fp16_lm_cross_entropy",
                                       "tp_comm_overlap_cfg", "rope_scaling_factor"))
    lm = sorted(k for k in data if k in lm_names())
    if nested or bridge_only:
        names = (nested + bridge_only)[:3]
        why = f"inferred: Megatron-Bridge names ({', '.join(names)})"
        if lm:
            why += f"; Megatron-LM names too ({', '.join(lm[:3])})"
        return "bridge", why
    if lm:
        return "megatron-lm", f"inferred: Megatron-LM argument names that are not megatron-core fields ({', '.join(lm[:3])})"
    return "megatron-core", "inferred: only megatron-core field names"


def _flatten_bridge(data: dict, lines: dict) -> tuple[dict, dict]:
    """A Bridge ConfigContainer layout (nested sections or dotted keys) as flat Megatron names."""
    flat: dict = {}
    flat_lines: dict = {}

    def put(key, value, line, where):
        if key in flat and flat[key] != value:
            raise UnusableInput(f"{where}: {key} is given twice with different values ({flat[key]!r}, {value!r})")
        flat[key] = value
        if line:
            flat_lines.setdefault(key, line)

    for key, value in data.items():
        line = lines.get(key, 0)
        head, _, rest = key.partition(".")
        if head == "mixed_precision" and not rest and isinstance(value, str):
            # Bridge precision presets: "bf16_mixed", "bf16_with_fp8_...", "fp16_mixed", ...
            put("bf16", value.startswith("bf16"), line, key)
            put("fp16", value.startswith("fp16"), line, key)
        elif head in BRIDGE_SECTIONS and rest:
            put(rest, value, line, key)
        elif key in BRIDGE_SECTIONS and isinstance(value, dict):
            for sub, v in value.items():
                if not isinstance(sub, str):
                    raise UnusableInput(f"{key}: field names must be strings, got {sub!r}")
                put(sub, v, line, f"{key}.{sub}")
        else:
            put(key, value, line, key)
    return flat, flat_lines


def _set(env, rewrites, name, value, why):
    before = env.get(name, UNKNOWN)
    if before is value or (before is not UNKNOWN and value is not UNKNOWN and before == value
                           and type(before) is type(value)):
        return
    env[name] = value
    rewrites.append((name, before, value, why))


def _true(v) -> bool:
    return v is True


def _frontend_rewrites(env: dict, given: dict, frontend: str) -> list:
    """Apply what the front-end changes before megatron-core's TransformerConfig sees the values.

    Megatron-Bridge 0.6.2 (ConfigContainer.runtime_config_update: CommOverlapConfig.setup, then
    TransformerConfig.finalize): TP overlap dropped without TP >= 2 / SP / TE; PP > 1 with VPP > 1
    -> overlap_p2p_comm (unless given); DP > 1 with the distributed optimizer -> grad-reduce and
    param-gather overlap (unless given); SP off with TP = 1; ETP = 1 when EP > 1 and ETP unset;
    flex without a backend -> alltoall; gradient accumulation fusion on when TE is installed.
    Megatron-LM 0.19 (validate_args): SP off with TP = 1; no VPP -> overlap_p2p_comm off;
    te_rng_tracker on with CUDA graphs; variable_seq_lengths off.
    """
    rw: list = []
    g = env.get
    tp, pp, ep = g("tensor_model_parallel_size"), g("pipeline_model_parallel_size"), g("expert_model_parallel_size")
    vpp = g("virtual_pipeline_model_parallel_size")
    if frontend == "bridge":
        cc = "Megatron-Bridge CommOverlapConfig"
        if _true(g("tp_comm_overlap")):
            te = g("transformer_engine")
            if isinstance(tp, int) and tp < 2:
                _set(env, rw, "tp_comm_overlap", False, f"{cc}: TP < 2")
            elif g("sequence_parallel") is False:
                _set(env, rw, "tp_comm_overlap", False, f"{cc}: sequence_parallel=False")
            elif te == 0:
                _set(env, rw, "tp_comm_overlap", False, f"{cc}: no Transformer Engine")
            elif te is UNKNOWN:
                _set(env, rw, "tp_comm_overlap", UNKNOWN, f"{cc}: dropped if Transformer Engine is missing")
        if "overlap_p2p_comm" not in given and _known_int(pp):
            interleaved = pp > 1 and _known_int(vpp) and vpp > 1
            _set(env, rw, "overlap_p2p_comm", interleaved,
                 f"{cc}: {'PP > 1 with VPP' if interleaved else 'not the interleaved schedule'}")
        if _true(g("use_distributed_optimizer")):
            dp = g("data_parallel_size")
            value = UNKNOWN if dp is UNKNOWN or dp is None else dp > 1
            for name in ("overlap_grad_reduce", "overlap_param_gather"):
                if name not in given:
                    _set(env, rw, name, value, f"{cc}: DP > 1 with the distributed optimizer")
        if "gradient_accumulation_fusion" not in given:
            te = g("transformer_engine")
            _set(env, rw, "gradient_accumulation_fusion", UNKNOWN if te is UNKNOWN else te > 0,
                 "Megatron-Bridge GPTModelProvider: on when Transformer Engine (or APEX) is installed")
        if g("moe_token_dispatcher_type") == "flex" and g("moe_flex_dispatcher_backend") is None:
            _set(env, rw, "moe_token_dispatcher_type", "alltoall",
                 "Megatron-Bridge validate_flex_dispatcher_backend: flex without a backend")
        if _true(g("sequence_parallel")) and _known_int(tp) and tp <= 1:
            _set(env, rw, "sequence_parallel", False, "Megatron-Bridge TransformerConfig.finalize: TP = 1")
        if g("expert_tensor_parallel_size") is None and _known_int(ep) and ep > 1:
            _set(env, rw, "expert_tensor_parallel_size", 1,
                 "Megatron-Bridge _set_moe_expert_tensor_parallel_default: EP > 1")
    elif frontend == "megatron-lm":
        va = "Megatron-LM validate_args"
        if _true(g("sequence_parallel")) and tp == 1:
            _set(env, rw, "sequence_parallel", False, f"{va}: TP = 1")
        if vpp is None:
            _set(env, rw, "overlap_p2p_comm", False, f"{va}: not the interleaved schedule")
        if g("cuda_graph_impl") not in ("none", UNKNOWN):
            _set(env, rw, "use_te_rng_tracker", True, f"{va}: CUDA graphs")
        if "variable_seq_lengths" in given:
            _set(env, rw, "variable_seq_lengths", False, f"{va}: always False")
    return rw

# ----------------------------------------------------------------------- reading

def parse(text: str, name: str = "<config>") -> tuple[dict, dict]:
    """The mapping and the 1-based line of each top-level key. UnusableInput when it is not one."""
    lines: dict = {}
    try:
        if name.endswith(".json"):
            data = json.loads(text)
        else:
            loader = _LOADER(text)
            try:
                node = loader.get_single_node()
                data = loader.construct_document(node) if node is not None else None
            finally:
                loader.dispose()
            if isinstance(node, yaml.MappingNode):
                for k, _ in node.value:
                    if isinstance(k, yaml.ScalarNode):
                        lines.setdefault(k.value, k.start_mark.line + 1)
    except (yaml.YAMLError, json.JSONDecodeError, ValueError) as exc:
        kind = "JSON" if name.endswith(".json") else "YAML"
        raise UnusableInput(f"cannot parse {kind}: {_one_line(exc)}") from None
    if not isinstance(data, dict):
        raise UnusableInput(f"expected a mapping of Megatron field names, got {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise UnusableInput(f"field names must be strings, got {key!r}")
    if name.endswith(".json"):  # JSON is YAML: positions are best effort
        try:
            node = yaml.compose(text, Loader=_LOADER)
            if isinstance(node, yaml.MappingNode):
                for k, _ in node.value:
                    lines.setdefault(k.value, k.start_mark.line + 1)
        except yaml.YAMLError:
            pass
    return data, lines


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _bad(name: str, want: str, value) -> UnusableInput:
    return UnusableInput(f"{name}: expected {want}, got {value!r}")


def _coerce(k: K.Knob, value):
    """A knob's value, type-checked (UnusableInput when it has the wrong type)."""
    name = k.field
    if k.kind == "bool":
        if not isinstance(value, bool):
            raise _bad(name, "true or false", value)
        return value
    if k.kind in ("int", "opt_int", "version"):
        if value is None and k.kind == "opt_int":
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(name, "an integer" + (" or null" if k.kind == "opt_int" else ""), value)
        if value < 0:
            raise _bad(name, "a non-negative integer", value)
        return value
    if k.kind == "float":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _bad(name, "a number or null", value)
        return value
    if k.kind == "enum":
        if value not in k.domain:
            shown = ", ".join("null" if d is None else str(d) for d in k.domain)
            raise _bad(name, f"one of {shown}", value)
        return value
    if k.kind == "set":
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _bad(name, "a list of names or null", value)
        bad = [v for v in value if v not in k.domain]
        if bad:
            raise _bad(name, f"names among {', '.join(k.domain)}", bad if len(bad) > 1 else bad[0])
        return list(dict.fromkeys(value))
    return value  # str: anything (layout strings or lists)


def _graph_modules(name: str, value):
    """cuda_graph_modules / cuda_graph_scope as megatron-core normalises them."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",") if v] if value else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(name, "a list of module names, a comma-separated string, or null", value)
    if "full" in value:
        if value != ["full"]:
            raise UnusableInput(f"{name}: full scope cannot be used with other scopes.")
        return []
    return _coerce(K.BY_FIELD["cuda_graph_modules"], value)


def _layer_freq(value):
    if isinstance(value, bool):
        raise _bad("moe_layer_freq", "an integer or a list of 0/1", value)
    if isinstance(value, int):
        if value < 1:
            raise _bad("moe_layer_freq", "a positive integer or a list of 0/1", value)
        return value
    if isinstance(value, list):
        if not value or any(v not in (0, 1) or isinstance(v, bool) for v in value):
            raise _bad("moe_layer_freq", "a list of 0/1", value)
        return 1 if all(v == 1 for v in value) else 2
    if isinstance(value, str):
        return UNKNOWN  # a Megatron-LM pattern string such as "([0]*3+[1]*58)": not evaluated
    raise _bad("moe_layer_freq", "an integer or a list of 0/1", value)


def _load_balancing(value):
    dom = K.BY_FIELD["moe_router_load_balancing_type"].domain
    items = value if isinstance(value, list) else [value]
    if not items or any(v not in dom for v in items):
        raise _bad("moe_router_load_balancing_type", f"one of {', '.join(dom)} (or a list of them)", value)
    return "sinkhorn" if "sinkhorn" in items else items[0]


def _version(key: str, value) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _bad(f"versions.{key}", "a version string or null", value)
    text = str(value)
    if not _VERSION_RE.match(text):
        raise _bad(f"versions.{key}", "a version such as 2.12.0", value)
    return version_int(text)


def _frontend_of(data: dict, frontend: str | None) -> tuple[str, str]:
    if frontend is not None:
        if frontend not in FRONTEND_WORDS:
            raise UnusableInput(f"--frontend: expected one of {', '.join(K.FRONTENDS)}, got {frontend!r}")
        return FRONTEND_WORDS[frontend], "given: --frontend"
    if "frontend" in data:
        value = data["frontend"]
        if not isinstance(value, str) or value not in FRONTEND_WORDS:
            raise _bad("frontend", f"one of {', '.join(K.FRONTENDS)}", value)
        return FRONTEND_WORDS[value], "given: frontend key"
    return infer_frontend(data)


def _lm_aliases(data: dict, lines: dict) -> dict:
    """Megatron-LM dests that name a megatron-core field differently, under the megatron-core name."""
    out = dict(data)
    for alias, name in LM_ALIASES.items():
        if alias in out:
            if name in out and out[name] != out[alias]:
                raise UnusableInput(f"{alias} and {name} are the same setting with different values")
            out[name] = out.pop(alias)
            if alias in lines:
                lines.setdefault(name, lines[alias])
    if out.get("recompute_activations") is True and "recompute_granularity" not in out:
        out["recompute_granularity"] = "selective"
        lines.setdefault("recompute_granularity", lines.get("recompute_activations", 0))
    return out


def read(data: dict, lines: dict | None = None, frontend: str | None = None) -> Config:
    lines = dict(lines or {})
    frontend, frontend_reason = _frontend_of(data, frontend)
    if _bridge_layout(data):
        data, flat_lines = _flatten_bridge(data, lines)
        lines.update(flat_lines)
    data = _lm_aliases(data, lines)
    env: dict = {}
    given: dict = {}
    display: dict = {}
    findings: list[Finding] = []
    mf = megatron_fields()

    # --- platform facts from gpu / versions
    for key in K.FACT_BY_FIELD:
        env[key] = UNKNOWN
    versions = data.get("versions", {})
    if versions is None:
        versions = {}
    if not isinstance(versions, dict):
        raise _bad("versions", "a mapping {torch, transformer_engine, megatron_core}", versions)
    for key, value in versions.items():
        if key not in VERSION_KEYS:
            raise UnusableInput(f"versions.{key}: unknown package (expected {', '.join(VERSION_KEYS)})")
        env[key] = _version(key, value)
        display[key] = "None" if value is None else str(value)
    if versions.get("transformer_engine", "") is None and isinstance(env.get("megatron_core"), int) \
            and env["megatron_core"] >= version_int("0.19.0"):
        display["transformer_engine"] = "0.0.0"  # megatron-core 0.19's get_te_version() without TE
    if "gpu" in data:
        gpu = data["gpu"]
        if gpu is None:
            env.update(device="cpu", gpu_major=0, gpu_product="none")
            display["gpu_name"] = "None"
        elif isinstance(gpu, dict):
            extra = set(gpu) - {"name", "compute_capability"}
            if extra:
                raise UnusableInput(f"gpu: unknown keys {sorted(extra)} (expected name, compute_capability)")
            env["device"] = "cuda"
            name = gpu.get("name")
            if name is not None:
                if not isinstance(name, str):
                    raise _bad("gpu.name", "a string", name)
                env["gpu_product"] = K.gpu_product(name)
                display["gpu_name"] = name
                if env["gpu_product"] in GPU_MAJOR:
                    env["gpu_major"] = GPU_MAJOR[env["gpu_product"]]
            cc = gpu.get("compute_capability")
            if cc is not None:
                if isinstance(cc, bool) or not re.match(r"^\d+(\.\d+)?$", str(cc)):
                    raise _bad("gpu.compute_capability", 'a version such as "9.0"', cc)
                env["gpu_major"] = int(str(cc).split(".")[0])
        else:
            raise _bad("gpu", "a mapping {name, compute_capability} or null", gpu)

    # --- fields
    mcore = env["megatron_core"]
    version_fields = _fields_for(mcore) if isinstance(mcore, int) and mcore else None
    known = known_names()
    for key, value in data.items():
        if key in OWN_KEYS:
            continue
        if key in K.FACT_BY_FIELD:
            fact = K.FACT_BY_FIELD[key]
            if fact.kind == "version":
                raise UnusableInput(f"{key}: give package versions under versions:")
            env[key] = _coerce(fact, value)
            given[key] = value
            continue
        if key in ("cuda_graph_modules", "cuda_graph_scope"):
            given[key] = value
            env[key] = _graph_modules(key, value)
        elif key == "moe_layer_freq":
            given[key] = value
            env[key] = _layer_freq(value)
        elif key == "moe_router_load_balancing_type":
            given[key] = value
            env[key] = _load_balancing(value)
        elif key in K.BY_FIELD:
            given[key] = value
            env[key] = _coerce(K.BY_FIELD[key], value)
        elif key in known:
            given[key] = value
        else:
            close = difflib.get_close_matches(key, sorted(known - set(OWN_KEYS)), n=3, cutoff=0.75)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            findings.append(Finding(
                "LINT_UNKNOWN_FIELD", "warning",
                f"unknown field '{key}' (not a megatron-core, Megatron-LM or moeforge name){hint}",
                None, [key], source="compiler/data/megatron_fields.json", line=lines.get(key, 0),
                fix=f"rename it to {close[0]}" if close else "remove it"))
            continue
        if version_fields and key in mf["all"] and key not in version_fields[1] and key not in K.FACT_BY_FIELD:
            present = [v for v, names in mf["versions"].items() if key in names]
            findings.append(Finding(
                "LINT_FIELD_NOT_IN_VERSION", "warning",
                f"megatron-core {version_fields[0]} has no field '{key}'"
                + (f" (it exists in {', '.join(present)})" if present else ""),
                f"__init__() got an unexpected keyword argument '{key}'", [key],
                origin="megatron-core", source="compiler/data/megatron_fields.json", line=lines.get(key, 0),
                fix="use the spelling of the declared megatron-core version"))

    # --- defaults for what was not given
    for k in K.KNOBS:
        if k.field in env:
            continue
        if k.field in mf["all"] or k.field in ("bf16", "fp16"):
            required = k.kind == "int" and k.default is None
            env[k.field] = UNKNOWN if required else k.default_for(frontend)
        elif k.field in NON_MCORE_DEFAULTS:
            env[k.field] = NON_MCORE_DEFAULTS[k.field]
        else:
            env[k.field] = UNKNOWN

    _normalise(env, given, findings, lines, mcore)
    _derive(env)
    if frontend == "megatron-lm" and _known_int(data.get("num_layers_per_virtual_pipeline_stage")) \
            and env.get("virtual_pipeline_model_parallel_size") is None:
        per, layers, pp = data["num_layers_per_virtual_pipeline_stage"], env.get("num_layers"), \
            env.get("pipeline_model_parallel_size")
        if _known_int(layers, pp) and per and pp:
            vpp = layers // pp // per
            env["virtual_pipeline_model_parallel_size"] = vpp if vpp != 1 else None
    written = dict(env)
    rewrites = _frontend_rewrites(env, given, frontend)
    if rewrites:
        _derive(env)
    display.update(_display(env, display))
    return Config(env, given, lines, display, findings, frontend, frontend_reason, written, rewrites)


def _normalise(env: dict, given: dict, findings: list, lines: dict, mcore) -> None:
    # cuda_graph_scope (0.16-0.17 name, deprecated from 0.18) -> cuda_graph_modules
    if "cuda_graph_scope" in given:
        scope = env.get("cuda_graph_scope")
        if "cuda_graph_modules" in given and given["cuda_graph_modules"] not in (None, [], "full"):
            if scope not in (None, []):
                findings.append(Finding(
                    "LINT_CUDA_GRAPH_SCOPE_AND_MODULES", "error",
                    "cuda_graph_scope (the old name) and cuda_graph_modules are both set", 
                    "cuda_graph_scope and cuda_graph_modules cannot be set together.",
                    ["cuda_graph_scope", "cuda_graph_modules"], origin="megatron-core",
                    source="megatron-core transformer/transformer_config.py (0.18+)",
                    line=lines.get("cuda_graph_scope", 0), fix="keep only cuda_graph_modules"))
        else:
            env["cuda_graph_modules"] = scope
    # megatron-core 0.19 migrates the deprecated module name full_iteration (impl none/local) to
    # cuda_graph_impl="full_iteration" (transformer/cuda_graph_config.py)
    modules = env.get("cuda_graph_modules")
    if isinstance(mcore, int) and mcore >= version_int("0.19.0") and isinstance(modules, list) \
            and "full_iteration" in modules and env.get("cuda_graph_impl") in ("none", "local") \
            and not env.get("enable_cuda_graph") and not env.get("external_cuda_graph"):
        env["cuda_graph_impl"] = "full_iteration"
        env["cuda_graph_modules"] = [m for m in modules if m != "full_iteration"]
    # deprecated SM counts, routed the way megatron-core 0.19 routes them
    if env.get("moe_flex_dispatcher_num_sms") is None:
        deprecated = {n: env.get(n) for n in ("moe_deepep_num_sms", "moe_hybridep_num_sms")
                      if isinstance(env.get(n), int)}
        backend = env.get("moe_flex_dispatcher_backend")
        if isinstance(mcore, int) and mcore and mcore < version_int("0.19.0"):
            per_backend = {"deepep": "moe_deepep_num_sms", "hybridep": "moe_hybridep_num_sms"}.get(backend)
            if per_backend in deprecated:
                env["moe_flex_dispatcher_num_sms"] = deprecated[per_backend]
        elif deprecated and len(set(deprecated.values())) == 1:
            env["moe_flex_dispatcher_num_sms"] = next(iter(deprecated.values()))


def _known_int(*values) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _derive(env: dict) -> None:
    world = env.get("world_size")
    if world is UNKNOWN or world is None:
        nodes, per = env.get("num_nodes"), env.get("gpus_per_node")
        world = nodes * per if _known_int(nodes, per) else UNKNOWN
        env["world_size"] = world
    tp, cp, pp = (env.get(k) for k in ("tensor_model_parallel_size", "context_parallel_size",
                                        "pipeline_model_parallel_size"))
    ep, etp = env.get("expert_model_parallel_size"), env.get("expert_tensor_parallel_size")
    if world is UNKNOWN:  # keep a data-parallel size the configuration states itself
        for key in ("data_parallel_size", "expert_data_parallel_size"):
            if env.get(key) is None:
                env[key] = UNKNOWN
        return
    env["data_parallel_size"] = UNKNOWN
    env["expert_data_parallel_size"] = UNKNOWN
    if _known_int(world, tp, cp, pp) and tp * cp * pp and world % (tp * cp * pp) == 0:
        env["data_parallel_size"] = world // (tp * cp * pp)
    etp_eff = tp if etp is None else etp
    if _known_int(world, etp_eff, ep, pp) and etp_eff * ep * pp and world % (etp_eff * ep * pp) == 0:
        env["expert_data_parallel_size"] = world // (etp_eff * ep * pp)


def _show(v) -> str:
    return "None" if v is None else str(v)


def _display(env: dict, display: dict) -> dict:
    out = {}
    for key, value in env.items():
        if value is UNKNOWN or key in display:
            continue
        out[key] = _show(value)
    g = env.get
    tp, cp, pp = g("tensor_model_parallel_size"), g("context_parallel_size"), g("pipeline_model_parallel_size")
    if _known_int(tp, cp, pp):
        out["model_size"] = str(tp * cp * pp)
    etp = g("expert_tensor_parallel_size")
    etp = tp if etp is None else etp
    if _known_int(etp):
        out["etp"] = str(etp)
    if _known_int(etp, g("expert_model_parallel_size"), pp):
        out["expert_tensor_model_pipeline_parallel_size"] = str(etp * g("expert_model_parallel_size") * pp)
    if _known_int(g("num_layers"), pp) and pp:
        out["num_layers_per_pipeline_rank"] = str(g("num_layers") // pp)
    deprecated = {n: g(n) for n in ("moe_deepep_num_sms", "moe_hybridep_num_sms") if _known_int(g(n))}
    out["deprecated_num_sms"] = str(deprecated)
    modules = g("cuda_graph_modules")
    out["cuda_graph_scopes_msg"] = f" with scopes {modules}" if isinstance(modules, list) and modules else ""
    return out
