"""Megatron launches as teams already have them (shell scripts, args files, functional-test
model_config.yaml, Bridge override lists), read as Megatron-LM reads them: for lint-config and import.

May import: compiler.knobs, compiler.targets (the flag tables), compiler.resources, compiler.bounded (the one
bounded reader).
"""
