"""Training data: ``synthetic`` (seeded micro-batches every rank regenerates, moeforge's loop) and
``megatron_datasets`` (Megatron-LM's GPT datasets and the checks before step 1, its loop).
``moeforge.runtime.data_prepare`` (a corpus into a Megatron dataset) keeps its entry-point name."""
