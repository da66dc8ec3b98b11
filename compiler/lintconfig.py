"""`moeforge lint-config FILE`: check a flat Megatron configuration against the rule catalogue.

The input is one YAML or JSON mapping of Megatron field names (TransformerConfig /
ModelParallelConfig fields, the DDP fields overlap_grad_reduce / overlap_param_gather /
use_distributed_optimizer, the Megatron-LM arguments micro_batch_size, global_batch_size,
seq_length, use_megatron_fsdp, world_size) plus two keys of its own:

    gpu:      {name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0"}   (null: no GPU)
    versions: {torch: "2.9.0", transformer_engine: "2.12.0", megatron_core: "0.19.2"}
              (transformer_engine: null when it is not installed)

moeforge's own knob names (num_nodes, gpus_per_node, nvlink_domain, deep_ep_installed,
hybrid_ep_installed, hybridep_ranks_per_nvlink_domain, ...) are accepted too. Fields that are
not given take megatron-core's defaults; a quantity nobody can know (the world size when it is
not given, a version that is not declared) is UNKNOWN, and every check that needs it is skipped,
never failed. Evaluation is concrete and three-valued (compiler.rules.expr.evaluate): no z3,
no jsonschema, no megatron import.

Before the rules run, the configuration is read the way megatron-core reads it: the 0.16-0.17
name cuda_graph_scope (string, "full", comma lists) becomes cuda_graph_modules; deprecated SM
counts route into moe_flex_dispatcher_num_sms; a list-valued moe_layer_freq becomes 1 (all
layers MoE) or 2 (some dense layers). Nothing else is rewritten: lint reports the configuration
as written, including what Megatron would change silently (`silent` rules; errors under --strict).

Exit status: 0 no errors, 1 errors, 2 unusable input.
"""
from __future__ import annotations

import argparse
import json
import re
import string
import sys
from pathlib import Path

from . import knobs as K
from .rules import CATALOGUE, Rule
from .rules.expr import evaluate
from .lint_input import (  # noqa: F401 - re-exported for callers and tests
    OWN_KEYS, SEVERITY_ORDER, Config, Finding, UnusableInput, _one_line, _show, known_names, megatron_fields,
    parse, read,
)

# ----------------------------------------------------------------------- checking

class _Keep(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def render_megatron(text: str | None, display: dict) -> str | None:
    if text is None:
        return None
    try:
        return string.Formatter().vformat(text, (), _Keep(display))
    except (ValueError, IndexError, AttributeError):
        return text


_PATHS = sorted(K.BY_PATH.items(), key=lambda kv: -len(kv[0]))
_PATH_RE = re.compile("|".join(re.escape(p) for p, _ in _PATHS))


def megatron_names(text: str) -> str:
    """A rule's fix in Megatron's field names (recipes speak in recipe paths)."""
    return _PATH_RE.sub(lambda m: K.BY_PATH[m.group(0)].field, text) if text else text


def check(cfg: Config, rules: tuple[Rule, ...] = CATALOGUE, strict: bool = False) -> list[Finding]:
    env = cfg.env
    out = list(cfg.findings)
    for r in rules:
        if r.applies(env) is not True:
            continue
        if evaluate(r.when, env) is not True or evaluate(r.require, env) is not False:
            continue
        # the rule's Megatron fields, without platform facts and untouched deprecated spellings
        fields = sorted(f for f in r.fields - set(K.FACT_BY_FIELD) if f not in K.LINT_ONLY or f in cfg.given)
        trigger = [cfg.lines[f] for f in r.when.fields() if f in cfg.lines]
        line = min(trigger or [cfg.lines[f] for f in fields if f in cfg.lines] or [0])
        severity = "error" if (strict and r.silent) else r.severity
        message = r.message
        if r.silent:
            changes = ", ".join(f"{f} = {_show(v)}" for f, v in r.silent.items())
            message += f" (Megatron would silently use {changes})"
        notes = [f"{who}: {render_megatron(text, cfg.display)}" for who, text in r.also if text]
        if r.evidence:
            notes.append(f"evidence: {r.evidence}")
        out.append(Finding(r.id, severity, message, render_megatron(r.megatron_message_for(env), cfg.display),
                           fields, r.origin, r.source, megatron_names(r.fix), line, notes))
    if strict:
        for f in out:
            if f.rule in ("LINT_UNKNOWN_FIELD", "LINT_FIELD_NOT_IN_VERSION"):
                f.severity = "error"
    return out


def lint_mapping(data: dict, strict: bool = False, lines: dict | None = None) -> list[Finding]:
    """Findings for an already-parsed mapping (UnusableInput on bad types)."""
    return check(read(data, lines), strict=strict)


def lint_text(text: str, name: str = "<config>", strict: bool = False) -> list[Finding]:
    data, lines = parse(text, name)
    return lint_mapping(data, strict, lines)


# ----------------------------------------------------------------------- output / CLI

def render_text(findings: list[Finding], name: str) -> str:
    lines = []
    for f in findings:
        where = f"{name}:{f.line}: " if f.line else f"{name}: "
        lines.append(f"{where}{f.severity}[{f.rule}]: {f.message}")
        if f.megatron_message:
            lines.append(f"  megatron: {f.megatron_message}")
        for note in f.notes:
            lines.append(f"  {note}")
        if f.fields:
            lines.append(f"  fields: {', '.join(f.fields)}")
        if f.source:
            lines.append(f"  source: {f.source} [{f.origin}]")
        if f.fix:
            lines.append(f"  help: {f.fix}")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITY_ORDER}
    lines.append(f"{name}: {counts['error']} error(s), {counts['warning']} warning(s), {counts['advice']} advice")
    return "\n".join(lines)


def main_lint_config(argv) -> int:
    parser = argparse.ArgumentParser(prog="moeforge lint-config",
                                     description="Check a flat Megatron configuration (YAML/JSON) against the "
                                                 "moeforge rule catalogue.")
    parser.add_argument("file", help="YAML or JSON mapping of Megatron field names ('-' reads stdin)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--strict", action="store_true",
                        help="silent Megatron rewrites and unknown fields are errors")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    name = args.file
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{name}: error: cannot read: {_one_line(exc)}", file=sys.stderr)
        return 2
    try:
        findings = lint_text(text, name, args.strict)
    except UnusableInput as exc:
        print(f"{name}: error: unusable input: {exc}", file=sys.stderr)
        return 2
    findings.sort(key=lambda f: SEVERITY_ORDER[f.severity])
    code = 1 if any(f.severity == "error" for f in findings) else 0
    text = json.dumps([f.to_json() for f in findings], indent=2) if args.format == "json" \
        else render_text(findings, name)
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `moeforge lint-config x | head`: not an error of the input
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_lint_config(sys.argv[1:]))
