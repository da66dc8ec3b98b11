"""The compiler never imports torch/megatron/TE; the runtime never imports the compiler."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "megatron", "transformer_engine")


def _imports(package: str):
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield path, node.module


def test_compiler_sources_do_not_import_heavy_packages():
    bad = [(str(p), m) for p, m in _imports("compiler") if m.split(".")[0] in HEAVY]
    assert bad == []


def test_runtime_sources_do_not_import_the_compiler():
    bad = [(str(p), m) for p, m in _imports("runtime") if m.split(".")[0] == "compiler"]
    assert bad == []


def test_a_whole_compile_loads_no_heavy_module(tmp_path):
    code = (
        "import sys\n"
        "from compiler.cli import main\n"
        f"rc = main(['compile', 'tiny-moe/cpu', '--out', {str(tmp_path)!r}])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron', 'transformer_engine'))\n"
        "print(rc, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"
