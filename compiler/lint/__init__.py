"""`moeforge lint-config`: a flat Megatron configuration (a launch, an args file, a Bridge override list,
a mapping of megatron-core fields) checked against the rule catalogue the way each front-end reads it.

May import: compiler.recipe, compiler.knobs, compiler.rules, compiler.solver, compiler.targets,
compiler.launch_reader, compiler.diagnostics.
"""
