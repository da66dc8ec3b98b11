"""Reading a flat Megatron configuration the way megatron-core reads it, for lint-config.

Parses YAML/JSON with line numbers, coerces each field to its knob kind (clear UnusableInput
errors otherwise), maps the deprecated spellings (cuda_graph_scope, the per-backend SM counts,
a list-valued moe_layer_freq) onto the canonical knobs, reads the `gpu:` and `versions:` keys
into platform facts, and marks what nobody can know as UNKNOWN.  Which names exist is
compiler/knobs/fields.py, the type checks are values.py, what each front-end does is frontends.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from moeforge.compiler.bounded import parse_json
from moeforge.compiler.diagnostics import Diagnostic, finding
from moeforge.compiler.knobs import layout as L
from moeforge.compiler.knobs import pipeline_layout
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.fields import OWN_KEYS, did_you_mean, fields_for, known_names, megatron_fields
from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.launch_reader.kinds import what_it_is
from moeforge.compiler.lint.frontends import (bridge_layout, flatten_bridge, frontend_of, frontend_rewrites, lm_aliases,
                                     lm_virtual_pipeline)
from moeforge.compiler.lint.launch import VERSION_KEYS, knob_of_dest, launch_mapping
from moeforge.compiler.lint.values import (UnusableInput, coerce, read_graph_modules, read_layer_freq, read_load_balancing,
                                  read_version, wrong_type)
from moeforge.compiler.recipe.yaml_nodes import YamlLoader  # YAML 1.2 exponent floats (lr: 3e-4), as in recipes
from moeforge.compiler.rules import CATALOGUE
from moeforge.compiler.rules.display import known_int, shown_values
from moeforge.compiler.rules.expr import UNKNOWN
from moeforge.compiler.solver.inputs import flat_config_facts
from moeforge.compiler.targets.megatron_args import lm_parser

GPU_MAJOR = {"A100": 8, "H100": 9, "H200": 9, "B100": 10, "B200": 10, "B300": 10, "GB200": 10, "GB300": 10}
# knobs that are not TransformerConfig fields but whose "not given" value is known (the optimizer's precision:
# OptimizerConfig's defaults, which Megatron-LM's arguments share)
NON_MCORE_DEFAULTS = {"use_megatron_fsdp": False, "global_batch_size": None,
                      "hybridep_ranks_per_nvlink_domain": None, "check_for_nan_in_loss_and_grad": True,
                      **{f: K.BY_FIELD[f].default for f in K.OPTIMIZER_PRECISION}}
SEVERITY_ORDER = {"error": 0, "warning": 1, "advice": 2, "info": 3}


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
    launch: dict = field(default_factory=dict)    # a launch's own context (compiler/lint/launch.py context)

    @property
    def inference(self) -> bool:
        """An inference launch: rules only a training run meets (training_only) are skipped."""
        return self.launch.get("mode") == "inference"


# ----------------------------------------------------------------------- reading

def parse(text: str, name: str = "<config>") -> tuple[dict, dict]:
    """The mapping and the 1-based line of each top-level key. UnusableInput when it is not one."""
    lines: dict = {}
    if name == "-" and text.lstrip().startswith("{"):
        name = "-.json"  # JSON on stdin
    launch = launch_mapping(text, name)
    if launch is not None:
        return launch
    if _shell_like(text):  # a script or fragment in which no command runs an entry point, not a mapping

        raise UnusableInput(f"no launch command found: {what_it_is(text, name)}")
    try:
        if name.endswith(".json"):
            data = parse_json(text)
        else:
            loader = YamlLoader(text)
            try:
                node = loader.get_single_node()
                data = loader.construct_document(node) if node is not None else None
            finally:
                loader.dispose()
            if isinstance(node, yaml.MappingNode):
                for k, _ in node.value:
                    if isinstance(k, yaml.ScalarNode):
                        lines.setdefault(k.value, k.start_mark.line + 1)
    except (yaml.YAMLError, ValueError) as exc:  # bounded.Unreadable is a ValueError
        kind = "JSON" if name.endswith(".json") else "YAML"
        raise UnusableInput(f"cannot parse {kind}: {one_line(exc)}") from None
    except RecursionError:
        raise UnusableInput("cannot parse YAML: nested too deeply") from None
    if not isinstance(data, dict):
        raise UnusableInput(f"expected a mapping of Megatron field names, got {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise UnusableInput(f"field names must be strings, got {key!r}")
    if name.endswith(".json"):  # JSON is YAML: positions are best effort
        try:
            node = yaml.compose(text, Loader=YamlLoader)
            if isinstance(node, yaml.MappingNode):
                for k, _ in node.value:
                    lines.setdefault(k.value, k.start_mark.line + 1)
        except yaml.YAMLError:
            pass
    return data, lines


_SHELL_LINE = re.compile(r"^\s*(#!|(export|declare|local|readonly)\s+\w|[A-Za-z_]\w*(\+?=\(|\+?=[^\s=:]|=$))", re.M)


def _shell_like(text: str) -> bool:
    """A shell script or fragment (a shebang, or assignments `A=1`, `export A`, `ARGS=(`), which a YAML mapping
    of Megatron names never has at the start of a line."""
    return _SHELL_LINE.search(text) is not None


def _lm_flag_names(data: dict, lines: dict) -> dict:
    """Megatron-LM argument names as written on a command line (--num-layers, num-layers), and its flags that
    set another dest (--no-masked-softmax-fusion, --disable-bias-linear, --fp8-format), under the dest and
    with the value the dest receives; then the dests the knob table names differently, under the field."""
    options = lm_parser()["options"]
    out: dict = {}

    def put(key, value, original):
        if key in out and out[key] != value:
            raise UnusableInput(f"{original} and {key} are the same setting with different values")
        out[key] = value
        if original in lines:
            lines.setdefault(key, lines[original])

    for key, value in data.items():
        if key in OWN_KEYS or not isinstance(key, str):
            out[key] = value
            continue
        bare = key.lstrip("-")
        flag = "--" + bare.replace("_", "-")
        entry = options.get(flag)
        name = bare.replace("-", "_")
        if name in K.BY_FIELD or name in megatron_fields()["all"]:
            entry = None  # a megatron-core / knob name: read as that field (cuda_graph_scope stays itself)
        if entry is not None and (entry["dest"] != name or key != name):
            if entry["kind"] == "store_false" and isinstance(value, bool):
                value = not value
            name = entry["dest"]
        if entry is None and name not in known_names():
            name = key  # unknown: reported as written (its did-you-mean reads the underscored name)
        elif name == "no_persist_layer_norm" and isinstance(value, bool):
            name, value = "persist_layer_norm", not value
        elif name in ("bias_swiglu_fusion", "bias_gelu_fusion"):
            name = "bias_activation_fusion"
        else:
            k = knob_of_dest(name)
            if k is not None and k.field != name and name not in K.BY_FIELD and k.section not in K.IO_SECTIONS \
                    and not isinstance(k.lm, tuple) and k.field not in ("data_kind",):
                name = k.field
        put(name, value, key)
    return out


def one_line(exc: Exception) -> str:
    """A parser's multi-line message on one line, so an UnusableInput stays one line."""
    return " ".join(str(exc).split())


def read(data: dict, lines: dict | None = None, frontend: str | None = None) -> Config:
    """Read a flat (or Bridge-nested) mapping into the rules' env, with its front-end, given values and lines."""
    lines = dict(lines or {})
    frontend, frontend_reason = frontend_of(data, frontend)
    if bridge_layout(data):
        data, flat_lines = flatten_bridge(data, lines)
        lines.update(flat_lines)
    data = lm_aliases(_lm_flag_names(data, lines), lines)
    env: dict = {}
    given: dict = {}
    display: dict = {}
    findings: list[Diagnostic] = []
    mf = megatron_fields()

    # --- platform facts from gpu / versions
    for key in K.FACT_BY_FIELD:
        env[key] = UNKNOWN
    versions = data.get("versions", {})
    if versions is None:
        versions = {}
    if not isinstance(versions, dict):
        raise wrong_type("versions", "a mapping {torch, transformer_engine, megatron_core}", versions)
    for key, value in versions.items():
        if key not in VERSION_KEYS:
            raise UnusableInput(f"versions.{key}: unknown package (expected {', '.join(VERSION_KEYS)})")
        env[key] = read_version(key, value)
        display[key] = "None" if value is None else str(value)
    if versions.get("transformer_engine", "") is None and isinstance(env.get("megatron_core"), int) \
            and env["megatron_core"] >= version_int("0.19.0"):
        display["transformer_engine"] = "0.0.0"  # megatron-core 0.19's get_te_version() without TE
    if "gpu" in data:
        gpu = data["gpu"]
        if isinstance(gpu, str):
            gpu = {"name": gpu}  # gpu: H100 (a short name, classified by its prefix)
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
                    raise wrong_type("gpu.name", "a string", name)
                env["gpu_product"] = K.gpu_product(name)
                display["gpu_name"] = name
                if env["gpu_product"] in GPU_MAJOR:
                    env["gpu_major"] = GPU_MAJOR[env["gpu_product"]]
            cc = gpu.get("compute_capability")
            if cc is not None:
                if isinstance(cc, bool) or not re.match(r"^\d+(\.\d+)?$", str(cc)):
                    raise wrong_type("gpu.compute_capability", 'a version such as "9.0"', cc)
                env["gpu_major"] = int(str(cc).split(".")[0])
        else:
            raise wrong_type("gpu", "a mapping {name, compute_capability}, a GPU name (H100) or null", gpu)

    # --- fields
    mcore = env["megatron_core"]
    version_fields = fields_for(mcore) if isinstance(mcore, int) and mcore else None
    known = known_names()
    problems: list[str] = []
    launch_only: list[str] = []
    for key, value in data.items():
        if key in OWN_KEYS:
            continue
        try:
            if _read_field(key, value, env, given, known, findings, lines):
                if key not in K.BY_FIELD and key not in mf["all"] and key not in K.FACT_BY_FIELD:
                    launch_only.append(key)
                elif key in K.BY_FIELD and K.BY_FIELD[key].section in K.IO_SECTIONS and key not in _rule_fields():
                    launch_only.append(key)
        except UnusableInput as exc:
            line = lines.get(key, 0)
            problems.append((f"line {line}: " if line else "") + str(exc))
            continue
        if version_fields and key in mf["all"] and key not in version_fields[1] and key not in K.FACT_BY_FIELD:
            present = [v for v, names in mf["versions"].items() if key in names]
            findings.append(finding(
                "LINT_FIELD_NOT_IN_VERSION", "warning",
                f"megatron-core {version_fields[0]} has no field '{key}'"
                + (f" (it exists in {', '.join(present)})" if present else ""),
                f"__init__() got an unexpected keyword argument '{key}'", [key],
                origin="megatron-core", source="compiler/data/megatron_fields.json", line=lines.get(key, 0),
                fix="use the spelling of the declared megatron-core version"))
    if problems:
        head = f"{len(problems)} values of the wrong type:\n  " if len(problems) > 1 else ""
        raise UnusableInput(head + "\n  ".join(problems))
    if launch_only:
        findings.append(finding(
            "LINT_LAUNCH_ONLY", "info", "Megatron-LM launch arguments no rule reads (data, tokenizer, checkpoints, "
            "logging...): accepted, not checked: " + ", ".join(sorted(launch_only)), None, sorted(launch_only),
            origin="megatron-lm", source="compiler/data/megatron_lm_args.json",
            line=min((lines.get(k, 0) for k in launch_only), default=0)))

    # --- defaults for what was not given; with --use-checkpoint-args the model's are the checkpoint's: unknown here
    launch = data.get("launch") if isinstance(data.get("launch"), dict) else {}
    from_checkpoint = bool(launch.get("checkpoint_args"))
    for field in ("activation_func", "gated_linear_unit"):  # facts that are megatron-core fields (gelu, not gated)
        if field not in given:
            env[field] = UNKNOWN if from_checkpoint else K.FACT_BY_FIELD[field].default
    for k in K.KNOBS:
        if k.field in env:
            continue
        if from_checkpoint and (k.path or "").startswith("model."):
            env[k.field] = UNKNOWN
            continue
        if k.field in mf["all"] or k.field in ("bf16", "fp16"):
            required = k.kind == "int" and k.default is None
            env[k.field] = UNKNOWN if required else k.default_for(frontend)
        elif k.field in NON_MCORE_DEFAULTS:
            env[k.field] = NON_MCORE_DEFAULTS[k.field]
        else:
            env[k.field] = UNKNOWN
    env.update({name: UNKNOWN if value is None else value  # what moeforge.compiler.solver.inputs derives for a recipe
                for name, value in flat_config_facts(env, data).items() if name not in given})
    if "model_document_mla" not in given:  # a linted config is its own model document: MLA there is MLA's provider
        env["model_document_mla"] = env.get("multi_latent_attention") is True

    _normalise(env, given, findings, lines, mcore)
    _derive(env)
    lm_virtual_pipeline(env, data, frontend)
    written = dict(env)
    rewrites = frontend_rewrites(env, given, frontend)
    if rewrites:
        _derive(env)
    display.update(shown_values(env, display))
    return Config(env, given, lines, display, findings, frontend, frontend_reason, written, rewrites, launch)


def _read_field(key, value, env, given, known, findings, lines) -> bool:
    """Read one field into env/given (UnusableInput on a wrong type); False when the name is unknown."""
    if key == "activation_func":  # a name, a dotted callable (torch.nn.functional.silu) or Bridge's {_target_: ...}
        given[key] = value
        target = value.get("_target_") if isinstance(value, dict) else value
        name = target.rsplit(".", 1)[-1] if isinstance(target, str) else None
        env[key] = name if name in K.ACTIVATION_FUNCS else UNKNOWN
        return True
    if key in K.FACT_BY_FIELD:
        fact = K.FACT_BY_FIELD[key]
        if fact.kind == "version":
            raise UnusableInput(f"{key}: give package versions under versions:")
        env[key] = coerce(fact, value)
        given[key] = value
        return True
    if key in ("cuda_graph_modules", "cuda_graph_scope"):
        given[key] = value
        env[key] = read_graph_modules(key, value)
    elif key == "moe_layer_freq":
        given[key] = value
        env[key] = read_layer_freq(value)
    elif key == "moe_router_load_balancing_type":
        given[key] = value
        env[key] = read_load_balancing(value)
    elif key in K.BY_FIELD:
        given[key] = value
        env[key] = coerce(K.BY_FIELD[key], value)
    elif key in known:
        given[key] = value
    else:
        name = key.lstrip("-").replace("-", "_")
        close = did_you_mean(name)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        findings.append(finding(
            "LINT_UNKNOWN_FIELD", "warning",
            f"unknown field '{key}' (not a megatron-core, Megatron-LM or moeforge name){hint}",
            None, [key], source="compiler/data/megatron_fields.json", line=lines.get(key, 0),
            fix=f"rename it to {close[0]}" if close else "remove it"))
        return False
    return True


_RULE_FIELDS: frozenset | None = None


def _rule_fields() -> frozenset:
    """Every field some rule of the catalogue reads."""
    global _RULE_FIELDS
    if _RULE_FIELDS is None:
        _RULE_FIELDS = frozenset(f for r in CATALOGUE for f in r.fields)
    return _RULE_FIELDS


def _normalise(env: dict, given: dict, findings: list, lines: dict, mcore) -> None:
    # cuda_graph_scope (0.16-0.17 name, deprecated from 0.18) -> cuda_graph_modules
    if "cuda_graph_scope" in given:
        scope = env.get("cuda_graph_scope")
        if "cuda_graph_modules" in given and given["cuda_graph_modules"] not in (None, [], "full"):
            if scope not in (None, []):
                findings.append(finding(
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

def _derive(env: dict) -> None:
    layout = env.get("pipeline_model_parallel_layout")   # a list-of-lists layout (Bridge YAML): not judged
    facts = pipeline_layout.facts(layout)
    env.update({k: UNKNOWN for k in facts} if layout is not None and not isinstance(layout, str) else facts)
    implied = pipeline_layout.implied_vpp(env.get("pipeline_layout_stages"), env.get("pipeline_model_parallel_size"))
    if env.get("virtual_pipeline_model_parallel_size") is None and implied:
        env["virtual_pipeline_model_parallel_size"] = implied
    world = env.get("world_size")
    if world is UNKNOWN or world is None:
        nodes, per = env.get("num_nodes"), env.get("gpus_per_node")
        world = nodes * per if known_int(nodes, per) else UNKNOWN
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
    # the foldings are compiler/knobs/layout.py's; a size that does not divide stays UNKNOWN
    if known_int(world, tp, cp, pp):
        dp = L.quotient(world, L.model_size(tp, cp, pp))
        if dp is not None:
            env["data_parallel_size"] = dp
    etp_eff = L.effective_etp(etp, tp)
    if known_int(world, etp_eff, ep, pp):
        edp = L.quotient(world, L.expert_model_size(etp_eff, ep, pp))
        if edp is not None:
            env["expert_data_parallel_size"] = edp
