"""The house's layering, read from the sources (ast, nothing imported but compiler.LAYERS):

- no import cycles between the compiler's modules (function-level imports count);
- packages import only downward, in the order compiler.LAYERS declares;
- no private name (`_x`) is imported, or read off an imported module, across modules;
- an import inside a function says why it is lazy (`# lazy: ...`, on its line or the line above);
- every public function and method of the compiler has a docstring (issue 45: it says why);
- the compiler never imports torch/megatron/transformer_engine; the runtime never imports the compiler.
"""
import ast
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from moeforge.compiler import LAYERS

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "megatron", "transformer_engine")


def _module_name(path: Path) -> str:
    parts = ("moeforge",) + path.relative_to(ROOT).with_suffix("").parts   # installed as moeforge.<folder>
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def _sources(package: str) -> dict:
    """module name -> (path, source lines, ast)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        out[_module_name(path)] = (path, text.splitlines(), ast.parse(text))
    return out


def _imports(package: str):
    """(module, imported name, node) for every import statement, absolute names resolved."""
    for module, (path, _, tree) in _sources(package).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield module, alias.name, node
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    anchor = module.split(".")[:len(module.split(".")) - node.level + (path.name == "__init__.py")]
                    base = ".".join(anchor + [node.module])
                for alias in node.names:
                    yield module, f"{base}.{alias.name}", node


def _target(name: str) -> str | None:
    """The compiler module an imported name lives in (a module itself, or the module defining it)."""
    modules = _sources("compiler")
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@lru_cache(maxsize=None)
def _graph() -> dict:
    graph = {m: set() for m in _sources("compiler")}
    for module, name, _ in _imports("compiler"):
        target = _target(name) if name.startswith("moeforge.compiler") else None
        if target and target != module:
            graph[module].add(target)
    return graph


def _unit(module: str) -> str:
    """The layer unit of a module: its package under compiler/ (or top-level module); 'compiler' for the root."""
    parts = module.split(".")[1:]   # without "moeforge."
    return parts[1] if len(parts) > 1 else "compiler"


def _cycles(graph: dict) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_package_is_in_a_layer_once():
    units = {_unit(m) for m in _sources("compiler")} - {"compiler"}
    layered = [u for layer in LAYERS for u in layer]
    assert len(layered) == len(set(layered)), "a unit in two layers"
    assert units <= set(layered), f"add {sorted(units - set(layered))} to compiler.LAYERS"


def test_packages_import_only_downward():
    level = {u: i for i, layer in enumerate(LAYERS) for u in layer}
    wrong = sorted(f"{a} -> {b}" for a, targets in _graph().items() for b in targets
                   if _unit(a) != _unit(b) and _unit(b) != "compiler" and level[_unit(b)] >= level[_unit(a)])
    assert wrong == [], "upward or sideways imports (compiler.LAYERS): " + ", ".join(wrong)


@pytest.mark.parametrize("package", ["compiler", "bench"])
def test_no_private_name_is_imported_across_modules(package):
    """Nor by bench/, which uses the compiler's public entry points (driver.compile, the commands) as a user does."""
    modules = _sources("compiler")
    wrong = []
    for module, name, node in _imports(package):
        if not name.startswith("moeforge.compiler."):
            continue
        owner, _, last = name.rpartition(".")
        if last.startswith("_") and not last.startswith("__") and owner in modules and owner != module:
            wrong.append(f"{module} imports {name}")
    for module, (_, _, tree) in _sources(package).items():  # `from compiler.x import y` / `import compiler.x as y`, then y._z
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("moeforge.compiler"):
                aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                                if f"{node.module}.{a.name}" in modules})
            elif isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in modules})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                wrong.append(f"{module} reads {aliases[node.value.id]}.{node.attr}")
    assert wrong == []


def test_a_lazy_import_says_why():
    """An import inside a function is there for the cold check (or to keep a heavy package out of the commands
    that do not need it); it says so, `# lazy: <why>`, so that no import is deferred only to dodge a cycle."""
    silent = []
    for module, (path, lines, tree) in _sources("compiler").items():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    here = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
                    if "# lazy:" not in here:
                        silent.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert silent == [], "function-level imports without a `# lazy: why` comment: " + ", ".join(sorted(set(silent)))


def _undocumented(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of each public function or method (module level or in a class, nested classes too) that has
    no docstring; functions nested in functions are private to their caller and not counted."""
    out = []

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not node.name.startswith("_") and ast.get_docstring(node) is None:
                    out.append((node.lineno, node.name))
            elif isinstance(node, ast.ClassDef):
                visit(node.body)
    visit(tree.body)
    return out


def test_the_docstring_finder_finds_an_undocumented_function():
    tree = ast.parse("def a():\n    'why'\n\ndef b():\n    def inner():\n        pass\n\n"
                     "def _c():\n    pass\n\nclass K:\n    def m(self):\n        return 1\n"
                     "    class Inner:\n        async def n(self):\n            pass\n")
    assert _undocumented(tree) == [(4, "b"), (12, "m"), (15, "n")]


def test_every_public_compiler_function_says_why():
    """Issue 45: a public function or method of the compiler carries a docstring that says why it exists (its
    caller, unit, invariant or what it refuses), so that a reader need not work it out from its callers."""
    missing = [f"{path.relative_to(ROOT)}:{line} {name}" for path, _, tree in _sources("compiler").values()
               for line, name in _undocumented(tree)]
    assert missing == [], ("public functions without a docstring (add one line saying why): "
                           + ", ".join(sorted(missing)))

def test_compiler_sources_do_not_import_heavy_packages():
    bad = [(m, n) for m, n, _ in _imports("compiler") if n.split(".")[0] in HEAVY]
    assert bad == []


def test_runtime_sources_do_not_import_the_compiler():
    bad = [(m, n) for m, n, _ in _imports("runtime") if n.startswith("moeforge.compiler")]
    assert bad == []


def test_one_import_name():
    """Installed, moeforge is one name: no source imports the folders by their bare names (`compiler`,
    `runtime`), which a user's own package of that name would shadow."""
    bare = [(m, n) for top in ("compiler", "runtime") for m, n, node in _imports(top)
            if n.split(".")[0] in ("compiler", "runtime") and not getattr(node, "level", 0)]
    assert bare == []


def test_a_whole_compile_loads_no_heavy_module(tmp_path):
    code = (
        "import sys\n"
        "from moeforge.compiler.cli import main\n"
        f"rc = main(['compile', 'tiny-moe/cpu', '--out', {str(tmp_path)!r}])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron', 'transformer_engine'))\n"
        "print(rc, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"


# the stages' own entry points, which only the driver wires together
STAGES = ("moeforge.compiler.targets.plan.build", "moeforge.compiler.solver.solve.solve",
          "moeforge.compiler.recipe.compose.compose", "moeforge.compiler.targets.emit.render")


def test_the_stages_are_wired_together_only_in_the_driver():
    """moeforge.compiler.driver.compile() is the one pipeline: no other module (bench/ included) calls a stage's
    result into the next, and bench/ imports no stage of its own."""
    import re

    wired = re.compile(r"\b(build|resolve)\(\s*(resolve|load)\(")
    found = [f"{path.relative_to(ROOT)}:{n}" for package in ("compiler", "bench")
             for module, (path, lines, _) in _sources(package).items()
             if module != "moeforge.compiler.driver" for n, line in enumerate(lines, 1) if wired.search(line)]
    assert found == [], "use moeforge.compiler.driver.compile(): " + ", ".join(found)
    staged = [f"{module} imports {name}" for module, name, _ in _imports("bench")
              if name in STAGES or any(name == s.rpartition(".")[0] for s in STAGES)]
    assert staged == [], "bench/ runs the pipeline through driver.compile() or a command: " + ", ".join(staged)


def test_compile_stops_before_the_plan_when_asked(tmp_path):
    from moeforge.compiler import driver

    whole, solved = driver.compile("tiny-moe/cpu"), driver.compile("tiny-moe/cpu", plan=False)
    assert solved.plan is None and whole.plan["layout"]["ep"] == 2
    assert whole.resolved.env == solved.resolved.env and whole.diagnostics == solved.diagnostics


def _documented_layers(text: str) -> list[str]:
    """The compiler's units as docs/architecture.md's layer table lists them, in its order."""
    import re

    units = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and re.fullmatch(r"\d+(, \d+)*", cells[1]):
            units += [re.sub(r"(/|\.py)$", "", name) for name in re.findall(r"`([^`]+)`", cells[2])]
    return units


def test_the_package_map_is_written_once():
    """compiler.LAYERS is the package map; docs/architecture.md's table lists the same units in the same order, and
    the README points to that table rather than keeping a copy."""
    layered = [u for layer in LAYERS for u in layer]
    assert _documented_layers((ROOT / "docs" / "architecture.md").read_text()) == layered
    assert _documented_layers("| 1 | `a/`, `b.py` | x |\n| 2, 3 | `c/`, then `d/` | y |\n") == ["a", "b", "c", "d"]
    readme = (ROOT / "README.md").read_text()
    copies = [u for u in layered if f"`compiler/{u}/`" in readme and u not in ("commands",)]
    assert "| package | owns |" not in readme and len(copies) < 3, copies
