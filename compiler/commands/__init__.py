"""The CLI's commands (compiler/cli.py parses and dispatches): check, diff, matrix, launch, init/new,
dryrun, data prepare, sweep and results. Thin: they call the stages below and print.

May import anything in compiler/ below it (compiler.LAYERS), never moeforge.compiler.cli.
"""
