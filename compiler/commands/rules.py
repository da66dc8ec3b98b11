"""`moeforge rules [ID...]`: the rule catalogue and the preferences, as text or JSON."""
from __future__ import annotations

import fnmatch
import json
import sys

from moeforge.compiler.diagnostics import printable
from moeforge.compiler.rules import CATALOGUE, PREFERENCES


def arguments(c) -> None:
    """rules' flags on its subparser (compiler/cli.py builds the parser from each command module)."""
    c.add_argument("ids", nargs="*", metavar="ID", help="rule or preference ids (case-insensitive; a trailing * "
                                                      "matches a prefix, e.g. EP_OVERLAP_*); default: all")
    c.add_argument("--format", choices=("text", "json"), default="text", help="output: text (default) or json")


def run(args) -> int:
    """Print the rules and preferences asked for; an unknown id is exit 2 with the nearest known ids."""
    rules, prefs = list(CATALOGUE), list(PREFERENCES)
    ids = getattr(args, "ids", None) or []
    if ids:
        known = [x.id for x in rules + prefs]
        missing = [i for i in ids if not any(fnmatch.fnmatchcase(k.upper(), i.upper()) for k in known)]
        if missing:
            import difflib  # lazy: only an unknown rule id needs it

            for i in missing:
                near = difflib.get_close_matches(i.upper(), known, n=3)
                print(printable(f"moeforge rules: no rule or preference {i!r}"
                                + (f"; did you mean {', '.join(near)}?" if near else "")), file=sys.stderr)
            return 2

        def wanted(x) -> bool:
            return any(fnmatch.fnmatchcase(x.id.upper(), i.upper()) for i in ids)
        rules, prefs = [r for r in rules if wanted(r)], [p for p in prefs if wanted(p)]
    if getattr(args, "format", "text") == "json":
        print(json.dumps({"rules": [{"id": r.id, "severity": r.severity, "silent": dict(r.silent) or None,
                                     "lint_only": r.lint_only, "origin": r.origin, "when": repr(r.when),
                                     "require": repr(r.require), "message": r.message,
                                     "megatron_message": r.megatron_message, "source": r.source, "fix": r.fix,
                                     "versions": [list(v) for v in r.versions], "evidence": r.evidence}
                                    for r in rules],
                          "preferences": [{"id": p.id, "weight": p.weight, "prefer": repr(p.prefer),
                                           "when": repr(p.when), "reason": p.reason} for p in prefs]},
                         indent=2, default=str))
        return 0
    for r in rules:
        print(f"{r.id}  [{r.severity}{', silent' if r.silent else ''}{', lint-config only' if r.lint_only else ''}; "
              f"{r.origin}]")
        print(f"    when {r.when!r}  require {r.require!r}")
        print(f"    {r.message}")
        if r.megatron_message:
            print(f"    megatron: {r.megatron_message}")
        print(f"    source: {r.source}")
        print(f"    fix: {r.fix}")
        if r.versions:
            print("    versions: " + ", ".join(f"{f} {spec}" for f, spec in r.versions))
    for p in prefs:
        print(f"{p.id}  [preference, weight {p.weight}]\n    prefer {p.prefer!r} when {p.when!r}\n    {p.reason}")
    return 0
