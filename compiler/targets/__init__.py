"""What a resolved recipe becomes: plan.json (plan.py), Megatron-LM arguments, Megatron-Bridge overrides,
EXPLAIN.md, rendered from the templates (emit.py), and the build directory they are swapped into whole,
keeping what a run left there (builddir.py).

May import: compiler.recipe, compiler.knobs, compiler.rules, compiler.solver, compiler.diagnostics.
"""
