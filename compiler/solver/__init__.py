"""From a composed recipe to resolved values: the solver's inputs (pins, auto knobs, platform facts), the
rules folded over the pins (problem.py), the exact finite fast path (finite.py), the z3 encoding, and, when
a recipe cannot be solved, the explanation (conflicts.py: minimal pins and fixes).

May import: compiler.recipe, compiler.knobs, compiler.rules, compiler.diagnostics. z3 is imported lazily
(the cold check of an unchanged recipe never loads it).
"""
