"""Megatron-Bridge overrides for a plan, from the one table's Bridge paths (moeforge.compiler.knobs.table).

Hydra-style `key=value` lines that give a Bridge recipe the plan's values whatever the recipe itself
holds: config nodes whose setup would overwrite the plan are rebuilt or cleared first, each value is set
where megatron-core reads it, and a plan value without a Bridge home is a note saying why.
tests/fidelity/bridge_judge.py applies them to Bridge's own recipes and validates the result.
"""
from __future__ import annotations

import json
import re

from moeforge.compiler.knobs import table as K
from moeforge.compiler.solver.inputs import ENV_VAR
from moeforge.compiler.targets.megatron_args import RUNTIME_ONLY, SECTIONS, knob_index
from moeforge.compiler.knobs.versions import version_int

# Where a plan field without a Bridge path of its own lives in Bridge's ConfigContainer.
BRIDGE_SECTIONS = {"tc": "model.{}", "model": "model.{}", "ddp": "ddp.{}", "optimizer": "optimizer.{}"}
# Plan fields outside the knob table whose Bridge home is not model.<name> / ddp.<name> / optimizer.<name>.
BRIDGE_FIELD_PATHS = {"params_dtype": "mixed_precision.params_dtype",
                      "pipeline_dtype": "mixed_precision.pipeline_dtype",
                      "autocast_dtype": "mixed_precision.autocast_dtype"}
# Bridge config nodes rebuilt from scratch, first (Hydra applies overrides in order), so the result does not
# depend on what the Bridge recipe put there; then values that are not plan values but keep a recipe's own
# settings from overriding the plan's.
BRIDGE_RESETS = (
    # runtime_config_update runs MixedPrecisionConfig.setup, which overwrites the dtype, fp8/fp4 fields of the
    # model, optimizer and DDP; a recipe holds either a config or a recipe name (a string takes no fields).
    ("mixed_precision", "null"),
    ("++mixed_precision._target_", "megatron.bridge.training.mixed_precision.MixedPrecisionConfig"),
    # CommOverlapConfig.setup overwrites the model's and DDP's overlap fields with its own defaults (p2p overlap
    # by VPP, EP overlap and delayed wgrad off, a 128 MiB DDP bucket when DP > 1) and cannot say "megatron-core's
    # default bucketing"; the plan states each value, so they are set where megatron-core reads them.
    ("comm_overlap", "null"),
)
BRIDGE_FIXED = (
    # deprecated aliases (recipes set them): megatron-core refuses cuda_graph_scope with cuda_graph_modules, and
    # routes a *_num_sms into moe_flex_dispatcher_num_sms when the plan leaves that unset
    ("model.cuda_graph_scope", "null"),
    ("model.moe_deepep_num_sms", "null"),
    ("model.moe_hybridep_num_sms", "null"),
    # GPTModel gets the plan's vocab_size as is (no padding to make_vocab_size_divisible_by x TP)
    ("model.should_pad_vocab", "false"),
    # GPTDatasetConfig.finalize reads dataset.data_path only when blend is None: a recipe's own blend never
    # stands in for the plan's data (data.paths / data.blend are written as dataset.data_path)
    ("dataset.blend", "null"),
    # one constant weight decay (the plan's, written as scheduler.start/end_weight_decay) and a warmup from zero:
    # Megatron-LM's defaults, whatever the recipe's scheduler holds
    ("scheduler.weight_decay_incr_style", '"constant"'),
    ("scheduler.lr_warmup_init", "0.0"),
)


TORCH_DTYPE = "{_target_:torch.%s,_call_:false}"  # Hydra: instantiate returns the dtype object itself
# A recipe's ${VAR} is resolved at launch; in an override list it is OmegaConf's environment resolver (a bare
# ${VAR} would be an interpolation of a config key Bridge does not have)
BRIDGE_ENV = "${oc.env:%s}"


def dtype_in_override(raw: str) -> str | None:
    """The torch dtype's name an override value writes as TORCH_DTYPE (None: it writes none)."""
    match = re.fullmatch(re.escape(TORCH_DTYPE).replace("%s", r"(\w+)"), raw.strip())
    return match.group(1) if match else None


def recipe_variables(raw: str) -> str:
    """An override value's BRIDGE_ENV references as the recipe's ${VAR}s (the import reads them back)."""
    return re.sub(re.escape(BRIDGE_ENV).replace("%s", r"(\w+)"), r"${\1}", raw)


def _bridge_value(path: str, value) -> str:
    """An override value: JSON, except torch dtypes (the precision's, the optimizer's main grads / params and
    moments), which Bridge's configs hold as torch.dtype objects."""
    if path.startswith(("mixed_precision.", "optimizer.")) and value in K.DTYPE_NAMES:
        return TORCH_DTYPE % value
    return json.dumps(_from_environment(value))


def _from_environment(value):
    """A path's ${VAR}s as BRIDGE_ENV (strings and lists of them)."""
    if isinstance(value, str):
        return ENV_VAR.sub(lambda m: BRIDGE_ENV % m.group(1), value)
    if isinstance(value, list):
        return [_from_environment(v) for v in value]
    return value


def _bridge_not_written(plan: dict, name: str, value) -> str | None:
    """Why a plan value has no Bridge override (None: it has one)."""
    if name == "max_sequence_length":
        ptype = plan["model"].get("position_embedding_type")
        effect = ("with learned_absolute positions the position table has model.seq_length rows"
                  if ptype == "learned_absolute" else f"with {ptype} positions it sizes no weights")
        return (f"Bridge's GPTModelProvider passes model.seq_length "
                f"({plan['training'].get('seq_length')}) as GPTModel's max_sequence_length and has no field "
                f"for it; {effect}")
    mla = plan["transformer_config"].get("multi_latent_attention")
    if K.VARIANT_ONLY.get(name) == "multi_latent_attention" and not mla:
        return "only multi-latent attention reads it (off here); Bridge's GPTModelProvider has no such field"
    return None


def training_io(plan: dict, mcore: int) -> dict:
    """Bridge path -> value for the training-I/O sections (knobs.IO_SECTIONS) and the distributed backend,
    from each knob's Bridge path. Every value is stated (null included), so a Bridge recipe's own data,
    checkpoint, schedule or logging settings never stand in for the plan's. data.paths / blend / split are
    written for an indexed dataset only (dataset.data_path null otherwise: Bridge's mock data);
    data.blend is Megatron's --data-path list (W1 P1 W2 P2 ...); checkpoint.load auto is the save
    directory, none is null; checkpoint.scheduler is scheduler's two switches; a save directory brings the
    exit-signal handler on the launchers' signal."""
    index = knob_index(mcore)
    out: dict = {}
    data, ckpt = plan["data"], plan["checkpoint"]
    for section in K.IO_SECTIONS:
        for name, value in (plan.get(section) or {}).items():
            knob = index.get((section, name))
            if knob is None or not knob.bridge_paths:
                continue  # plan.runtime's own fields, data.kind and data.env_vars: nothing of Bridge's
            if section == "data" and name in ("paths", "blend", "split") and data["kind"] != "indexed":
                continue
            if (section, name) == ("data", "blend"):
                if value is None:
                    continue  # data.paths (or null) is dataset.data_path
                value = [str(v) for e in value for v in (e["weight"], e["path"])]
            elif (section, name) == ("data", "paths") and value is None and data["blend"] is not None:
                continue
            elif (section, name) == ("checkpoint", "load"):
                value = ckpt["save"] if value == "auto" else None if value == "none" else value
            for path in knob.bridge_paths:
                out[path] = knob.megatron_value(value)
    if data["kind"] != "indexed":
        out[index[("data", "paths")].bridge_paths[0]] = None  # Bridge's mock dataset (no blend)
    if ckpt["async"]:  # Bridge's own default is already true; stated with the async save it serves
        out.update((path, True) for path in K.knob("use_persistent_ckpt_worker").bridge_paths)
    for value, switch in K.RESUME_SCHEDULERS.items():
        if switch:
            out.update((path, ckpt["scheduler"] == value) for path in K.knob(switch).bridge_paths)
    saves = ckpt["save"] is not None
    for field, value in (("exit_signal_handler", saves),
                         ("exit_signal", K.EXIT_SIGNAL if saves else K.knob("exit_signal").default)):
        out.update((path, value) for path in K.knob(field).bridge_paths)
    nan_check = plan["ddp_config"]["check_for_nan_in_grad"]
    out.update((path, nan_check) for path in K.knob("check_for_nan_in_loss_and_grad").bridge_paths)
    backend = K.FACT_BY_FIELD["distributed_backend"]
    out.update((path, plan["platform"].get("distributed_backend") or backend.default) for path in backend.bridge_paths)
    return out


def bridge_overrides(plan: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """Megatron-Bridge overrides (Hydra-style key=value, values as JSON) from the table's Bridge paths, in the
    order Hydra must apply them, and a note for each plan value that has none.

    A knob's `bridge` may name several paths when Bridge keeps the value in more than one
    config (megatron-core reads delay_wgrad_compute from both the model and the DDP config). Table knobs the
    plan is silent on are written at megatron-core's default, so a Bridge recipe's own value does not stand
    in for it. Paths under mixed_precision are written with `++`: that node is rebuilt from scratch."""
    mcore = version_int(plan["platform"]["software"]["megatron_core"])
    index = knob_index(mcore)
    out, notes = {}, []

    def put(paths: tuple, value) -> None:
        for path in paths:
            out[path] = _bridge_value(path, value)

    for plan_key, section in SECTIONS:
        for name, value in (plan.get(plan_key) or {}).items():
            knob = index.get((section, name))
            fallback = BRIDGE_FIELD_PATHS.get(name) or BRIDGE_SECTIONS.get(section, "{}").format(name)
            paths = knob.bridge_paths if knob else (fallback,)
            if section == "training" and knob is None:
                paths = ()  # moeforge's runtime fields (micro-batch count, report window, data kind)
            why = _bridge_not_written(plan, name, value)
            if why:
                notes.append(f"{name}={json.dumps(value)}: {why}")
            elif not paths:
                if name not in RUNTIME_ONLY:
                    notes.append(f"{name}={json.dumps(value)}: no Megatron-Bridge override path")
            else:
                put(paths, value)
    stated = {name for plan_key, _ in SECTIONS for name in (plan.get(plan_key) or {})}
    tc = plan["transformer_config"]
    for (section, name), knob in index.items():
        if section in ("tc", "model", "yarn") and name not in stated and knob.bridge_paths \
                and (name not in K.VARIANT_ONLY or tc.get(K.VARIANT_ONLY[name])):
            put(knob.bridge_paths, knob.default_for("megatron-core"))
    # the layer spec the runtime builds: Transformer Engine's, or the local one (a platform without TE)
    put(("model.transformer_impl",), plan["runtime"]["transformer_impl"])
    for path, value in training_io(plan, mcore).items():
        put((path,), value)
    for path, value in BRIDGE_FIXED:
        out.setdefault(path, value)
    plus = lambda p: "++" + p if p.startswith("mixed_precision.") else p  # noqa: E731
    return list(BRIDGE_RESETS) + sorted((plus(p), v) for p, v in out.items()), sorted(notes)
