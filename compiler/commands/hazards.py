"""`moeforge hazards [RECIPE]`: the field hazards a recipe meets on its platform, or the whole catalogue.

With a recipe: those that apply (its knobs meet them and its platform's versions are affected), those that may
apply (a version the platform does not state decides; the fact to state is named), and those its knobs meet that
a version upgrade clears or its platform's versions already clear. Without: every hazard, with its evidence.
Why a command of its own: `check` reports what a recipe pins into a hazard, but a practitioner choosing a
container or an upgrade needs the whole picture, including what only the versions decide.

Exit codes as moeforge's: 0 the listing (whatever it holds), 1 a recipe that does not compile, 2 usage.
"""
from __future__ import annotations

import json

from moeforge.compiler.diagnostics import CompileError, printable, render_all
from moeforge.compiler.rules import hazards as H


DESCRIPTION = ("Field hazards: settings that pass Megatron's validation and then NaN, hang, crash or train the "
               "wrong thing, by software version.")


def arguments(p) -> None:
    """The recipe is optional: without it, the whole catalogue."""
    p.add_argument("recipe", nargs="?", help="recipe id (tiny-moe/cpu), path under recipes/, or builtin:ID; "
                                            "default: list the whole catalogue")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe value, e.g. --set parallelism.tp=2 (repeatable)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output: text (default) or json")


def run(args) -> int:
    """The whole hazard catalogue, or with a recipe the hazards it meets grouped by what its versions decide."""
    if not args.recipe:
        return _print(args.format, {"hazards": [_entry(h) for h in H.HAZARDS]}, _catalogue_text())
    from moeforge.compiler.driver import compile as compile_recipe  # lazy: only a recipe needs the compiler

    try:  # listed whatever the recipe's `hazards:` says (an error there would stop the listing)
        compiled = compile_recipe(args.recipe, list(args.overrides) + ["hazards=warn"], plan=False)
    except CompileError as exc:
        print(render_all(exc.diagnostics, args.format))
        return 1
    env, platform = compiled.resolved.env, compiled.composed.data.get("platform") or {}
    software = H.platform_versions(platform)
    groups = {"applies": [], "may apply": [], "upgrade clears": [], "cleared": []}
    for h in H.HAZARDS:
        if h.matches(env) is not True:
            continue
        state, missing = h.versions(software)
        item = {**_entry(h), "state": state, **({"state_to_decide": list(missing)} if missing else {})}
        groups[state].append(item)
        if state == "applies" and h.fixed_in:
            groups["upgrade clears"].append(item)
    doc = {"recipe": compiled.composed.recipe_id, "platform": platform.get("name"),
           "versions": {k: software[k] for k in sorted(software) if k in H.PACKAGES and software[k] is not None},
           **groups}
    return _print(args.format, doc, _recipe_text(doc))


def _entry(h: H.Hazard) -> dict:
    return {"id": h.id, "symptom": h.symptom, "summary": h.summary, "fix": h.fix_text,
            "fix_values": {k: v for k, v in h.fix.items()}, "applies_when": h.applies_when,
            "fixed_in": dict(h.fixed_in), "evidence": [{"url": e.url, "kind": e.kind, "note": e.note}
                                                       for e in h.evidence]}


def _lines(e: dict, indent: str = "  ") -> list[str]:
    out = [f"{e['id']} ({e['symptom']}): {e['summary']}"]
    if e["applies_when"]:
        out.append(indent + "applies when " + ", ".join(f"{p} {s}" for p, s in e["applies_when"].items())
                   + ("; fixed in " + ", ".join(f"{p} {v}" for p, v in e["fixed_in"].items())
                      if e["fixed_in"] else ""))
    else:
        out.append(indent + "open: every version")
    out.append(indent + f"fix: {e['fix']}")
    out += [indent + f"evidence ({ev['kind']}): {ev['url']}" for ev in e["evidence"]]
    return out


def _catalogue_text() -> list[str]:
    out = [f"{len(H.HAZARDS)} field hazards (symptom: nan | hang | crash | wrong-result | slowdown)", ""]
    for h in H.HAZARDS:
        out += _lines(_entry(h)) + [""]
    return out


def _recipe_text(doc: dict) -> list[str]:
    stated = ", ".join(f"{k} {v}" for k, v in doc["versions"].items()) or "none"
    out = [f"{doc['recipe']} on {doc['platform']} (versions: {stated})", ""]
    titles = {"applies": "apply", "may apply": "may apply (the platform does not state the version that decides)",
              "upgrade clears": "a version upgrade would clear", "cleared": "cleared by the platform's versions "
                                                                             "(a node with other versions would hit "
                                                                             "them; the plan lists them)"}
    for key, title in titles.items():
        items = doc[key]
        out.append(f"{title}: {len(items)}")
        for e in items:
            if key == "upgrade clears":
                out.append("  " + e["id"] + ": " + ", ".join(f"{p} {v}" for p, v in e["fixed_in"].items()))
                continue
            lines = _lines(e, "    ")
            if key == "may apply":
                lines.insert(1, "    state platform.software." + " / ".join(e["state_to_decide"]) + " to decide")
            out += ["  " + lines[0]] + lines[1:]
        out.append("")
    return out


def _print(fmt: str, doc: dict, text: list[str]) -> int:
    if fmt == "json":
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print("\n".join(printable(line) for line in text).rstrip("\n"))
    return 0
