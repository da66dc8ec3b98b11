"""moeforge runtime: executes a compiled plan.json on megatron-core (never imports the compiler).

Entry points: ``python -m runtime.train PLAN.json`` (under torchrun/srun) and
``python -m runtime.dryrun PLAN.json --rank R`` (one rank's shard in a single process).
"""
