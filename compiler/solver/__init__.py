"""From a composed recipe to resolved values: the solver's inputs (inputs.py: pins, auto knobs, platform facts),
what it takes and gives (values.py: Pin, Decision, Solution, Resolved), the
rules folded over the pins (problem.py), the exact finite fast path (finite.py), the z3 encoding (encoding.py),
the optimisation and provenance (solve.py), and, when a recipe cannot be solved, the explanation (conflicts.py:
minimal pins and fixes).

May import: moeforge.compiler.recipe, moeforge.compiler.knobs, moeforge.compiler.rules, moeforge.compiler.diagnostics. z3 is imported lazily
(a recipe finite.py settles, or one with nothing left to solve, never loads it).
"""
