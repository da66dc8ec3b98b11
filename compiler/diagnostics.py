"""Diagnostics that look like a compiler's: file:line:col, a code, notes and help.

Every stage reports problems as Diagnostic values and keeps going, so a user sees all of
them at once; `CompileError` carries the whole list out of the pipeline.

There is one diagnostic type for every command (check, compile, explain, lint-config) and one
builder from a catalogue rule to a diagnostic (`from_rule`): the rule's id, severity, message,
source, origin, fields and the Megatron wording of the release in force all come from there.
"""
from __future__ import annotations

import json
import string
import sys
from collections.abc import Iterable  # not typing: importing it is a measurable part of a cold start
from dataclasses import dataclass, replace

SEVERITIES = ("error", "warning", "advice", "info")

@dataclass(frozen=True)
class Position:
    file: str
    line: int = 0  # 1-based; 0 when unknown
    col: int = 0

    def __str__(self) -> str:
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Note:
    text: str
    pos: Position | None = None


@dataclass(frozen=True)
class Diagnostic:
    severity: str                   # error | warning | advice (| info: lint-config's front-end line)
    code: str                       # the rule id (or a stage's own code, E_...)
    message: str
    pos: Position | None = None
    notes: tuple[Note, ...] = ()
    source: str | None = None
    help: str | None = None
    megatron_message: str | None = None
    fields: tuple[str, ...] = ()
    origin: str | None = None       # megatron-core | megatron-bridge | megatron-lm | moeforge (rules only)
    # Concrete fixes the solver verified, smallest change first: ((recipe path, value), ...), each of
    # which alone makes this diagnostic go away and adds no error.
    fixes: tuple = ()
    # The recipes this diagnostic was found in, when it is reported once for several (a shared base).
    affects: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        """Errors stop a compile (CompileError); warnings and advice are only reported."""
        return self.severity == "error"

    # lint-config's names for the same fields
    @property
    def rule(self) -> str:
        """The code under lint-config's JSON name: a rule id, or a stage's E_ code."""
        return self.code

    @property
    def fix(self) -> str:
        """The help under lint-config's name: "" rather than None, so its JSON always holds a string."""
        return self.help or ""

    @property
    def line(self) -> int:
        """The 1-based line under lint-config's name; 0 for a diagnostic without a position."""
        return self.pos.line if self.pos else 0

    def as_error(self) -> "Diagnostic":
        """The same finding as an error: what --strict makes of a warning, so that the compile stops on it."""
        return replace(self, severity="error")

    def render(self) -> str:
        """The text form (check, compile, the pre-commit hook): every part through printable(), so a value
        from a document can neither drive the terminal nor start a line of its own (nor a CI command)."""
        where = f"{self.pos}: " if self.pos else ""
        lines = [f"{where}{self.severity}[{self.code}]: {self.message}"]
        for note in self.notes:
            lines.append(f"  {note.text}" + (f"  ({note.pos})" if note.pos else ""))
        if self.source:
            lines.append(f"  source: {self.source}")
        if self.help:
            lines.append(f"  help: {self.help}")
        if self.affects:
            lines.append(f"  affects: {', '.join(self.affects)}")
        return "\n".join(map(printable, lines))

    def to_json(self) -> dict:
        """The fields of schemas/check-report.v1.json (and plan.v1.json's warnings)."""
        return {"severity": self.severity, "code": self.code, "message": self.message, "pos": _pos_json(self.pos),
                "notes": [{"text": n.text, "pos": _pos_json(n.pos)} for n in self.notes], "source": self.source,
                "help": self.help, "megatron_message": self.megatron_message, "fields": list(self.fields)}

    def to_lint_json(self) -> dict:
        """lint-config --format json: the same diagnostic in lint-config's names."""
        return {"rule": self.code, "severity": self.severity, "message": self.message,
                "megatron_message": self.megatron_message, "fields": list(self.fields),
                "origin": self.origin or "moeforge", "source": self.source or "", "fix": self.help or "",
                "line": self.line}

    def github(self) -> str:
        """One GitHub Actions workflow command (::error file=..,line=..,col=..::msg)."""
        level = {"error": "error", "warning": "warning"}.get(self.severity, "notice")
        props = []
        if self.pos:
            props.append(f"file={_gh_escape(self.pos.file, True)}")
            if self.pos.line:
                props += [f"line={self.pos.line}", f"col={self.pos.col}"]
        props.append(f"title={_gh_escape(self.code, True)}")
        body = self.message + "".join(f"\n{n.text}" + (f"  ({n.pos})" if n.pos else "") for n in self.notes)
        if self.help:
            body += f"\nhelp: {self.help}"
        if self.affects:
            body += f"\naffects: {', '.join(self.affects)}"
        return f"::{level} {','.join(props)}::{_gh_escape(body, False)}"


# C0 and C1 controls, DEL and the Unicode line and paragraph separators, written as Python escapes: ESC would
# drive the terminal (clear it, retitle it), a CR or a newline would start a line that is not ours.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})
# lone surrogates (JSON's "\\ud800") cannot be encoded for a terminal, and they, U+FFFE and U+FFFF are characters
# YAML refuses even in a comment
_ESCAPES.update({c: f"\\u{c:04x}" for c in (*range(0xD800, 0xE000), 0xFFFE, 0xFFFF)})


def printable(line: str) -> str:
    """One line of text output, safe for a terminal and a CI log: control characters escaped, and no GitHub
    workflow command can start in it (`::cmd::` at the start of a line, after blanks, and `##[cmd]`
    anywhere are what the Actions runner obeys; a backslash defuses both)."""
    line = line.translate(_ESCAPES)
    if "##[" in line:
        line = line.replace("##[", "##\\[")
    body = line.lstrip()
    if body.startswith("::"):
        line = line[: len(line) - len(body)] + "\\" + body
    return line


def yaml_comment(text: str) -> str:
    """One YAML comment line holding `text` as data: line breaks (newline, CR, NEL, U+2028/9) and other control
    characters escaped by printable, so nothing after them is read as YAML (an imported flag value with a
    newline once wrote `checkpoint: {save: ...}` into a recipe)."""
    return "# " + printable(text)


def _pos_json(pos: Position | None) -> dict | None:
    return None if pos is None else {"file": pos.file, "line": pos.line, "col": pos.col}


def _gh_escape(text: str, prop: bool) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A").translate(_ESCAPES)
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


class CompileError(Exception):
    """Raised by a stage with every diagnostic it found; nothing has been written."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))


def error(code: str, message: str, pos: Position | None = None, **kw) -> Diagnostic:
    """An error diagnostic: the shorthand every stage raises CompileError with."""
    return Diagnostic("error", code, message, pos, **kw)


def finding(rule: str, severity: str, message: str, megatron_message: str | None = None, fields=(),
            origin: str = "moeforge", source: str = "", fix: str = "", line: int = 0, notes=()) -> Diagnostic:
    """A lint-config finding: a Diagnostic at a line of the linted file (built like error(), hence lower case)."""
    return Diagnostic(severity, rule, message, Position("", line) if line else None,
                      tuple(n if isinstance(n, Note) else Note(n) for n in notes), source or None, fix or None,
                      megatron_message, tuple(fields), origin)


# ----------------------------------------------------------------------- rule -> diagnostic

class _Keep(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def fill(text: str | None, values: dict) -> str | None:
    """{name} placeholders of a Megatron message filled from values (unknown ones kept as written)."""
    if text is None:
        return None
    try:
        return string.Formatter().vformat(text, (), _Keep(values))
    except (ValueError, IndexError, AttributeError, KeyError):
        return text


def from_rule(rule: object, env: dict, *, message: str | None = None, severity: str | None = None,
              pos: Position | None = None, notes: Iterable[Note] = (), help: str | None = None,
              display: dict | None = None, code: str | None = None, source: str | None = None,
              fields: Iterable[str] | None = None, fixes: tuple = ()) -> Diagnostic:
    """The one way a catalogue rule becomes a diagnostic, for every command.

    env: the values the rule was judged on (the software versions pick the Megatron wording of that
    release: Rule.megatron_message_for); display: text for the {placeholders} of Megatron's message
    (lint-config's configuration as written; else the env's own values). Evidence becomes a note."""
    notes = tuple(notes)
    if rule.evidence and not any(n.text == f"evidence: {rule.evidence}" for n in notes):
        notes += (Note(f"evidence: {rule.evidence}"),)
    megatron = fill(rule.megatron_message_for(env), display if display is not None else env)
    return Diagnostic(severity or rule.severity, code or rule.id, message if message is not None else rule.message,
                      pos, notes, source if source is not None else rule.source,
                      help if help is not None else rule.fix, megatron,
                      tuple(sorted(rule.fields if fields is None else fields)), rule.origin, fixes)


# ----------------------------------------------------------------------- reporting

def merge_shared(results: dict[str, list[Diagnostic]]) -> list[Diagnostic]:
    """Every diagnostic once: one found in several recipes (its position is in a base file they all
    extend, or a model or platform they share) is reported once, with the recipes it affects."""
    order: list = []
    seen: dict = {}
    for recipe, diags in results.items():
        for d in diags:
            key = replace(d, affects=())
            if key not in seen:
                seen[key] = []
                order.append(key)
            if recipe not in seen[key]:
                seen[key].append(recipe)
    out = []
    for d in order:
        recipes = seen[d]
        shared = len(recipes) > 1 or (d.pos is not None and d.pos.file and recipes[0] != d.pos.file
                                      and not d.pos.file.startswith("--set"))
        out.append(replace(d, affects=tuple(recipes)) if shared else d)
    return out


def shown(diags: Iterable[Diagnostic], quiet: bool = False, advice: bool = False) -> list[Diagnostic]:
    """What a command prints: errors only with --quiet; advice only with --advice."""
    return [d for d in diags if d.is_error or (not quiet and (d.severity != "advice" or advice))]


def summary(diags: Iterable[Diagnostic]) -> dict[str, int]:
    """Counts of errors, warnings and advice (info lines not counted), for `check`'s totals."""
    counts = {s: 0 for s in ("error", "warning", "advice")}
    for d in diags:
        if d.severity in counts:
            counts[d.severity] += 1
    return counts


def render_all(diags: Iterable[Diagnostic], fmt: str = "text") -> str:
    """Diagnostics as --format asked: text, JSON, or GitHub Actions annotation lines."""
    diags = list(diags)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diags], indent=2)
    if fmt == "github":
        return "\n".join(d.github() for d in diags)
    return "\n".join(d.render() for d in diags)


def command_main(prog: str, parser, run, argv, errors: tuple) -> int:
    """A subcommand with options of its own (plan-layout, calibrate, diagnose): argparse's usage errors exit 2
    (--help 0), each of ``errors`` is its message's lines as `PROG: error: LINE` on stderr and exit 1."""
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    try:
        return run(args)
    except errors as exc:
        for line in str(exc).split("\n"):
            print(printable(f"{prog}: error: {line}"), file=sys.stderr)
        return 1
