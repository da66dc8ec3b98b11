"""One row of the knob table (compiler/knobs/table.py): a knob's recipe path, kind, defaults and names.

Why a module of its own: the table is data, split by topic (knobs.py, and the training-I/O rows in
knobs_io.py); the row type and its name in every target (megatron-core field, Megatron-LM dest,
Megatron-Bridge path) are written once, here.
"""
from __future__ import annotations

from dataclasses import dataclass

AUTO = "auto"
# Who reads a configuration: Megatron-LM's arguments, Megatron-Bridge's providers, or megatron-core
# directly (moeforge's runtime). Their defaults and silent rewrites differ, so every verdict names one.
FRONTENDS = ("megatron-core", "megatron-lm", "bridge")


@dataclass(frozen=True)
class Knob:
    """One row of the one table: a knob's recipe path, kind and defaults, and its name in every target.

    The plan section and field name per megatron-core release, the Megatron-LM argument (its dest;
    flags, negated forms and Megatron-LM's default come from Megatron-LM's own parser, stored in
    compiler/data/megatron_lm_args.json) and the Megatron-Bridge override path all live here, so
    emitters and lint-config never spell a Megatron name of their own.
    """

    field: str                 # Megatron's spelling; the canonical name
    path: str | None           # where a recipe sets it (dotted); None: derived or fact
    kind: str                  # bool | int | opt_int | enum | set | float | str
    default: object = None        # megatron-core's default (what lint-config assumes)
    domain: tuple = ()         # enum values (None allowed when listed) / set universe
    auto: bool = False         # may be left to the solver
    doc: str = ""
    bound: str | None = None   # another field this one never exceeds (e.g. layers per stage <= num_layers)
    # Defaults of the other front-ends where they differ from megatron-core's: ((frontend, value), ...)
    frontend_defaults: tuple = ()
    # plan section: tc | model | yarn | ddp | optimizer | training, or one of the training-I/O sections
    # (IO_SECTIONS: runtime | data | tokenizer | checkpoint | schedule | logging | eval); None: not in the plan
    section: str | None = None
    names: tuple = ()          # ((since_mcore, name), ...) the section's name per release, newest last; () = field
    # Megatron-LM argument dest ("" = the plan name; None = Megatron-LM has none; a tuple: every dest that
    # carries the value, e.g. the model's vocab is both --vocab-size and --padded-vocab-size)
    lm: str | tuple | None = ""
    # Megatron-Bridge override path(s): a tuple where Bridge keeps the value in several configs
    # ("" = model.<name> for tc/model rows; None = Bridge has none)
    bridge: str | tuple | None = ""
    unit: str = ""
    # Values spelled differently by Megatron-LM and Megatron-Bridge: ((plan value, Megatron's value), ...)
    lm_values: tuple = ()
    # What megatron-core derives when the knob is unset, as (op, a, b): op "*" or "//", a and b knob names
    # or ints (kv_channels: ("//", "hidden_size", "num_attention_heads")); () where it derives nothing
    unset: tuple = ()

    def derived(self, get) -> int | None:
        """The value megatron-core uses when this knob is unset (``get``: another knob's value), or None
        where it derives none or the operands are not positive integers."""
        if not self.unset:
            return None
        op, a, b = self.unset
        a, b = get(a) if isinstance(a, str) else a, get(b) if isinstance(b, str) else b
        if type(a) is not int or type(b) is not int or a <= 0 or b <= 0:  # noqa: E721 (a bool is not a size)
            return None
        return a * b if op == "*" else a // b

    def default_for(self, frontend: str = "megatron-core"):
        """The value this front-end uses when nobody sets the knob."""
        return dict(self.frontend_defaults).get(frontend, self.default)

    def name_for(self, mcore: int) -> str | None:
        """The field name in this megatron-core release (None: the release has no such field)."""
        chosen = None
        for since, name in self.names or ((0, self.field),):
            if mcore >= since:
                chosen = name
        return chosen

    def lm_dest(self, mcore: int) -> str | None:
        """The Megatron-LM argument that carries this knob (the first, where several do)."""
        dests = self.lm_dests(mcore)
        return dests[0] if dests else None

    def lm_dests(self, mcore: int) -> tuple:
        """Every Megatron-LM argument that carries this knob (() when Megatron-LM has none)."""
        if self.lm is None:
            return ()
        if self.lm == "":
            name = self.name_for(mcore)
            return (name,) if name else ()
        return self.lm if isinstance(self.lm, tuple) else (self.lm,)

    def megatron_value(self, value):
        """The value as Megatron-LM and Megatron-Bridge spell it (lm_values), else unchanged."""
        if self.lm_values and (value is None or isinstance(value, (str, bool, int, float))):
            return dict(self.lm_values).get(value, value)
        return value

    def plan_value(self, value):
        """The inverse of megatron_value: a Megatron spelling read back (lint-config)."""
        if self.lm_values and isinstance(value, str):
            back: dict = {}
            for p, m in self.lm_values:  # the first plan value of a shared spelling (NullTokenizer: null)
                if isinstance(m, str):
                    back.setdefault(m, p)
            if value not in self.domain and value in back:
                return back[value]
        return value

    @property
    def bridge_paths(self) -> tuple:
        if self.bridge is None:
            return ()
        if self.bridge != "":
            return self.bridge if isinstance(self.bridge, tuple) else (self.bridge,)
        return (f"model.{self.field}",) if self.section in ("tc", "model") else ()
