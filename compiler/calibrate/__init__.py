"""Calibration: measured runs (report.json files, sweeps, Megatron-LM logs) fit a platform's constants.

runs.py reads the runs, megatron_log.py Megatron-LM's log lines, fit.py the step-time constants
(scipy, imported only here), memory_fit.py the activation and allocator terms, probes.py the changed runs
that could settle a constant the runs cannot determine (fit.py names the one that does), document.py writes
the calibration document (schemas/calibration.v1.json), cli.py is `moeforge calibrate`.  The estimates read a calibration back
through compiler/estimate/calibration.py, which never imports this package.
"""
