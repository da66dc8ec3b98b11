"""`moeforge import`: recipe and model documents from what a team already has (a Megatron-LM launch, a
Bridge override list, a Hugging Face config.json: hf/), deriving what Megatron-LM derives, and writing them into a
project.

May import: compiler.recipe, compiler.knobs, compiler.rules, compiler.targets, compiler.launch_reader,
compiler.diagnostics, compiler.project, compiler.driver (the import compiles what it wrote) and
compiler.lint.frontends (what Megatron-LM's validate_args rewrites, one list for import and lint-config).
"""
