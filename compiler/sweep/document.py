"""The sweep document: read with positions, checked against schemas/sweep.v1.json, and each knob path and
value checked against the schema of the document it lands in (recipe, or platform / model for paths under
platform. and model.), so a typo is one located line with a did-you-mean before anything is compiled."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.recipe import validate
from moeforge.compiler.diagnostics import CompileError, Diagnostic, Note, Position, error
from moeforge.compiler.recipe.document import KEY, Document
from moeforge.compiler.recipe.load import load_file
from moeforge.compiler.recipe.migrate import MOVED_KEYS, upgrade_document

SCHEMA = f"sweep.v{validate.KINDS['sweep']}.json"
SECTIONS = ("set", "axes", "points")
DEFAULTS = {"repeats": 1, "warmup_steps": 1}
LAUNCH_DEFAULTS = {"target": "local", "concurrency": 4, "timeout_s": 86400}


@dataclass(frozen=True)
class Knob:
    """One knob setting in the document: its path, value and where it stands."""

    path: tuple          # ("moe", "overlap", "ep_comm"), moved keys already renamed
    value: object
    key_pos: Position    # the key's own position
    value_pos: Position

    @property
    def name(self) -> str:
        """The knob's dotted path, the `--set` key it becomes."""
        return ".".join(self.path)


@dataclass(frozen=True)
class Sweep:
    file: str                      # the display path
    name: str
    recipe: str
    fixed: tuple                   # Knob, ...: `set`, applied to every point
    axes: tuple                    # (path, (Knob per value, ...)), ...
    points: tuple                  # (Knob, ...) per explicit point
    repeats: int
    warmup_steps: int
    launch: dict
    description: str | None = None
    notes: tuple = ()              # advice found while reading (a moved knob path)
    doc: Document | None = field(default=None, compare=False, repr=False)

    @property
    def swept(self) -> tuple:
        """Every knob path a point may set, in the order they first appear."""
        names = [p for p, _ in self.axes] + [k.path for pt in self.points for k in pt]
        return tuple(dict.fromkeys(names))


def find(name: str) -> Path:
    """A sweep file: a path as given, else recipes/sweeps/NAME.yaml under the project root."""
    given = Path(name)
    if given.is_file():
        return given
    for candidate in (project.root() / name, project.recipes() / "sweeps" / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    raise CompileError([error("E_SWEEP_NOT_FOUND", f"no sweep file {name}", Position(name),
                              help="give a sweep file (recipes/sweeps/NAME.yaml) or its name; `moeforge new sweep NAME "
                                   "RECIPE` writes one")])


def display(path: Path) -> str:
    """A path as messages show it: relative to the project root when under it, else as given."""
    try:
        return str(path.absolute().relative_to(project.root().absolute()))
    except ValueError:
        return str(path)


def load(name: str) -> Sweep:
    """The sweep in file or name `name`, checked; CompileError with every problem found otherwise."""
    path = find(name)
    doc = load_file(path, display(path))
    if not isinstance(doc.data, dict):
        raise CompileError([error("E_NOT_A_MAPPING", "a sweep must be a mapping", doc.pos(()))])
    doc = upgrade_document(doc)
    diags = validate.missing_schema(doc.data, doc.file)
    if not diags:
        diags = validate.check(doc.data, validate.document_schema(doc.data, "sweep"), doc.pos)
    if diags:
        raise CompileError(diags)
    return _sweep(doc)


def _sweep(doc: Document) -> Sweep:
    data, diags, notes = doc.data, [], []

    def knob(section: tuple, key: str, value, value_path: tuple) -> Knob:
        parts = tuple(key.split("."))
        moved = MOVED_KEYS.get(parts)
        if moved:
            notes.append(Diagnostic("advice", "SCHEMA_OLD_VERSION", f"{key} is now {'.'.join(moved)}",
                                    doc.pos(section + (key, KEY)), help=f"write {'.'.join(moved)}"))
        k = Knob(moved or parts, value, doc.pos(section + (key, KEY)), doc.pos(value_path))
        diags.extend(check_knob(k))
        return k

    fixed = tuple(knob(("set",), key, v, ("set", key)) for key, v in (data.get("set") or {}).items())
    axes = []
    for key, values in (data.get("axes") or {}).items():
        knobs = tuple(knob(("axes",), key, v, ("axes", key, i)) for i, v in enumerate(values))
        axes.append((knobs[0].path, knobs))
    points = tuple(tuple(knob(("points", i), key, v, ("points", i, key)) for key, v in point.items())
                   for i, point in enumerate(data.get("points") or ()))
    diags += _repeated_axes(axes, doc)
    if diags:
        raise CompileError(validate.dedupe(diags))
    return Sweep(doc.file, data["name"], data["recipe"], fixed, tuple(axes), points,
                 data.get("repeats", DEFAULTS["repeats"]), data.get("warmup_steps", DEFAULTS["warmup_steps"]),
                 {**LAUNCH_DEFAULTS, **(data.get("launch") or {})}, data.get("description"), tuple(notes), doc)


def _repeated_axes(axes, doc) -> list:
    """Two spellings of one knob (an old and a moved path) would fight over one value: refused."""
    seen, out = {}, []
    for path, knobs in axes:
        if path in seen:
            out.append(error("E_SWEEP_AXIS_TWICE", f"the axes name {'.'.join(path)} twice", knobs[0].key_pos,
                             notes=(Note("first here", seen[path]),), help="keep one of them"))
        seen.setdefault(path, knobs[0].key_pos)
    return out


# --------------------------------------------------------------------------- knob paths and values
def _schema_of(path: tuple) -> tuple[str, tuple]:
    """(schema file, path inside it) of a knob path: platform.* and model.* land in those documents."""
    if len(path) > 1 and path[0] in ("platform", "model"):
        return f"{path[0]}.v{validate.KINDS[path[0]]}.json", path[1:]
    return f"recipe.v{validate.KINDS['recipe']}.json", path


def check_knob(k: Knob) -> list[Diagnostic]:
    """The knob's path against the schema of its document (unknown keys with a did-you-mean) and its value
    against the schema there, each at its place in the sweep file."""
    schema_name, inner = _schema_of(k.path)
    v = validate.validator(schema_name)
    nested: object = k.value
    for part in reversed(inner):
        nested = {part: nested}
    out = []
    for err in v.iter_errors(nested):
        where = tuple(err.absolute_path)
        if err.validator == "additionalProperties":
            if where != inner[: len(where)] or len(where) >= len(inner):
                continue
            unknown = inner[len(where)]
            allowed = sorted(err.schema.get("properties", {}))
            guess = difflib.get_close_matches(unknown, allowed, n=1, cutoff=0.6)
            prefix = ".".join(k.path[: len(k.path) - len(inner) + len(where)])
            out.append(error("E_UNKNOWN_KNOB", f"unknown knob {k.name}: no '{unknown}' in "
                             f"{prefix or 'a ' + schema_name.split('.')[0]}", k.key_pos,
                             help=f"did you mean '{'.'.join(k.path[:len(k.path) - len(inner) + len(where)] + (guess[0],))}'?"
                             if guess else f"allowed keys here: {', '.join(allowed)}"))
        elif where[: len(inner)] == inner and err.validator != "required":
            out.append(_value_error(k, err))
        elif where == inner[: len(where)] and err.validator != "required" and not _takes_mapping(err.schema):
            leaf = ".".join(k.path[: len(k.path) - len(inner) + len(where)])
            out.append(error("E_UNKNOWN_KNOB", f"unknown knob {k.name}: {leaf} is a value, not a section with keys",
                             k.key_pos, help=f"set {leaf} itself, or name a knob beside it"))
    return validate.dedupe(out)


def _takes_mapping(schema) -> bool:
    """Whether a schema may accept a mapping (a section): a knob path may go on past it."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return True
    types = schema.get("type")
    if types is not None:
        return "object" in ([types] if isinstance(types, str) else types)
    branches = [*schema.get("anyOf", ()), *schema.get("oneOf", ()), *schema.get("allOf", ())]
    if branches:
        return any(_takes_mapping(b) for b in branches)
    return "enum" not in schema and "const" not in schema


def _value_error(k: Knob, err) -> Diagnostic:
    diag = validate.diagnose(err, lambda _path: k.value_pos, None)[0]
    help_ = diag.help
    if isinstance(err.instance, str) and err.validator in ("enum", "anyOf", "oneOf"):
        allowed = [x for e in [err, *(err.context or ())] if e.validator in ("enum", "const")
                   for x in (e.validator_value if e.validator == "enum" else [e.validator_value]) if isinstance(x, str)]
        guess = difflib.get_close_matches(err.instance, allowed, n=1, cutoff=0.6)
        help_ = f"did you mean '{guess[0]}'?" if guess else help_
    return Diagnostic(diag.severity, diag.code, f"{k.name}: " + diag.message.split(": ", 1)[-1], k.value_pos,
                      help=help_)
