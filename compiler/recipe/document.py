"""A loaded YAML document: plain values and the source position of each path, and the limits every document
is read under (compiler/recipe/load.py reads it, compiler/recipe/yaml_nodes.py builds it from PyYAML's nodes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeforge.compiler.diagnostics import Position, error

MAX_BYTES = 1 << 20          # a recipe is a page, not a data set
MAX_NODES = 50_000           # after alias expansion
MAX_DEPTH = 64
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1  # integers as Megatron holds them (int64)

Path_ = tuple  # a path into the document: ("moe", "overlap", "ep_comm")
KEY = "\x00key"  # positions[path + (KEY,)] is where the key itself stands (for unknown-key errors)


def out_of_range(text: str, pos: Position):
    """An integer Megatron cannot take (its arguments and checkpoints hold 64-bit integers)."""
    shown = text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"
    return error("E_INT_RANGE", f"{shown} is out of range: integers are 64-bit (at most {INT_MAX})", pos,
                 help="write the value Megatron should get; no knob takes an integer this large")


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
