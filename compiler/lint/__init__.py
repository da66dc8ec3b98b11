"""`moeforge lint-config`: a flat Megatron configuration (a launch, an args file, a Bridge override list,
a mapping of megatron-core fields) checked against the rule catalogue the way each front-end reads it.

May import: moeforge.compiler.recipe, moeforge.compiler.knobs, moeforge.compiler.rules, moeforge.compiler.solver, moeforge.compiler.targets,
moeforge.compiler.launch_reader, moeforge.compiler.diagnostics.
"""
