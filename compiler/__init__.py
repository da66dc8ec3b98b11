"""moeforge compiler: YAML recipes -> checked, solved, emitted Megatron launches.

Never imports torch, megatron or transformer_engine (a test enforces it).
"""
__version__ = "0.1.0"

# The packages (and top-level modules) of compiler/, lowest first: each imports only from layers below its
# own, never from its own layer's others or from above (tests/compiler/test_layers.py). docs/architecture.md
# says what each holds and where a new knob, rule, front-end or target goes.
LAYERS = (
    # what every stage reports, where moeforge's files are, atomic writes, the one bounded reader of a user's files
    ("diagnostics", "resources", "files", "bounded"),
    ("project",),                             # the user's project: its root, recipes/, build/, schema copies
    ("recipe",),                              # the document: load, compose, migrate, validate
    ("knobs",),                               # the one table, layout arithmetic, versions, display names
    ("rules",),                               # the rule catalogue (expressions over knob fields)
    ("solver",),                              # pins and rules -> values, or the conflicts explained
    ("targets",),                             # a resolved recipe -> plan.json, launch files, Megatron names
    ("driver",),                              # compile(): the stages wired together
    ("estimate", "launch_reader"),            # memory and step-time models; launches as teams write them
    ("lint",),                                # lint-config
    ("importer", "planner"),                  # import (reads a launch as lint-config does), plan-layout
    ("calibrate",),                           # platform constants fitted to measured runs
    ("diagnose",),                            # a run's dominant wall and its verified fixes
    ("sweep",),                               # sweeps: points, job arrays, results
    ("commands",),                            # the commands, one module each, and their registry (COMMANDS)
    ("cli",),                                 # the command line
    ("__main__",),                            # python -m moeforge.compiler
)
