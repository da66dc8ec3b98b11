"""The one table: every knob's recipe path, kind, defaults, megatron-core field, Megatron-LM flag and Bridge
path (table.py, rows in row.py, model.py, facts.py, training_io.py), the recipe's JSON Schema generated from it
(recipe_schema.py), and what the table's values mean: the parallel layout's arithmetic (layout.py,
pipeline_layout.py), per-layer patterns (layer_pattern.py), the Megatron field catalogue per release (fields.py),
version numbers (versions.py) and the recipe path a field is known by (display.py).

May import: moeforge.compiler.diagnostics, moeforge.compiler.resources, moeforge.compiler.recipe (the recipe schema's names and version).
Nothing here reads a rule, solves or emits.
"""
