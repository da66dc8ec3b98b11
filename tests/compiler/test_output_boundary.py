"""Every line the compiler writes for a terminal or a CI log passes through the one escaping function,
compiler/diagnostics.py `printable` (issue 46 item 4: lint-config printed a key holding ESC, BEL and a newline
raw, and with it a forged `::error` workflow command; import printed its `not imported:` lines raw).

An ast scan of compiler/: each print() / sys.stdout.write / sys.stderr.write argument is a constant, an f-string
of constants, or a call that escapes (printable, render_all: diagnostics escaped per format, json.dumps: control
characters as \\uXXXX). Anything else is listed below with why it is safe (REVIEWED)."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

COMPILER = Path(__file__).resolve().parents[2] / "compiler"
WRITERS = {"print", "sys.stdout.write", "sys.stderr.write"}
ESCAPING_CALLS = {"printable", "render_all"}

# (file under compiler/, function): why what it writes is escaped although the scan cannot see it. Reviewed by
# hand: keep it short; each entry is text moeforge made (constants, its own catalogue) or a variable that holds
# json.dumps' ASCII or lines already through printable (escaping them again would double the backslashes).
REVIEWED = {
    ("commands/rules.py", "run"): "the rule catalogue's own text (compiler/rules); an unknown id: through printable",
    ("knobs/recipe_schema.py", "write_or_check"): "a developer tool (make schemas): the schema's path in the "
                                                  "checkout, a constant verdict and a constant source name",
    ("lint/config_lint.py", "main_lint_config"): "text is render_text's (each line through printable) or json.dumps'",
    ("diagnose/cli.py", "run"): "json.dumps (ASCII), or text(): its lines each through printable (not twice)",
    ("commands/explain.py", "run"): "--format json: targets/explain's json.dumps (ASCII); text: each line printable",
    ("commands/runtime.py", "cmd_dryrun"): "json.dumps (ASCII) of the dry run's report, also written to --out",
    ("commands/sweep.py", "cmd_sweep"): "report.check_text: its lines each through printable (report.printable_lines)",
    ("commands/sweep.py", "cmd_results"): "results.to_json: json.dumps (ASCII); to_csv: each cell through "
                                          "printable (results.cell); to_text: report.printable_lines",
}


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return None


def _escaped(node, known: frozenset | None = None) -> bool:
    """Whether the text ``node`` evaluates to is escaped; ``known``: the names of the functions that escape."""
    known = escapers() if known is None else known
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.JoinedStr):
        return all(isinstance(v, ast.Constant) for v in node.values)
    if isinstance(node, ast.IfExp):  # json.dumps(doc) if json else printable(text)
        return _escaped(node.body, known) and _escaped(node.orelse, known)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # escaped text + "\n"
        return _escaped(node.left, known) and _escaped(node.right, known)
    if isinstance(node, ast.Call):
        name = _name(node.func) or ""
        if name == "json.dumps":
            return not any(k.arg == "ensure_ascii" for k in node.keywords)
        if name.rsplit(".", 1)[-1] in known:
            return True
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("strip", "rstrip", "lstrip"):
            return _escaped(node.func.value, known)  # trimming escaped text keeps it escaped
        if isinstance(node.func, ast.Attribute) and node.func.attr == "join" and len(node.args) == 1 \
                and isinstance(node.func.value, ast.Constant):  # "\n".join(each line escaped)
            return _escaped_items(node.args[0], known)
    return False


def _escaped_items(node, known: frozenset) -> bool:
    """The items of a join: a comprehension of escaped values, or map(printable, ...)."""
    if isinstance(node, (ast.GeneratorExp, ast.ListComp)):
        return _escaped(node.elt, known)
    if isinstance(node, ast.Call) and _name(node.func) == "map" and node.args:
        return (_name(node.args[0]) or "").rsplit(".", 1)[-1] in known
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_escaped(e, known) for e in node.elts)
    return False


@functools.lru_cache(maxsize=None)
def escapers() -> frozenset:
    """ESCAPING_CALLS and every function of compiler/ whose each return is escaped text (report.check_text
    returns lines already through printable: printing it as it is does not escape twice). A name counts only
    when every function of compiler/ so named that returns a value escapes (calls are resolved by last name)."""
    defs: dict[str, list] = {}
    for path in COMPILER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.setdefault(node.name, []).append(node)
    known = frozenset(ESCAPING_CALLS)
    while True:
        more = {name for name, fns in defs.items() if name not in known and any(_returns(f) for f in fns)
                and all(_returns_escaped(f, known) for f in fns if _returns(f))}
        if not more:
            return known
        known |= more


def _returns(function) -> list:
    """The values it returns (none: a procedure, printing its result prints None; it decides nothing)."""
    return [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]


def _returns_escaped(function, known: frozenset) -> bool:
    return all(_escaped(value, known) for value in _returns(function))


@functools.lru_cache(maxsize=None)
def unescaped_writes(path: Path) -> list[tuple[str, int, str]]:
    """(enclosing function, line, call) of every write whose arguments are not all escaped."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and _name(child.func) in WRITERS \
                    and not all(_escaped(a) for a in child.args):
                found.append((function, child.lineno, ast.unparse(child)[:120]))
            visit(child, name)
    visit(tree, "<module>")
    return found


def _violations(files) -> dict[str, list]:
    out = {}
    for path in files:
        rel = path.relative_to(COMPILER).as_posix()
        bad = [v for v in unescaped_writes(path) if (rel, v[0]) not in REVIEWED]
        if bad:
            out[rel] = bad
    return out


def test_the_scan_sees_an_unescaped_print(tmp_path):
    """The check itself: the forms lint-config and import used before the fix are found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\ndef f(key, text):\n    print(f'unknown field {key!r}')\n    print(text)\n"
                   "    sys.stderr.write(text)\n    print(printable(text))\n    print('constant')\n"
                   "    print(json.dumps(text, ensure_ascii=False))\n")
    assert [line for _, line, _ in unescaped_writes(bad)] == [3, 4, 5, 8]


def test_the_scan_follows_joins_and_escaping_functions(tmp_path):
    """Lines joined after printable pass; lines joined raw do not; a function whose every return is escaped
    (sweep/report.py printable_lines) escapes, so its text is printed as it is, not escaped twice."""
    src = tmp_path / "joins.py"
    src.write_text("def f(text, doc, fmt):\n    print('\\n'.join(map(printable, text.split('\\n'))))\n"
                   "    print('\\n'.join(text.split('\\n')))\n    print(printable_lines([text]) + '\\n')\n"
                   "    print(json.dumps(doc) if fmt == 'json' else text)\n"
                   "    print('\\n'.join(printable(x) for x in text).rstrip())\n")
    assert [line for _, line, _ in unescaped_writes(src)] == [3, 5]
    assert {"printable_lines", "check_text", "to_text"} <= escapers()


def test_every_write_is_escaped():
    assert _violations(sorted(COMPILER.rglob("*.py"))) == {}


def test_reviewed_entries_still_exist():
    """An entry whose function no longer writes unescaped text is removed (the list stays what it says)."""
    for rel, function in REVIEWED:
        assert any(f == function for f, _, _ in unescaped_writes(COMPILER / rel)), (rel, function)


def test_escaping_twice_changes_nothing():
    """An error escaped where it is raised (CalibrationError) and again as a command prints it shows the same:
    printable leaves a backslash alone, so its own escapes are not escaped again."""
    from moeforge.compiler.diagnostics import printable

    for text in ("x\x1b]0;owned\x07\n::error::f", "  ::warning::w", "a ##[group] b", "\\x1b\\n", "\u2028\ud800"):
        once = printable(text)
        assert printable(once) == once and "\x1b" not in once and "\n" not in once
