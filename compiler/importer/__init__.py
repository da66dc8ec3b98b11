"""`moeforge import`: recipe and model documents from what a team already has (a Megatron-LM launch, a
Bridge override list, a Hugging Face config.json: hf/), deriving what Megatron-LM derives, and writing them into a
project.

May import: moeforge.compiler.recipe, moeforge.compiler.knobs, moeforge.compiler.rules, moeforge.compiler.targets, moeforge.compiler.launch_reader,
moeforge.compiler.diagnostics, moeforge.compiler.project, moeforge.compiler.driver (the import compiles what it wrote) and
moeforge.compiler.lint.frontends (what Megatron-LM's validate_args rewrites, one list for import and lint-config).
"""
