"""The recipe as a document: load (YAML with source positions), compose (extends, platform, model,
command-line overrides), migrate (older schema versions to the current one), validate (JSON Schema,
located diagnostics), and the cache that lets a cold check skip unchanged work.

Owns: Document (document.py), Composed, the schema validators. May import: moeforge.compiler.diagnostics, moeforge.compiler.project,
moeforge.compiler.resources, moeforge.compiler.bounded. Nothing here knows a knob or a rule.
"""
