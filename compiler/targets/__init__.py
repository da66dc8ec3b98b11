"""What a resolved recipe becomes: plan.json (plan.py), Megatron-LM arguments (megatron_args.py), Megatron-Bridge
overrides (bridge_overrides.py), EXPLAIN.md (explain.py), rendered from the templates (emit.py), the build
directory they are swapped into whole, keeping what a run left there (builddir.py), and how a build runs as a
job (job.py: its interpreter, environment and command).

May import: compiler.recipe, compiler.knobs, compiler.rules, compiler.solver, compiler.diagnostics,
compiler.project, compiler.resources.
"""
