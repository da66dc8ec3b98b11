"""Model construction, shared by both entry points and the dry run: ``build`` (TransformerConfig and
GPTModel chunks from the plan, parallel state), ``local_spec`` (megatron-core's local layer spec where
TE is absent), ``realised`` (what was built, against the plan), ``cpu_support`` (CUDA stand-ins on
CPU-only machines), ``loss`` (the one training loss) and ``dryrun`` (one rank's shard on the meta device)."""
