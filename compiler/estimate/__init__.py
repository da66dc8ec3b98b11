"""Analytic estimates for the layout planner: per-rank parameters and memory (memory.py, with the
activation terms and the pipeline schedule in activations.py; docs/memory-model.md), and the step
time (steptime.py, with flops.py, comm.py, steptime_terms.py, steptime_constants.py; docs/layout-model.md),
with the constants a platform's calibration sets (calibration.py; the fitting is compiler/calibrate/).

Pure Python over a compiled plan's transformer_config/model sections and a compiler/knobs/layout.py
Layout; never imports torch or megatron.  Parameter counts are checked against what
megatron-core builds (tests/compiler/test_estimate_memory.py, fixture tests/data/
layout_param_counts.json), FLOPs against Megatron-LM's own count (tests/compiler/
test_estimate_steptime.py, fixture tests/data/megatron_flops.json), step times against the
measured runs in docs/layout-model.md.

May import: moeforge.compiler.knobs.
"""
