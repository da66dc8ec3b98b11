"""What each front-end (megatron-core, Megatron-LM, Megatron-Bridge) does before megatron-core.

Why: one configuration gets different verdicts depending on who reads it.  This module decides
the front-end (given, or inferred from the names used), reads its layout (a Bridge
ConfigContainer's sections, Megatron-LM's aliases and per-stage VPP) as flat megatron-core
fields, and applies the rewrites the front-end makes silently, each with its reason.
"""
from __future__ import annotations

from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.fields import BRIDGE_PROVIDER_FIELDS, LM_ALIASES, NEUTRAL_NAMES, lm_names
from moeforge.compiler.knobs.layout import LayoutError, vpp_from_layers_per_virtual_stage
from moeforge.compiler.lint.values import UnusableInput, wrong_type
from moeforge.compiler.rules.display import known_int
from moeforge.compiler.rules.expr import UNKNOWN

# Megatron-Bridge: the sections of a ConfigContainer (nested mappings or dotted keys such as
# comm_overlap.overlap_p2p_comm).
BRIDGE_SECTIONS = ("model", "comm_overlap", "ddp", "train", "optimizer", "mixed_precision", "dataset",
                   "checkpoint", "logger", "scheduler", "rng", "tokenizer", "dist", "validation",
                   "rerun_state_machine")
FRONTEND_WORDS = {"megatron-core": "megatron-core", "mcore": "megatron-core", "megatron-lm": "megatron-lm",
                  "mlm": "megatron-lm", "bridge": "bridge", "megatron-bridge": "bridge"}


def bridge_layout(data: dict) -> list[str]:
    """The keys that mark a Megatron-Bridge ConfigContainer (sections, or dotted section keys); empty for a flat one."""
    return [k for k in data if (k in BRIDGE_SECTIONS and isinstance(data[k], (dict, str)) and k != "frontend")
            or ("." in k and k.split(".", 1)[0] in BRIDGE_SECTIONS)]


def infer_frontend(data: dict) -> tuple[str, str]:
    """(front-end, why) from the names a mapping uses."""
    nested = bridge_layout(data)
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


def flatten_bridge(data: dict, lines: dict) -> tuple[dict, dict]:
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


def frontend_rewrites(env: dict, given: dict, frontend: str) -> list:
    """Apply what the front-end changes before megatron-core's TransformerConfig sees the values.

    Megatron-Bridge 0.6.2 (ConfigContainer.runtime_config_update: CommOverlapConfig.setup, then
    TransformerConfig.finalize): TP overlap dropped without TP >= 2 / SP / TE; PP > 1 with VPP > 1
    -> overlap_p2p_comm (unless given); DP > 1 with the distributed optimizer -> grad-reduce and
    param-gather overlap (unless given); SP off with TP = 1; ETP = 1 when EP > 1 and ETP unset;
    flex without a backend -> alltoall; gradient accumulation fusion on when TE is installed.
    Megatron-LM 0.19 (validate_args): SP off with TP = 1; no VPP -> overlap_p2p_comm off;
    te_rng_tracker on with CUDA graphs; variable_seq_lengths off; bias-activation fusion off without
    linear bias unless SwiGLU.
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
        if "overlap_p2p_comm" not in given and known_int(pp):
            interleaved = pp > 1 and known_int(vpp) and vpp > 1
            _set(env, rw, "overlap_p2p_comm", interleaved,
                 f"{cc}: {'PP > 1 with VPP' if interleaved else 'not the interleaved schedule'}")
        if _true(g("use_distributed_optimizer")):
            dp = g("data_parallel_size")
            value = UNKNOWN if dp is UNKNOWN or dp is None else dp > 1
            for name in ("overlap_grad_reduce", "overlap_param_gather"):
                if name not in given:
                    _set(env, rw, name, value, f"{cc}: DP > 1 with the distributed optimizer")
        if "gradient_accumulation_fusion" not in given:
            te, apex = g("transformer_engine"), g("apex_installed") is True
            _set(env, rw, "gradient_accumulation_fusion", UNKNOWN if te is UNKNOWN and not apex else apex or te > 0,
                 "Megatron-Bridge GPTModelProvider: on when Transformer Engine or APEX is installed")
        if g("moe_token_dispatcher_type") == "flex" and g("moe_flex_dispatcher_backend") is None:
            _set(env, rw, "moe_token_dispatcher_type", "alltoall",
                 "Megatron-Bridge validate_flex_dispatcher_backend: flex without a backend")
        if _true(g("sequence_parallel")) and known_int(tp) and tp <= 1:
            _set(env, rw, "sequence_parallel", False, "Megatron-Bridge TransformerConfig.finalize: TP = 1")
        if g("expert_tensor_parallel_size") is None and known_int(ep) and ep > 1:
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
        if _true(g("bias_activation_fusion")) and g("add_bias_linear") is False \
                and not (g("activation_func") == "silu" and _true(g("gated_linear_unit"))):
            _set(env, rw, "bias_activation_fusion", False, f"{va}: no linear bias (--bias-gelu-fusion)")
        if "variable_seq_lengths" in given:
            _set(env, rw, "variable_seq_lengths", False, f"{va}: always False")
    return rw


def validate_args_rewrites(env: dict, given: dict) -> list:
    """Megatron-LM's validate_args rewrites of a flat megatron-core env (for `moeforge import`, which reads a
    launch as Megatron-LM runs it): [(field, before, after, why)]; env is changed in place."""
    return frontend_rewrites(env, given, "megatron-lm")


def frontend_of(data: dict, frontend: str | None) -> tuple[str, str]:
    """(front-end, why): --frontend wins over a frontend: key, then a launch's own, then what the names imply."""
    if frontend is not None:
        if frontend not in FRONTEND_WORDS:
            raise UnusableInput(f"--frontend: expected one of {', '.join(K.FRONTENDS)}, got {frontend!r}")
        return FRONTEND_WORDS[frontend], "given: --frontend"
    if "frontend" in data:
        value = data["frontend"]
        if not isinstance(value, str) or value not in FRONTEND_WORDS:
            raise wrong_type("frontend", f"one of {', '.join(K.FRONTENDS)}", value)
        return FRONTEND_WORDS[value], "given: frontend key"
    launch = data.get("launch")
    if isinstance(launch, dict) and launch.get("frontend"):
        return launch["frontend"], launch["why"]
    return infer_frontend(data)


def lm_aliases(data: dict, lines: dict) -> dict:
    """Megatron-LM dests that name a megatron-core field differently, under the megatron-core name."""
    out = dict(data)
    for alias, name in LM_ALIASES.items():
        if alias in out:
            if name in out and out[name] != out[alias]:
                raise UnusableInput(f"{alias} and {name} are the same setting with different values")
            out[name] = out.pop(alias)
            if alias in lines:
                lines.setdefault(name, lines[alias])
    for flag, (func, gated) in K.LM_ACTIVATIONS.items():
        if out.get(flag) is True and "activation_func" not in out:
            out["activation_func"] = func
            lines.setdefault("activation_func", lines.get(flag, 0))
            if gated:
                out.setdefault("gated_linear_unit", True)
    if out.get("recompute_activations") is True and "recompute_granularity" not in out:
        out["recompute_granularity"] = "selective"
        lines.setdefault("recompute_granularity", lines.get("recompute_activations", 0))
    return out


def lm_virtual_pipeline(env: dict, data: dict, frontend: str) -> None:
    """Megatron-LM's num_layers_per_virtual_pipeline_stage as the VPP size megatron-core reads."""
    if frontend == "megatron-lm" and known_int(data.get("num_layers_per_virtual_pipeline_stage")) \
            and env.get("virtual_pipeline_model_parallel_size") is None:
        per, layers, pp = data["num_layers_per_virtual_pipeline_stage"], env.get("num_layers"), \
            env.get("pipeline_model_parallel_size")
        if known_int(layers, pp):
            try:
                env["virtual_pipeline_model_parallel_size"] = vpp_from_layers_per_virtual_stage(
                    layers, pp, per, env.get("account_for_embedding_in_pipeline_split") is True,
                    env.get("account_for_loss_in_pipeline_split") is True)
            except LayoutError:
                pass  # Megatron-LM refuses the numbers; the layout rules say why
