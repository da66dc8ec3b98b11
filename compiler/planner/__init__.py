"""The layout planner (`moeforge plan-layout`): which layout to run a model on N GPUs of a platform.

space.py enumerates candidates (Layout arithmetic prunes first), search.py ranks them with the
analytic estimators (compiler/estimate) and confirms the best through the real pipeline (the rule
catalogue and solver of `check` are the only judge of legality), report.py prints them, emit.py
writes the winner as a recipe, cli.py is the command line.

May import: moeforge.compiler.driver, moeforge.compiler.estimate and everything below them (compiler.LAYERS).
"""
