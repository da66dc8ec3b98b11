"""What a resolved recipe becomes: plan.json (plan.py), Megatron-LM arguments, Megatron-Bridge overrides,
EXPLAIN.md, and the build directory written atomically from the templates (emit.py).

May import: compiler.recipe, compiler.knobs, compiler.rules, compiler.solver, compiler.diagnostics.
"""
