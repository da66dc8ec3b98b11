"""Strategies, isolation and property checks shared by the fuzz tests (tests/fuzz/test_*.py).

Nothing here writes into the repository: every recipe tree, build root and lint input lives in
a pytest tmp directory (a copy of recipes/, see conftest.py).

Isolation: every example that runs the compiler runs in a forked child (`isolated`), with a
wall-clock limit. The child inherits the warm interpreter (z3, jsonschema, the compiled schema
validators), so an example costs a fork (milliseconds), and a hang (z3 does not return to
Python, so no signal or hypothesis deadline can interrupt it) becomes a failing example instead
of a stuck test run. Results come back as plain data (status, diagnostics, traceback, output).
"""
from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import pickle
import select
import signal
import subprocess
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hypothesis import settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
SCHEMAS = REPO / "schemas"
PROFILE = "long" if os.environ.get("MOEFORGE_FUZZ", "").lower() == "long" else "ci"
# per-example wall-clock limit of the forked child (the "never a hang" bound)
EXAMPLE_TIMEOUT = {"ci": 20.0, "long": 60.0}[PROFILE]
OUTPUTS = ("plan.json", "torchrun.sh", "launch.sbatch", "pytorchjob.yaml", "env.sh", "megatron-lm.args",
           "bridge.overrides", "EXPLAIN.md")
SHELL_OUTPUTS = ("torchrun.sh", "launch.sbatch", "env.sh")


def fuzz_settings(weight: float = 1.0, **kw) -> settings:
    """The active profile (conftest.py registers ci/long), scaled: weight x its max_examples."""
    parent = settings.get_profile(PROFILE)
    return settings(parent, max_examples=max(1, int(parent.max_examples * weight)), **kw)


# ----------------------------------------------------------------------------- the catalogue

def catalogue_ids(root: Path = RECIPES) -> list[str]:
    from moeforge.compiler.commands.check import recipe_ids

    return recipe_ids(root)


RECIPE_IDS = catalogue_ids()
PLATFORMS = sorted(p.stem for p in (RECIPES / "platforms").glob("*.yaml"))
MODELS = sorted(p.stem for p in (RECIPES / "models").glob("*.yaml"))
RECIPE_TEXT = {rid: (RECIPES / f"{rid}.yaml").read_text(encoding="utf-8") for rid in RECIPE_IDS}
RECIPE_DATA = {rid: yaml.safe_load(text) for rid, text in RECIPE_TEXT.items()}
PLATFORM_DATA = {p: yaml.safe_load((RECIPES / "platforms" / f"{p}.yaml").read_text()) for p in PLATFORMS}
MODEL_DATA = {m: yaml.safe_load((RECIPES / "models" / f"{m}.yaml").read_text()) for m in MODELS}


def _schema_paths(schema: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, sub in (schema.get("properties") or {}).items():
        out.append(prefix + (key,))
        if isinstance(sub, dict):
            out += _schema_paths(sub, prefix + (key,))
    return out


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


RECIPE_PATHS = sorted(set(_schema_paths(_schema("recipe.v2.json"))))
MODEL_PATHS = sorted(set(_schema_paths(_schema("model.v1.json"))))
PLATFORM_PATHS = sorted(set(_schema_paths(_schema("platform.v1.json"))))


def _knobs():
    from moeforge.compiler.knobs import table as K

    return K


PLATFORM_VALUES = {
    "gpu.compute_capability": ["9.0", "10.0", "8.0", "12.0", "10.3"],
    "gpu.name": ["NVIDIA H100 80GB HBM3", "NVIDIA B200", "NVIDIA GB200", "NVIDIA A100-SXM4-80GB", "RTX"],
    "gpu": [None],
    "distributed_backend": ["nccl", "gloo"],
    "container_image": [None, "nvcr.io/nvidia/pytorch:25.01-py3"],
}


def knob_domain(path: tuple) -> list:
    """Plausible values for a recipe/model/platform path (from the knob table): reach the solver."""
    K = _knobs()
    dotted = ".".join(path)
    if dotted in PLATFORM_VALUES:
        return PLATFORM_VALUES[dotted]
    k = K.BY_PATH.get(dotted) or K.BY_PATH.get("model." + dotted)
    if k is None:
        for fact in K.FACTS:
            if fact.path == "platform." + dotted:
                k = fact
    if k is None:
        return []
    vals: list = []
    if k.kind == "bool":
        vals = [True, False]
    elif k.kind in ("int", "opt_int"):
        vals = [1, 2, 4, 8, 16, 3, 64] + ([None] if k.kind == "opt_int" else [])
    elif k.kind in ("enum",):
        vals = list(k.domain)
    elif k.kind == "set":
        vals = [[], list(k.domain[:1]), list(k.domain[:3]), None]
    elif k.kind == "float":
        vals = [0.5, 1.0, 1e-4, None]
    elif k.kind == "version":
        vals = ["0.16.1", "0.19.0", "2.9.0", "2.12.0", None, "1"]
    if k.auto:
        vals.append("auto")
    return vals


# ----------------------------------------------------------------------------- strategies

# characters that have broken parsers, quoting and number handling before
TRICKY = ("$`'\"\\;|&<>(){}[]*?!#~%^=,:\n\r\t\x00\x7f\x85\u2028\u00a0 "
          "²³¹١٢５\u0660\u06f1éß中\U0001f600-._/+")
ALPHABET = st.sampled_from(TRICKY) | st.characters(codec="utf-8", exclude_categories=("Cs",))

small_ints = st.integers(min_value=-3, max_value=130)
# large, and large primes: a node count of 65537 once kept z3 busy for minutes while explaining why
# the layout cannot work (BUG-8, test_found_bugs.py); the solver now bounds each query
special_ints = st.sampled_from([0, 1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096, 2**31, 2**32, 2**63, -2**63,
                                10**30, -1, 7919, 65537, 1000000007])
ints = small_ints | special_ints
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1e-4, 1.0, 1e308])
words = st.sampled_from(["auto", "", "true", "false", "null", "~", "yes", "no", "on", "1", "1.0", "0x10", "bf16",
                         "fp8", "alltoall", "flex", "allgather", "deepep", "hybridep", "ncclep", "h100", "cpu",
                         "tiny-moe", "transformer_engine", "local", "full", "selective", "0.16.1", "2.9.0",
                         "../x", "/etc/passwd", "$(touch pwned)", "a b", "-", "--help", "%s%n", "{x}", "{0}"])
texts = st.text(ALPHABET, max_size=24) | words
scalars = st.none() | st.booleans() | ints | floats | texts
keys = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz_0123456789-. é"), min_size=0, max_size=12) | \
    st.sampled_from(["schema", "name", "platform", "model", "extends", "auto", "moe", "tp", "<<", "null", "1"])
values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(keys, c, max_size=4),
                      max_leaves=8)


@st.composite
def value_for(draw, path: tuple):
    """A value for `path`: usually one the solver understands, sometimes anything at all."""
    domain = knob_domain(path)
    if domain and draw(st.integers(0, 3)) > 0:
        return draw(st.sampled_from(domain))
    return draw(values)


def _get(data, path):
    node = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _set(data: dict, path: tuple, value) -> None:
    node = data
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _delete(data: dict, path: tuple) -> None:
    parent = _get(data, path[:-1]) if len(path) > 1 else data
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def existing_paths(data, prefix=()) -> list[tuple]:
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (k,))
            out += existing_paths(v, prefix + (k,))
    return out


REFERENCE_NAMES = {
    "platform": PLATFORMS + ["", "nope", "../models/tiny-moe", "../tiny-moe/cpu", "cpu/../cpu", "/etc/passwd",
                             "CPU", "cpu.yaml", "fuzz-platform"],
    "model": MODELS + ["", "nope", "../platforms/cpu", "tiny-moe/../tiny-moe", "fuzz-model"],
    "extends": [f"{rid}" for rid in RECIPE_IDS] + [f"../{rid}.yaml" for rid in RECIPE_IDS[:4]] +
               ["fuzz-case.yaml", "tiny-moe/fuzz-case", "../../outside.yaml", "/etc/passwd.yaml", "", "nope.yaml",
                "x/../y"],
    "schema": ["moeforge/recipe/v1", "moeforge/recipe/v2", "moeforge/recipe/v3", "moeforge/recipe/v0",
               "moeforge/platform/v1", "moeforge/model/v1", "moeforge/plan/v1", "moeforge/recipe/v²",
               "moeforge/recipe/v٢", "moeforge/recipe/v１", "moeforge/recipe/", "moeforge", "recipe/v2", ""],
}


KNOB_PATHS = None


def knob_paths(prefix: str = "") -> list[tuple]:
    """Recipe paths of the solver's knobs (prefix "model." for the model document's)."""
    K = _knobs()
    return sorted(tuple(k.path[len(prefix):].split(".")) for k in K.KNOBS
                  if k.path and k.path.startswith(prefix) and (prefix or not k.path.startswith("model.")))


def knob_paths_flat() -> list[str]:
    """Megatron field names of the knobs and facts (the keys of a lint-config mapping)."""
    K = _knobs()
    return sorted(set(K.BY_FIELD) | set(K.FACT_BY_FIELD))


@st.composite
def mild_mutation(draw, data: dict, paths: list[tuple]):
    """A change a recipe author could make: a knob to another plausible value, a key removed,
    another platform or model. Most such recipes get past the schema and reach the solver."""
    kind = draw(st.sampled_from(["knob"] * 6 + ["delete", "platform", "model"]))
    if kind == "knob":
        path = draw(st.sampled_from(paths))
        domain = knob_domain(path)
        return ("set", path, draw(st.sampled_from(domain)) if domain else draw(values))
    if kind == "delete":
        present = [p for p in existing_paths(data) if len(p) > 1]
        return ("delete", draw(st.sampled_from(present))) if present else ("noop",)
    names = PLATFORMS if kind == "platform" else MODELS
    return ("set", (kind,), draw(st.sampled_from(names)))


@st.composite
def wild_mutation(draw, data: dict, schema_paths: list[tuple]):
    """Anything: wrong types, unknown keys, renamed keys, extra nesting, odd references."""
    kind = draw(st.sampled_from(["set", "set", "set", "delete", "add", "rename", "wrap", "reference",
                                 "reference"]))
    present = existing_paths(data)
    if kind == "set":
        path = draw(st.sampled_from(present + schema_paths))
        return ("set", path, draw(value_for(path)))
    if kind == "delete" and present:
        return ("delete", draw(st.sampled_from(present)))
    if kind == "add":
        parents = [()] + [p for p in present if isinstance(_get(data, p), dict)]
        parent = draw(st.sampled_from(parents))
        return ("set", parent + (draw(keys),), draw(values))
    if kind == "rename" and present:
        path = draw(st.sampled_from(present))
        return ("rename", path, draw(keys))
    if kind == "wrap" and present:
        return ("wrap", draw(st.sampled_from(present)), draw(st.booleans()))
    key = draw(st.sampled_from(sorted(REFERENCE_NAMES)))
    return ("set", (key,), draw(st.sampled_from(REFERENCE_NAMES[key]) | texts))


@st.composite
def mutation(draw, data: dict, schema_paths: list[tuple], knobs: list[tuple] | None = None):
    """Two in three mutations are mild (reach the solver and the emitters), one is wild."""
    knobs = knob_paths() if knobs is None else knobs
    if knobs and draw(st.integers(0, 2)) > 0:
        return draw(mild_mutation(data, knobs))
    return draw(wild_mutation(data, schema_paths))


def apply(data: dict, ops) -> dict:
    data = json.loads(json.dumps(data, default=str))  # a deep, plain copy
    for op in ops:
        if not isinstance(data, dict):
            data = {}
        if op[0] == "noop":
            continue
        if op[0] == "set":
            _set(data, op[1], op[2])
        elif op[0] == "delete":
            _delete(data, op[1])
        elif op[0] == "rename":
            value = _get(data, op[1])
            _delete(data, op[1])
            _set(data, op[1][:-1] + (op[2],), value)
        elif op[0] == "wrap":
            value = _get(data, op[1])
            _set(data, op[1], [value] if op[2] else {"x": value})
    return data


def dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


YAML_TOKENS = ["&a ", "*a", "!!str ", "!!int ", "!!float ", "!!bool ", "!!null ", "!!binary ", "!tag ", "!<x> ",
               "- ", ": ", "{", "}", "[", "]", ",", "<<: ", "? ", "|\n", ">-\n", "%YAML 1.1\n", "%TAG ! !x\n",
               "---\n", "...\n", "\t", "#", "'", '"', "\\", "~", ".nan", ".inf", "0x", "0o", "1e", "_", "\ufeff",
               "\x85", "\u2028"]
# text that looks like YAML: tokens and scalars in any order
yaml_soup = st.lists(st.sampled_from(YAML_TOKENS) | st.sampled_from(["a", "b", "1", "abc", "maybe", "", " ", "\n",
                                                                    "\n  ", "x: ", "- x\n"]), max_size=30).map("".join)


@st.composite
def text_edit(draw, text: str) -> str:
    """A small textual mutation: the YAML may no longer parse, or parse into something else."""
    kind = draw(st.sampled_from(["insert", "delete", "dup_line", "indent", "replace", "truncate"]))
    n = len(text)
    i = draw(st.integers(0, max(n - 1, 0)))
    if kind == "insert":
        return text[:i] + draw(st.text(ALPHABET, min_size=1, max_size=8) |
                               st.sampled_from(YAML_TOKENS)) + text[i:]
    if kind == "delete":
        return text[:i] + text[i + draw(st.integers(1, 20)):]
    lines = text.split("\n")
    j = draw(st.integers(0, max(len(lines) - 1, 0)))
    if kind == "dup_line":
        return "\n".join(lines[:j + 1] + lines[j:])
    if kind == "indent":
        lines[j] = draw(st.sampled_from(["  ", " ", "    ", "\t"])) + lines[j]
        return "\n".join(lines)
    if kind == "replace":
        return text[:i] + draw(ALPHABET) + text[i + 1:]
    return text[:i]


override_keys = st.sampled_from(
    sorted({".".join(p) for p in RECIPE_PATHS} | {"platform", "model", "name", "extends", "schema"}
           | {"model." + ".".join(p) for p in MODEL_PATHS} | {"platform." + ".".join(p) for p in PLATFORM_PATHS})
) | st.text(st.sampled_from("abcxyz_.é0 -="), max_size=10)
override_values = st.sampled_from(["auto", "", "null", "[]", "[1, 2]", "[a, b]", "{a: 1}", "[[1]]", "1", "-1",
                                   "0", "true", "yes", ".nan", ".inf", "1e999", "0x10", "0o17", "2020-01-01",
                                   "!!python/object:os.system {}", "!!binary aGk=", "!!set {a}", "&a [*a]",
                                   "'quoted'", '"dq"', "a: b", "- a", "|", "{", "[", "%", "@x", "`x`",
                                   "$(touch pwned)", "h100", "cpu", "alltoall", "flex", "deepep",
                                   "99999999999999999999"]) | texts.map(str)


def _yaml_scalar(v) -> str:
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


@st.composite
def override(draw) -> str:
    """A --set string: usually a knob with a plausible value, sometimes anything."""
    shape = draw(st.integers(0, 14))
    if shape == 0:
        return draw(texts.map(str))  # no '=' at all, or junk
    if shape <= 11:
        path = draw(st.sampled_from(knob_paths()))
        domain = knob_domain(path)
        if domain:
            return f"{'.'.join(path)}={_yaml_scalar(draw(st.sampled_from(domain)))}"
    if shape == 12:
        key = draw(st.sampled_from(["platform", "model"]))
        return f"{key}={draw(st.sampled_from(PLATFORMS if key == 'platform' else MODELS))}"
    return f"{draw(override_keys)}={draw(override_values)}"


overrides = st.lists(override(), max_size=2)


# ----------------------------------------------------------------------------- isolation

class Hang(AssertionError):
    """An example ran past its time limit; `stack` is the child's Python stack just before."""

    def __init__(self, message: str, stack: str = ""):
        super().__init__(message + ("\n" + stack if stack else ""))
        self.stack = stack


@dataclass
class Outcome:
    status: str                      # "ok" | "compile_error" | "crash"
    value: object = None             # what the function returned ("ok")
    diagnostics: list = field(default_factory=list)   # plain dicts ("compile_error")
    error: str = ""                  # "ValueError: ..." ("crash")
    traceback: str = ""
    frames: tuple = ()               # (file, function) of each traceback frame, innermost last
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


def _diag_dict(d) -> dict:
    pos = d.pos
    return {"severity": d.severity, "code": d.code, "message": d.message,
            "pos": None if pos is None else {"file": pos.file, "line": pos.line, "col": pos.col},
            "text": d.render()}


def _child(fn, args) -> Outcome:
    from moeforge.compiler.diagnostics import CompileError

    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            value = fn(*args)
        result = Outcome("ok", value)
    except CompileError as exc:
        result = Outcome("compile_error", diagnostics=[_diag_dict(d) for d in exc.diagnostics])
    except BaseException as exc:  # noqa: BLE001 - everything else is what we are looking for
        tb = exc.__traceback__
        frames = tuple((f.filename, f.name) for f in traceback.extract_tb(tb))
        result = Outcome("crash", error=f"{type(exc).__name__}: {exc}"[:2000],
                         traceback="".join(traceback.format_exception(exc))[-6000:], frames=frames)
    result.stdout, result.stderr = out.getvalue()[-20000:], err.getvalue()[-20000:]
    result.seconds = time.monotonic() - start
    return result


def isolated(fn, *args, timeout: float | None = None) -> Outcome:
    """fn(*args) in a forked child, bounded in time; a hang raises Hang (the child is killed).

    Just before the limit the child's faulthandler writes its Python stack (it works while the
    main thread is inside z3's C code), so a Hang says where the time went.
    """
    timeout = EXAMPLE_TIMEOUT if timeout is None else timeout
    stack_file = tempfile.TemporaryFile()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            faulthandler.dump_traceback_later(max(timeout - 1.0, timeout * 0.9), exit=True, file=stack_file)
            try:
                payload = pickle.dumps(_child(fn, args))
            except BaseException as exc:  # noqa: BLE001 - unpicklable result
                payload = pickle.dumps(Outcome("crash", error=f"(result not picklable) {exc!r}"))
            faulthandler.cancel_dump_traceback_later()
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout + 2.0
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    try:
        if not chunks:
            stack_file.seek(0)
            stack = stack_file.read().decode(errors="replace")
            if stack or os.WIFSIGNALED(status):
                raise Hang(f"{getattr(fn, '__name__', fn)}{args!r} did not finish within {timeout:.0f} s", stack)
            return Outcome("crash", error=f"the child died without a result (status {status})")
        return pickle.loads(b"".join(chunks))
    finally:
        stack_file.close()


def run(fn, *args, timeout: float | None = None) -> Outcome | None:
    """isolated(), except that a hang explained by an open, reported bug gives None.

    (No such bug is open: BUG-8, unbounded z3 queries while explaining a conflict, is fixed.
    Recognise a new one here, by the stack in Hang.stack, while it is open.)"""
    return isolated(fn, *args, timeout=timeout)


# ----------------------------------------------------------------------------- what runs in the child

def compile_in(root: str, rid: str, overrides: list[str], out: str, strict: bool = False) -> dict:
    """`moeforge compile` (compiler/cli.py cmd_compile) against another recipes root, plus explain."""
    from moeforge.compiler.targets import emit
    from moeforge.compiler.targets.explain import explain
    from moeforge.compiler.driver import load, resolve
    from moeforge.compiler.targets.plan import build

    resolved = resolve(load(rid, overrides, Path(root)), strict)
    plan = build(resolved)
    target = Path(out) / resolved.composed.recipe_id
    files = emit.render(plan, resolved.composed.data, f"build/{resolved.composed.recipe_id}")
    again = emit.render(plan, resolved.composed.data, f"build/{resolved.composed.recipe_id}")
    emit.write_atomically(target, files)
    text = explain(resolved)
    return {"target": str(target), "files": files, "deterministic": files == again, "explain": text}


def load_only(root: str, rid: str, overrides: list[str]) -> str:
    from moeforge.compiler.driver import load, resolve

    r = resolve(load(rid, overrides, Path(root)))
    return r.composed.recipe_id


def cli(argv: list[str]) -> int:
    """moeforge.compiler.cli.main in the child; stdout/stderr are captured by _child."""
    from moeforge.compiler.cli import main

    try:
        return main(list(argv))
    except SystemExit as exc:  # argparse inside lint-config, or a command calling sys.exit
        return exc.code if isinstance(exc.code, int) else 2


# ----------------------------------------------------------------------------- properties

def diagnostics_are_located(diags: list[dict]) -> None:
    assert diags, "a CompileError without diagnostics"
    for d in diags:
        assert d["code"] and isinstance(d["message"], str), d
        assert d["pos"] is not None and d["pos"]["file"], f"diagnostic without a location:\n{d['text']}"


def cli_is_clean(outcome: Outcome) -> int:
    """Exit code 0/1/2, no traceback, no 'internal error'."""
    assert outcome.status == "ok", f"{outcome.error}\n{outcome.traceback}"
    rc = outcome.value
    text = outcome.stdout + outcome.stderr
    assert rc in (0, 1, 2), f"exit code {rc!r}\n{text[-3000:]}"
    assert "Traceback" not in text, text[-6000:]
    assert "internal error" not in text, text[-3000:]
    return rc


def bash_syntax_ok(path: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"bash -n {path.name}: {proc.stderr}"


def tree(path: Path) -> dict[str, bytes]:
    """Every file under path (relative name -> bytes); {} when path does not exist."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def strict_json(text: str):
    """json.loads that refuses NaN/Infinity (not JSON; other readers of plan.json reject them)."""
    def refuse(name):
        raise ValueError(f"{name} in plan.json")
    return json.loads(text, parse_constant=refuse)


# ----------------------------------------------------------------------------- known bugs
# While a bug reported in tests/fuzz/test_found_bugs.py is open, the property tests must not trip
# over it again and again (it would hide every other finding). Recognise each open bug narrowly,
# by its input or by where it crashes (Outcome.frames), and return its id; delete the entry when
# the bug is fixed. Fixed so far: BUG-1 (unicode digits reaching int()), BUG-2 (platform/model
# names with paths), BUG-4 (--set model.*/platform.* not validated), BUG-5/6/7/11 (internal errors
# in diff, migrate, compile --out, matrix), BUG-8 (unbounded solver explanations), BUG-9 (a failed
# swap losing the previous build), BUG-12 (NaN), BUG-13..18 (odd ids, tags, digits, symlink loops,
# unlocated default conflicts, unbounded stage-layer fixes).

def known_bug(outcome: Outcome, recipe: dict | None = None, overrides=()) -> str | None:
    """The id of an open, reported bug that explains this outcome, else None (none is open)."""
    return None
