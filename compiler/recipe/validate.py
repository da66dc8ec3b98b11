"""JSON Schema checks (Draft 2020-12, via jsonschema) turned into located diagnostics.

Every error is reported at the file:line:col of the offending value; unknown keys get a
did-you-mean from the keys the schema allows at that place.
"""
from __future__ import annotations

import json
from functools import lru_cache

from moeforge.compiler.diagnostics import Diagnostic, Position, error
from moeforge.compiler.recipe import cache, integers
from moeforge.compiler.recipe.document import KEY
from moeforge.compiler.recipe.migrate import declared_version
from moeforge.compiler.resources import KINDS, SCHEMAS  # noqa: F401 (KINDS: read as validate.KINDS too)

MAX_UNKNOWN_KEYS = 20  # unknown keys of one mapping reported one by one; the rest in one line


@lru_cache(maxsize=None)
def validator(name: str):
    """A jsonschema validator of the draft a schemas/ file declares; only an uncached document pays the import."""
    import jsonschema  # lazy: an unchanged document is known valid (recipe/cache.py) without it

    schema = json.loads((SCHEMAS / name).read_text())
    # the schemas themselves are checked against their meta-schema by the tests, not on every run
    return jsonschema.validators.validator_for(schema)(schema)


def check(data, schema_name: str, pos_of) -> list[Diagnostic]:
    """All schema violations of `data`; `pos_of(path)` gives a Position for a path."""
    return accept(data, schema_name, pos_of)[0]


def accept(data, schema_name: str, pos_of) -> tuple[list[Diagnostic], list[tuple]]:
    """(every schema violation of `data`, and when there is none the paths of its integral floats that the
    schema wants as integers: moeforge.compiler.recipe.integers). A document this schema accepted before
    (moeforge.compiler.recipe.cache) is not validated again, and its paths are read back with the verdict."""
    candidates = integers.floats(data)
    entry = cache.key(SCHEMAS / schema_name, data)
    known = cache.valid(entry, detailed=bool(candidates))
    if known is not None:
        return [], known
    v = validator(schema_name)
    out = []
    for err in sorted(v.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.validator)):
        out.extend(diagnose(err, pos_of, v.schema))
    if out:
        return dedupe(out), []
    paths = integers.wanted(v.schema, candidates)
    cache.remember_valid(entry, paths if candidates else None)
    return [], paths


def diagnose(err, pos_of, root_schema) -> list[Diagnostic]:
    """One jsonschema error as located diagnostics (an unknown key with a did-you-mean)."""
    path = tuple(err.absolute_path)
    where = ".".join(map(str, path)) or "(document)"
    if err.validator == "additionalProperties":
        import difflib  # lazy: only an unknown key needs it

        allowed = sorted(err.schema.get("properties", {}))
        unknown = sorted(set(err.instance) - set(allowed))
        out = []
        for key in unknown[:MAX_UNKNOWN_KEYS]:
            guess = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            help_ = f"did you mean '{guess[0]}'?" if guess else f"allowed keys here: {', '.join(allowed)}"
            out.append(error("E_UNKNOWN_KEY", f"unknown key '{key}' in {where}", pos_of(path + (key, KEY)),
                             help=help_))
        if len(unknown) > MAX_UNKNOWN_KEYS:  # a generated or corrupted document: the first few say enough
            out.append(error("E_UNKNOWN_KEY", f"{len(unknown) - MAX_UNKNOWN_KEYS} more unknown keys in {where}",
                             pos_of(path + (unknown[MAX_UNKNOWN_KEYS], KEY)),
                             help=f"allowed keys here: {', '.join(allowed)}"))
        return out
    if err.validator == "required":
        return [error("E_MISSING_KEY", f"{where}: {err.message}", pos_of(path))]
    if err.validator in ("anyOf", "oneOf") and err.context:
        # the branch that got furthest explains best; 'auto' alternatives say so
        expected = sorted({_expected(sub) for sub in err.context})
        return [error("E_SCHEMA", f"{where}: {_show(err.instance)} is not {' or '.join(expected)}", pos_of(path))]
    if err.validator == "const" and path == ("schema",):
        return [error("E_SCHEMA_VERSION", f"schema: expected '{err.validator_value}', got {_show(err.instance)}",
                      pos_of(path), help="run `moeforge migrate` to bring the document to the current version")]
    if err.validator == "const" and err.schema.get("description"):  # a value moeforge cannot honour yet: why
        only = _show(err.validator_value)
        return [error("E_SCHEMA", f"{where}: {_show(err.instance)} is not supported (only {only})", pos_of(path),
                      help=err.schema["description"])]
    return [error("E_SCHEMA", f"{where}: {_message(err)}", pos_of(path))]


def _expected(err) -> str:
    if err.validator == "const":
        return repr(err.validator_value)
    if err.validator == "type":
        t = err.validator_value
        return " or ".join(t) if isinstance(t, list) else t
    if err.validator == "enum":
        return "one of " + ", ".join(_show(v) for v in err.validator_value)
    return _message(err)


def _message(err) -> str:
    if err.validator == "enum":
        return f"{_show(err.instance)} is not one of {', '.join(_show(v) for v in err.validator_value)}"
    if err.validator == "type":
        return f"expected {err.validator_value}, got {_show(err.instance)}"
    return err.message


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    text = json.dumps(value)
    return text if len(text) < 60 else text[:57] + "..."


def dedupe(diags):
    """Drop repeats of one (code, message, position), keeping order: several schema errors can say one thing."""
    seen, out = set(), []
    for d in diags:
        key = (d.code, d.message, d.pos)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def document_schema(data, default_kind: str) -> str:
    """Which schema file a document declares (`schema: moeforge/<kind>/v<N>`)."""
    version = declared_version(data)
    if version:
        name = f"{version[0]}.v{version[1]}.json"
        if (SCHEMAS / name).exists():
            return name
    return f"{default_kind}.v{KINDS[default_kind]}.json"


def missing_schema(data, file: str) -> list[Diagnostic]:
    """E_MISSING_SCHEMA for a document without `schema:`: its kind and version, hence its migrations, are unknown."""
    if not isinstance(data, dict) or "schema" not in data:
        return [error("E_MISSING_SCHEMA", "the document does not declare its schema", Position(file, 1, 1),
                      help="add `schema: moeforge/recipe/v3` (or platform/v1, model/v1, sweep/v1) at the top")]
    return []
