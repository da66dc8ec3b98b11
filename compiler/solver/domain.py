"""What the solver knows of a field before any rule: its row of the knob table (SPEC), the layout sizes it
derives (DERIVED, from INPUTS), the range of its integers, and how much work z3 may do.

Why a module of its own: the fold (problem.py), the exact finite solver (finite.py), the z3 encoding
(encoding.py) and the explanation (conflicts.py) must read a field alike; none of them imports another
for it. Pure Python: the cold check reads it without z3.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from compiler.knobs import layout as L
from compiler.knobs import table as K

SPEC = {**K.BY_FIELD, **K.FACT_BY_FIELD}
DERIVED = ("world_size", "data_parallel_size", "expert_data_parallel_size")
INPUTS = {"world_size": ("num_nodes", "gpus_per_node"),
          "data_parallel_size": ("world_size",) + L.ATTENTION_FACTORS,
          # expert TP falls back to TP (compiler/knobs/layout.py effective_etp)
          "expert_data_parallel_size": ("world_size", "tensor_model_parallel_size") + L.EXPERT_FACTORS}
MAX_INT = 1 << 20
SET_VALUE = "(set)"  # a float or string knob that the solver only knows to be set

SOLVE_MS = 10_000      # the main optimisation; a recipe takes milliseconds, this only bounds the pathological
# Explanation and provenance queries are bounded in z3's resource units, not in seconds: a bound in seconds made
# what an error says (its conflict, pins and fixes) depend on how busy the machine was. Of 9,587 queries explaining
# 790 random refusals of catalogue variants, every one z3 decided took under 2M units (0.43 s at most here); the
# nonlinear layout questions it cannot settle stop at the bound (it does 1.3-15M units a second, by query).
QUERY_RLIMIT = 2_000_000      # one explanation or provenance query
EXPLAIN_RLIMIT = 12_000_000   # all queries explaining one failed recipe together


class Budget:
    """z3 units left to the explanation in progress (inf: none in progress); encoding.check charges it."""

    left = math.inf

    def spent(self) -> bool:
        return self.left <= 0

    @contextmanager
    def explaining(self):
        """EXPLAIN_RLIMIT units for the queries inside the block, together."""
        self.left = EXPLAIN_RLIMIT
        try:
            yield
        finally:
            self.left = math.inf


BUDGET = Budget()
