"""Megatron launches as teams already have them (shell scripts, args files, functional-test
model_config.yaml, Bridge override lists), read as Megatron-LM reads them: for lint-config and import.

May import: moeforge.compiler.knobs, moeforge.compiler.targets (the flag tables), moeforge.compiler.resources, moeforge.compiler.bounded (the one
bounded reader).
"""
