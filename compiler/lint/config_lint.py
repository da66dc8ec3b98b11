"""`moeforge lint-config FILE`: check a flat Megatron configuration against the rule catalogue.

The input is one YAML or JSON mapping of Megatron field names (TransformerConfig /
ModelParallelConfig fields, the DDP fields overlap_grad_reduce / overlap_param_gather /
use_distributed_optimizer, the Megatron-LM arguments micro_batch_size, global_batch_size,
seq_length, use_megatron_fsdp, world_size) plus three keys of its own (frontend, see below):

    gpu:      {name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0"}   (null: no GPU)
    versions: {torch: "2.9.0", transformer_engine: "2.12.0", megatron_core: "0.19.2"}
              (transformer_engine: null when it is not installed)

moeforge's own knob names (num_nodes, gpus_per_node, nvlink_domain, deep_ep_installed,
hybrid_ep_installed, hybridep_ranks_per_nvlink_domain, ...) are accepted too. A quantity nobody
can know (the world size when it is not given, a version that is not declared) is UNKNOWN, and
every check that needs it is skipped, never failed. Evaluation is concrete and three-valued
(moeforge.compiler.rules.expr.evaluate): no z3, no jsonschema, no megatron import.

Every verdict is for one front-end (`frontend: megatron-core | megatron-lm | bridge`, or
`--frontend`, which wins; inferred when absent: Megatron-LM argument names that are not
megatron-core fields -> megatron-lm; a Bridge ConfigContainer layout (model: / comm_overlap: /
ddp: sections or dotted keys such as comm_overlap.overlap_p2p_comm) or Bridge-only provider
fields (mtp_enabled, ...) -> bridge; else megatron-core). The output states it and why.

- Fields that are not given take that front-end's default (knobs.Knob.default_for: Megatron-LM's
  argparse defaults overlap_p2p_comm=True and gradient_accumulation_fusion=True differ).
- The front-end's own rewrites are applied before the rules run, the way it applies them
  (frontends.frontend_rewrites: Bridge's CommOverlapConfig and TransformerConfig.finalize,
  Megatron-LM's validate_args), and stated in the output.
- Rules are filtered by origin: megatron-core and moeforge rules hold for every front-end (both
  front-ends end in TransformerConfig.__post_init__); a megatron-lm rule only for megatron-lm, a
  megatron-bridge rule only for bridge. `silent` rules (what a front-end changes without an
  error) are judged on the configuration as written; the other rules on what megatron-core
  receives after the front-end's rewrites.

Before that, the configuration is read the way megatron-core reads it: the 0.16-0.17
name cuda_graph_scope (string, "full", comma lists) becomes cuda_graph_modules; deprecated SM
counts route into moe_flex_dispatcher_num_sms; a list-valued moe_layer_freq becomes 1 (all
layers MoE) or 2 (some dense layers); Megatron-LM dests that name a field differently
(num_experts, te_rng_tracker, num_virtual_stages_per_pipeline_rank, ...) are read as that field.

Exit status: 0 no errors, 1 errors, 2 unusable input.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from dataclasses import replace

from moeforge.compiler.knobs import table as K
from moeforge.compiler.diagnostics import Diagnostic, Note, Position, fill, finding, from_rule, printable
from moeforge.compiler.launch_reader.text import read_source
from moeforge.compiler.rules import CATALOGUE, Rule
from moeforge.compiler.rules.expr import UNKNOWN, evaluate
from moeforge.compiler.lint.flat_config import (  # noqa: F401 - lint-config's API: re-exported for callers and tests
    SEVERITY_ORDER, Config, UnusableInput, known_names, megatron_fields, parse, read,
)
from moeforge.compiler.rules.display import show

# ----------------------------------------------------------------------- checking

def render_megatron(text: str | None, display: dict) -> str | None:
    """A rule's Megatron message with {field} placeholders filled as the config spells them (e.g. ${VAR})."""
    return fill(text, display)


_PATHS = sorted(K.BY_PATH.items(), key=lambda kv: -len(kv[0]))
_PATH_RE = re.compile("|".join(re.escape(p) for p, _ in _PATHS))


def megatron_names(text: str) -> str:
    """A rule's fix in Megatron's field names (recipes speak in recipe paths)."""
    return _PATH_RE.sub(lambda m: K.BY_PATH[m.group(0)].field, text) if text else text


FRONTEND_OF_ORIGIN = {"megatron-lm": "megatron-lm", "megatron-bridge": "bridge"}


def holds_for(rule: Rule, frontend: str) -> bool:
    """Whether the front-end enforces the rule: megatron-core's checks (every front-end ends in
    TransformerConfig.__post_init__) and moeforge's own rules hold for all; a Megatron-LM or
    Megatron-Bridge check only for that front-end."""
    only = FRONTEND_OF_ORIGIN.get(rule.origin)
    return only is None or only == frontend


def _default_triggered(r: Rule, cfg: Config) -> bool:
    """A silent rule whose rewritten fields nobody set, triggered only by this front-end's own default
    (Megatron-LM's overlap_p2p_comm=True without VPP): the front-end rewrites its own default."""
    fields = [f for f in r.silent if f in K.BY_FIELD]
    return bool(fields) and all(f not in cfg.given and K.BY_FIELD[f].default_for(cfg.frontend) != K.BY_FIELD[f].default
                                for f in fields)


def check(cfg: Config, rules: tuple[Rule, ...] = CATALOGUE, strict: bool = False) -> list[Diagnostic]:
    """Every catalogue rule the config breaks, judged on what megatron-core receives (silent rules: as written)."""
    out = list(cfg.findings)
    for r in rules:
        if not holds_for(r, cfg.frontend) or (r.training_only and cfg.inference):
            continue
        # what a front-end rewrites silently is judged on the configuration as written; everything
        # else on what megatron-core receives after the front-end's rewrites
        env = cfg.written if (r.silent and cfg.written) else cfg.env
        if r.applies(env) is not True:
            continue
        if evaluate(r.when, env) is not True or evaluate(r.require, env) is not False:
            continue
        if r.silent and _default_triggered(r, cfg):
            continue
        # the rule's Megatron fields, without platform facts and untouched deprecated spellings
        fields = sorted(f for f in r.fields - set(K.FACT_BY_FIELD) if f not in K.LINT_ONLY or f in cfg.given)
        trigger = [cfg.lines[f] for f in r.when.fields() if f in cfg.lines]
        line = min(trigger or [cfg.lines[f] for f in fields if f in cfg.lines] or [0])
        severity = "error" if (strict and r.silent) else r.severity
        message = render_megatron(r.message, cfg.display)  # {field} placeholders (e.g. the ${VAR} names)
        if r.silent:
            who = {"megatron-lm": "Megatron-LM", "bridge": "Megatron-Bridge"}.get(cfg.frontend, "Megatron")
            changes = ", ".join(f"{f} = {show(v)}" for f, v in r.silent.items())
            message += f" ({who} would silently use {changes})"
        notes = [Note(f"{who}: {render_megatron(text, cfg.display)}") for who, text in r.also if text]
        out.append(from_rule(r, env, message=message, severity=severity, pos=Position("", line) if line else None,
                             notes=notes, help=megatron_names(r.fix), display=cfg.display, fields=fields))
    out = _dedupe(out)
    if strict:
        out = [replace(f, severity="error") if f.rule in ("LINT_UNKNOWN_FIELD", "LINT_FIELD_NOT_IN_VERSION") else f
               for f in out]
    return out


def _dedupe(findings: list[Diagnostic]) -> list[Diagnostic]:
    """One finding per Megatron error text: when a front-end's check and megatron-core's say the same
    (EP_OVERLAP_NO_MOE_RECOMPUTE: Bridge on every version, megatron-core from 0.17), keep megatron-core's."""
    core = {(f.megatron_message, f.severity) for f in findings if f.origin == "megatron-core" and f.megatron_message}
    return [f for f in findings if f.origin == "megatron-core" or not f.megatron_message
            or (f.megatron_message, f.severity) not in core]


def lint_config(data: dict, strict: bool = False, lines: dict | None = None,
                frontend: str | None = None) -> tuple[Config, list[Diagnostic]]:
    """The configuration as read (with its front-end) and its findings."""
    cfg = read(data, lines, frontend)
    return cfg, check(cfg, strict=strict)


def lint_mapping(data: dict, strict: bool = False, lines: dict | None = None,
                 frontend: str | None = None) -> list[Diagnostic]:
    """Findings for an already-parsed mapping (UnusableInput on bad types)."""
    return lint_config(data, strict, lines, frontend)[1]


def lint_text(text: str, name: str = "<config>", strict: bool = False, frontend: str | None = None) -> list[Diagnostic]:
    """lint-config on YAML/JSON text: line numbers kept for the findings; UnusableInput on bad types."""
    data, lines = parse(text, name)
    return lint_mapping(data, strict, lines, frontend)


def frontend_finding(cfg: Config) -> Diagnostic:
    """The front-end every verdict is for, why, and the values it sets that nobody wrote."""
    notes = [f"{why}: {f} = {show(a) if a is not UNKNOWN else 'unknown'} (was "
             f"{show(b) if b is not UNKNOWN else 'unknown'})" for f, b, a, why in cfg.rewrites]
    return finding("LINT_FRONTEND", "info", f"front-end: {cfg.frontend} ({cfg.frontend_reason})", None,
                   sorted({f for f, _, _, _ in cfg.rewrites}), origin=ORIGIN_OF_FRONTEND[cfg.frontend],
                   notes=notes)


def context_lines(cfg: Config) -> list[str]:
    """What the launch's context changes in the verdicts (lint/launch.py context)."""
    out = []
    if cfg.inference:
        out.append(f"an inference launch ({cfg.launch.get('why_mode')}): rules that only a training run checks are "
                   "not applied")
    if cfg.launch.get("checkpoint_args"):
        out.append("--use-checkpoint-args: the model's arguments come from the checkpoint; rules on model fields "
                   "the launch does not give are not judged")
    return out


ORIGIN_OF_FRONTEND = {"megatron-core": "megatron-core", "megatron-lm": "megatron-lm", "bridge": "megatron-bridge"}


# ----------------------------------------------------------------------- output / CLI

def render_text(findings: list[Diagnostic], name: str, cfg: Config | None = None) -> str:
    """lint-config's terminal report: the front-end and its rewrites first, then one name:line finding each."""
    lines = []
    if cfg is not None:
        lines.append(f"{name}: front-end {cfg.frontend} ({cfg.frontend_reason})")
        for f, before, after, why in cfg.rewrites:
            shown = lambda v: "unknown" if v is UNKNOWN else show(v)  # noqa: E731
            lines.append(f"  {cfg.frontend} sets {f} = {shown(after)} (was {shown(before)}): {why}")
        lines += [f"{name}: {line}" for line in context_lines(cfg)]
    for f in findings:
        where = f"{name}:{f.line}: " if f.line else f"{name}: "
        lines.append(f"{where}{f.severity}[{f.rule}]: {f.message}")
        if f.megatron_message:
            lines.append(f"  megatron: {f.megatron_message}")
        for note in f.notes:
            lines.append(f"  {note.text}")
        if f.fields:
            lines.append(f"  fields: {', '.join(f.fields)}")
        if f.source:
            lines.append(f"  source: {f.source} [{f.origin}]")
        if f.fix:
            lines.append(f"  help: {f.fix}")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITY_ORDER}
    lines.append(f"{name}: {counts['error']} error(s), {counts['warning']} warning(s), {counts['advice']} advice")
    # each line holds the config's own keys and values: escaped for a terminal and a CI log, one line each
    return "\n".join(printable(line) for line in lines)


def main_lint_config(argv) -> int:
    """`moeforge lint-config`: exit 1 on an error finding, 2 on unusable input or bad arguments, never a traceback."""
    parser = argparse.ArgumentParser(prog="moeforge lint-config",
                                     description="Check a flat Megatron configuration (YAML/JSON) against the "
                                                 "moeforge rule catalogue.")
    parser.add_argument("file", help="YAML or JSON mapping of Megatron field names ('-' reads stdin)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--strict", action="store_true",
                        help="silent Megatron rewrites and unknown fields are errors")
    parser.add_argument("--frontend", choices=K.FRONTENDS, default=None,
                        help="who reads the configuration (wins over a frontend: key; default: inferred "
                             "from the names it uses)")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    name = args.file
    text, why = read_source(name)
    if why:
        print(printable(why), file=sys.stderr)
        return 2
    try:
        data, lines = parse(text, name)
        cfg, findings = lint_config(data, args.strict, lines, args.frontend)
    except UnusableInput as exc:
        print(printable(f"{name}: error: unusable input: {exc}"), file=sys.stderr)
        return 2
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    code = 1 if any(f.severity == "error" for f in findings) else 0
    if args.format == "json":
        head = frontend_finding(cfg).to_lint_json()
        head.update(frontend_reason=cfg.frontend_reason, context=context_lines(cfg), rewrites=[
            {"field": f, "from": None if b is UNKNOWN else b, "to": None if a is UNKNOWN else a, "why": why,
             "unknown": a is UNKNOWN} for f, b, a, why in cfg.rewrites])
        items = [f.to_lint_json() for f in findings] + [head]  # sorted by severity: info last
        for item in items:
            item["frontend"] = cfg.frontend
        text = json.dumps(items, indent=2, default=str)
    else:
        text = render_text(findings, name, cfg)
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `moeforge lint-config x | head`: not an error of the input
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_lint_config(sys.argv[1:]))
