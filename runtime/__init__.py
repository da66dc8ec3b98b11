"""moeforge runtime: executes a compiled plan.json on megatron-core (never imports the compiler).

Entry points: ``python -m moeforge.runtime.train PLAN.json`` (under torchrun/srun; moeforge's loop on synthetic
micro-batches), ``python -m moeforge.runtime.megatron PLAN.json`` (Megatron-LM's own loop), ``python -m moeforge.runtime.dryrun
PLAN.json --rank R`` (one rank's shard in a single process) and ``python -m moeforge.runtime.data_prepare`` (a corpus
tokenized into a Megatron dataset: the package data_prepare/). The packages follow a run's stages: plan/ (the
plan and the backend gate), launch/, preflight/, model/, data/, train/ and megatron/ (the two entry points and
their hooks), report/; README.md says which module does what.
"""
