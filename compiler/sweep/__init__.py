"""Sweeps: one recipe, many variants, one job array, one results table.

Owns, one concern per module:
  document   the sweep document (schemas/sweep.v1.json): loaded with positions, schema-checked, its knob
             paths and values checked against the recipe, platform and model schemas where they stand
  points     the points (axes x explicit points), each compiled through the same pipeline as `check`
  collapse   points whose launches are identical, and the swept knob that changed nothing, with why
  estimates  the planner's estimate of a point (compiler/estimate: step time, memory, GPU-hours)
  builds     build/sweeps/NAME/: one build directory per point and the manifest sweep.json
  status     one run's record (status.json) and how a run ended: ok, failed, cancelled, oom, ...
  local      the points one after another on this machine, with progress
  watchdog   one local run's session leader: the run's process group dies with its launcher
  inputs     the build directory's files read as a user's input: bounded, shape-checked, located errors
  slurm      one job array (templates/sweep.sbatch.j2), its submission and its progress
  k8s        one PyTorchJob per point, labelled with the sweep and the point
  results    the results table (schemas/results.v1.json): measured beside estimated, CSV, JSON, text
  plots      throughput and peak memory per point, as a PNG and a self-contained HTML page (matplotlib)
  report     what `moeforge sweep check` and `sweep launch` print

May import the stages below it (recipe, driver, targets, estimate, diagnostics, project); the job's Python and
environment, which `moeforge launch` uses too, are compiler/targets/job.py's. Never torch or megatron (results
read the report.json files the runtime writes); matplotlib only in plots, imported when a plot is drawn. The CLI
handlers are compiler/commands/sweep.py.
"""
