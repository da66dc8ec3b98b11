"""Safe YAML loading that remembers where every value came from.

PyYAML composes the node graph (libyaml when present); we build plain values from it
ourselves so that we can refuse what a recipe never needs: tags beyond the YAML core
schema, duplicate keys, non-string keys, alias bombs, deep nesting and huge documents.
That half lives in compiler.recipe.yaml_nodes and is imported only for a document the parse cache
(compiler.recipe.cache) has not seen: an unchanged recipe is read back as JSON, without PyYAML.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from compiler.recipe import cache
from compiler.diagnostics import CompileError, Position, error

MAX_BYTES = 1 << 20          # a recipe is a page, not a data set
MAX_NODES = 50_000           # after alias expansion
MAX_DEPTH = 64
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1  # integers as Megatron holds them (int64)

Path_ = tuple  # a path into the document: ("moe", "overlap", "ep_comm")
KEY = "\x00key"  # positions[path + (KEY,)] is where the key itself stands (for unknown-key errors)
PARSER = "2"  # part of every parse-cache entry's key: bump when what load_yaml builds changes


def out_of_range(text: str, pos: Position):
    """An integer Megatron cannot take (its arguments and checkpoints hold 64-bit integers)."""
    shown = text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"
    return error("E_INT_RANGE", f"{shown} is out of range: integers are 64-bit (at most {INT_MAX})", pos,
                 help="write the value Megatron should get; no knob takes an integer this large")


def __getattr__(name: str):
    """compiler.recipe.load.YamlLoader, imported on first use (it needs PyYAML)."""
    if name == "YamlLoader":
        from compiler.recipe.yaml_nodes import YamlLoader

        return YamlLoader
    raise AttributeError(name)


@dataclass(frozen=True)
class Document:
    """A loaded YAML document: plain values plus the source position of each path."""

    file: str
    data: object
    positions: dict = field(default_factory=dict, compare=False, repr=False)
    migrated_from: int | None = field(default=None, compare=False)  # the schema version read, when migrated

    def pos(self, path: Path_) -> Position:
        """Position of the value at path, or of its nearest ancestor that exists."""
        path = tuple(path)
        while path:
            if path in self.positions:
                return self.positions[path]
            path = path[:-1]
        return self.positions.get((), Position(self.file, 1, 1))


def load_text(text: str | bytes, file: str) -> Document:
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise CompileError([error("E_YAML_TOO_LARGE",
                                      f"document is {len(text)} bytes; the limit is {MAX_BYTES}",
                                      Position(file, 1, 1),
                                      help="a recipe should be small; split it with extends:")])
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = text[: exc.start].count(b"\n") + 1
            col = exc.start - (text.rfind(b"\n", 0, exc.start) + 1) + 1
            raise CompileError([error("E_YAML_ENCODING",
                                      f"not valid UTF-8 (byte 0x{text[exc.start]:02x})",
                                      Position(file, line, col),
                                      help="save the file as UTF-8")]) from None
    if len(text) > MAX_BYTES:
        raise CompileError([error("E_YAML_TOO_LARGE", f"document is larger than {MAX_BYTES} bytes",
                                  Position(file, 1, 1))])
    entry = cache.parse_key(PARSER, text)
    cached = cache.recall(entry)
    if cached is not None:
        try:
            return Document(file, cached["data"], {tuple(p): Position(file, line, col)
                                                   for p, line, col in cached["positions"]})
        except (KeyError, TypeError, ValueError):
            pass  # an entry of another shape (not ours): parsed again, and overwritten
    from compiler.recipe.yaml_nodes import parse

    doc = parse(text, file)
    cache.store(entry, {"data": doc.data, "positions": [[list(p), pos.line, pos.col]
                                                              for p, pos in doc.positions.items()]})
    return doc


def load_file(path: Path, display: str | None = None) -> Document:
    """The document in a file, through the compiler's one bounded reader (compiler.bounded)."""
    from compiler.bounded import Unreadable, read_bytes

    display = display or str(path)
    try:
        raw = read_bytes(path, MAX_BYTES)
    except Unreadable as exc:
        if exc.kind == "size":
            raise CompileError([error("E_YAML_TOO_LARGE", f"document is {exc}", Position(display, 1, 1),
                                      help="a recipe should be small; split it with extends:")]) from None
        raise CompileError([error("E_IO", str(exc), Position(display))]) from None
    return load_text(raw, display)
