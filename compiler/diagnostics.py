"""Diagnostics that look like a compiler's: file:line:col, a code, notes and help.

Every stage reports problems as Diagnostic values and keeps going, so a user sees all of
them at once; `CompileError` carries the whole list out of the pipeline.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, asdict
from typing import Iterable

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
    severity: str
    code: str
    message: str
    pos: Position | None = None
    notes: tuple[Note, ...] = ()
    source: str | None = None
    help: str | None = None
    megatron_message: str | None = None
    fields: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def as_error(self) -> "Diagnostic":
        return Diagnostic("error", self.code, self.message, self.pos, self.notes, self.source,
                          self.help, self.megatron_message, self.fields)

    def render(self) -> str:
        where = f"{self.pos}: " if self.pos else ""
        lines = [f"{where}{self.severity}[{self.code}]: {self.message}"]
        for note in self.notes:
            lines.append(f"  {note.text}" + (f"  ({note.pos})" if note.pos else ""))
        if self.source:
            lines.append(f"  source: {self.source}")
        if self.help:
            lines.append(f"  help: {self.help}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        data = asdict(self)
        data["pos"] = _pos_json(self.pos)
        data["notes"] = [{"text": n.text, "pos": _pos_json(n.pos)} for n in self.notes]
        data["fields"] = list(self.fields)
        return data

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
        return f"::{level} {','.join(props)}::{_gh_escape(body, False)}"


def _pos_json(pos: Position | None) -> dict | None:
    return None if pos is None else {"file": pos.file, "line": pos.line, "col": pos.col}


def _gh_escape(text: str, prop: bool) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


class CompileError(Exception):
    """Raised by a stage with every diagnostic it found; nothing has been written."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))


def error(code: str, message: str, pos: Position | None = None, **kw) -> Diagnostic:
    return Diagnostic("error", code, message, pos, **kw)


def render_all(diags: Iterable[Diagnostic], fmt: str = "text") -> str:
    diags = list(diags)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diags], indent=2)
    if fmt == "github":
        return "\n".join(d.github() for d in diags)
    return "\n".join(d.render() for d in diags)
