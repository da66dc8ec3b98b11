"""What the solver takes and gives: a pinned value (Pin), a decided one (Decision), the solver's answer
(Solution) and a resolved recipe (Resolved).

Why a module of their own: the solver's inputs, the solver, the driver and every target read these
values; held here, at the solver's bottom, none of them imports another for a dataclass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeforge.compiler.diagnostics import Position
from moeforge.compiler.recipe.compose import Composed


@dataclass(frozen=True)
class Pin:
    value: object
    pos: Position | None = None
    origin: str = "pinned"   # pinned | default | fact | override | model


@dataclass(frozen=True)
class Decision:
    field: str
    value: object
    source: str               # pinned | override | default | platform | model | rule | preference | derived | megatron | solver
    where: str | None = None
    reason: str | None = None
    rule: str | None = None


@dataclass
class Solution:
    values: dict
    decisions: dict
    diagnostics: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False once any diagnostic is an error: warnings alone leave the solution usable."""
        return not any(d.is_error for d in self.diagnostics)


@dataclass
class Resolved:
    """A recipe with every knob decided: what the targets (plan, emit, explain) are made from."""

    composed: Composed
    pins: dict
    auto: set
    env: dict                      # every field's final value
    decisions: dict                # field -> Decision
    diagnostics: list = field(default_factory=list)   # warnings and advice (errors raise)
