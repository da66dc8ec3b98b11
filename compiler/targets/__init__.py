"""What a resolved recipe becomes: plan.json (plan.py), Megatron-LM arguments (megatron_args.py), Megatron-Bridge
overrides (bridge_overrides.py), EXPLAIN.md (explain.py), rendered from the templates (emit.py), the build
directory they are swapped into whole, keeping what a run left there (builddir.py), and how a build runs as a
job (job.py: its interpreter, environment and command).

May import: moeforge.compiler.recipe, moeforge.compiler.knobs, moeforge.compiler.rules, moeforge.compiler.solver, moeforge.compiler.diagnostics,
moeforge.compiler.project, moeforge.compiler.resources.
"""
