"""Safe YAML loading that remembers where every value came from.

PyYAML composes the node graph (libyaml when present); we build plain values from it
ourselves so that we can refuse what a recipe never needs: tags beyond the YAML core
schema, duplicate keys, non-string keys, alias bombs, deep nesting and huge documents.
That half lives in moeforge.compiler.recipe.yaml_nodes and is imported only for a document the parse cache
(moeforge.compiler.recipe.cache) has not seen: an unchanged recipe is read back as JSON, without PyYAML.
"""
from __future__ import annotations

from pathlib import Path

from moeforge.compiler.bounded import Unreadable, read_bytes
from moeforge.compiler.diagnostics import CompileError, Position, error
from moeforge.compiler.recipe import cache
from moeforge.compiler.recipe.document import MAX_BYTES, Document

PARSER = "2"  # part of every parse-cache entry's key: bump when what load_yaml builds changes


def load_text(text: str | bytes, file: str) -> Document:
    """Text or bytes to a Document: too large or not UTF-8 is a located error; a cached parse skips PyYAML."""
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
    from moeforge.compiler.recipe.yaml_nodes import parse  # lazy: PyYAML, only for a document the parse cache has not seen

    doc = parse(text, file)
    cache.store(entry, {"data": doc.data, "positions": [[list(p), pos.line, pos.col]
                                                              for p, pos in doc.positions.items()]})
    return doc


def load_file(path: Path, display: str | None = None) -> Document:
    """The document in a file, through the compiler's one bounded reader (moeforge.compiler.bounded)."""
    display = display or str(path)
    try:
        raw = read_bytes(path, MAX_BYTES)
    except Unreadable as exc:
        if exc.kind == "size":
            raise CompileError([error("E_YAML_TOO_LARGE", f"document is {exc}", Position(display, 1, 1),
                                      help="a recipe should be small; split it with extends:")]) from None
        raise CompileError([error("E_IO", str(exc), Position(display))]) from None
    return load_text(raw, display)
