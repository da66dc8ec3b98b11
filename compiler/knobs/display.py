"""How a recipe author knows a field: its recipe path, else Megatron's name (every diagnostic, fix and
explanation names a knob this way)."""
from __future__ import annotations

from moeforge.compiler.knobs.table import BY_FIELD


def display(field: str) -> str:
    """The knob's recipe path (parallelism.ep), else the field's own name (world_size)."""
    k = BY_FIELD.get(field)
    return k.path if k and k.path else field
