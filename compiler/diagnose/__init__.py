"""`moeforge diagnose`: a run's step attributed to the domain documents' walls (memory, communication, host
overhead, compute) from its report.json and, when the runtime was asked for one (--profile), its profiler
trace; the dominant wall named with the numbers behind it, and the documents' fixes for that wall as
`--set` values the compiler has verified, each with the calibrated planner's estimate.

trace.py reads the trace, walls.py attributes the step, fixes.py compiles and prices the fixes, cli.py is
the command.
"""
