"""Hostile documents and paths, through the whole pipeline (tests/compiler/test_diagnostics.py
covers moeforge.compiler.recipe.load.load_text on the classic cases; here they arrive as recipes, platforms and
models, through `python -m moeforge.compiler` as a process, and with more variants).

Every case: exit 1 with a located diagnostic (file:line:col) and the expected code, no
traceback, no build directory, nothing executed, and an answer (no hang). No wall-clock bounds:
the limits bound the work (a bomb is refused by its node count, not by a timer) and a hang is
caught by a generous timeout that a slow, loaded machine never reaches; timings are in bench/.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import hostilelib as H
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.recipe.load import load_text

TOUCH = "pwned-tag"
HANG = 300  # seconds: what only a hang (a blocked read, an endless expansion) reaches, however slow


def without_hanging(fn, *args):
    """fn(*args) in a daemon thread: its result, or its exception re-raised here. Fails only when
    it has not returned after HANG seconds (a FIFO read blocks forever), never for being slow."""
    outcome = {}

    def target():
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # whatever it raises, the caller re-raises
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)}{args!r} hangs: no answer after {HANG} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def bomb(levels: int, width: int = 10) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    text = f"l0: &l0 [{', '.join(['x'] * width)}]\n"
    for i in range(1, levels):
        text += f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]\n"
    return text


def write(root: Path, rel: str, content: str | bytes) -> Path:
    path = root / "recipes" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def refused(root: Path, rid: str, code: str, *, overrides=(), file: str | None = None):
    """In process: a CompileError with `code`, located in `file`, and no hang; no build."""
    with pytest.raises(CompileError) as err:
        without_hanging(H.compile_here, root, rid, overrides)
    codes = [d.code for d in err.value.diagnostics]
    assert code in codes, err.value
    for d in err.value.diagnostics:
        assert d.pos is not None and d.pos.file, d.render()
        if file is not None and d.code == code:
            assert d.pos.file == file and (d.pos.line >= 1 or file.startswith("--set")), d.render()
    assert not (root / "build" / rid).exists()
    return err.value.diagnostics


# ----------------------------------------------------------------------------- documents

RECIPE_DOCS = {
    "alias-bomb": (H.TINY + bomb(9), "E_YAML_TOO_MANY_NODES"),
    "alias-bomb-in-a-mapping": (H.TINY + "x: &a {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1}\n"
                                + "".join(f"y{i}: &a{i} [{', '.join(['*a' if i == 0 else f'*a{i - 1}'] * 12)}]\n"
                                          for i in range(6)), "E_YAML_TOO_MANY_NODES"),
    "merge-key-bomb": (H.TINY + "base: &b {a: 1}\nz: {<<: [*b, *b, *b]}\n", "E_YAML_MERGE_KEY"),
    "huge": (H.TINY + "#" * (1 << 20) + "\n", "E_YAML_TOO_LARGE"),
    "deep-flow": (H.TINY + "deep: " + "[" * 5000 + "]" * 5000 + "\n", "E_YAML_TOO_DEEP"),
    "deep-block": (H.TINY + "deep:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 100)) + " " * 100 + "v: 1\n",
                   "E_YAML_TOO_DEEP"),
    "python-object": (H.TINY + f"x: !!python/object/apply:os.system ['touch {TOUCH}-1']\n", "E_YAML_TAG"),
    "python-name": (H.TINY + "x: !!python/name:os.system\n", "E_YAML_TAG"),
    "custom-tag": (H.TINY + "x: !include /etc/passwd\n", "E_YAML_TAG"),
    "tag-directive": ("%TAG !p! tag:yaml.org,2002:python/\n---\n" + H.TINY
                      + f"x: !p!object/apply:os.system ['touch {TOUCH}-2']\n", "E_YAML_TAG"),
    "verbatim-tag": (H.TINY + f"x: !<tag:yaml.org,2002:python/object/apply:os.system> ['touch {TOUCH}-3']\n",
                     "E_YAML_TAG"),
    "tag-on-a-key": (H.TINY + "? !!python/object:os.system {}\n: 1\n", "E_YAML_KEY"),
    "binary": (H.TINY + "x: !!binary aGk=\n", "E_YAML_TAG"),
    "duplicate-key": (H.TINY + "name: again\n", "E_YAML_DUPLICATE_KEY"),
    "non-string-key": (H.TINY + "1: x\n", "E_YAML_KEY"),
    "two-documents": (H.TINY + "---\n" + H.TINY, "E_YAML_SYNTAX"),
    "not-a-mapping": ("- just\n- a list\n", "E_NOT_A_MAPPING"),
    "nul-byte": (H.TINY + "x: a\x00b\n", "E_YAML_SYNTAX"),
    "not-finite": (H.TINY.replace("lr: 0.001", "lr: .nan"), "E_NOT_FINITE"),
}


@pytest.mark.parametrize("case", sorted(RECIPE_DOCS))
def test_hostile_recipe_documents(fresh_sandbox, case):
    text, code = RECIPE_DOCS[case]
    rid = f"hostile/{case}"
    write(fresh_sandbox, f"{rid}.yaml", text)
    refused(fresh_sandbox, rid, code, file=f"recipes/{rid}.yaml")
    assert not H.pwned(fresh_sandbox) and not list(Path.cwd().glob(f"{TOUCH}*"))


BYTES = {
    "latin-1": (H.TINY.encode() + "x: caf\xe9\n".encode("latin-1"), "E_YAML_ENCODING"),
    "utf-16": (("\ufeff" + H.TINY).encode("utf-16"), "E_YAML_ENCODING"),
    "surrogate": (H.TINY.encode() + b"x: \xed\xa0\x80\n", "E_YAML_ENCODING"),
    "overlong": (H.TINY.encode() + b"x: \xc0\xaf\n", "E_YAML_ENCODING"),
    "truncated": (H.TINY.encode() + b"x: \xe2\x82\n", "E_YAML_ENCODING"),
}


@pytest.mark.parametrize("case", sorted(BYTES))
def test_non_utf8_recipes(fresh_sandbox, case):
    raw, code = BYTES[case]
    rid = f"hostile/{case}"
    write(fresh_sandbox, f"{rid}.yaml", raw)
    refused(fresh_sandbox, rid, code, file=f"recipes/{rid}.yaml")


def test_utf8_bom_is_fine(fresh_sandbox):
    write(fresh_sandbox, "hostile/bom.yaml", "\ufeff" + H.TINY)
    H.compile_here(fresh_sandbox, "hostile/bom")


@pytest.mark.parametrize("kind", ["platforms", "models"])
@pytest.mark.parametrize("case", ["alias-bomb", "python-object", "huge", "latin-1"])
def test_hostile_platform_and_model_documents(fresh_sandbox, kind, case):
    """The referenced documents are read with the same safe loader, and located in their file."""
    name = "cpu" if kind == "platforms" else "tiny-moe"
    original = (fresh_sandbox / "recipes" / kind / f"{name}.yaml").read_text()
    if case == "latin-1":
        content, code = original.encode() + "x: caf\xe9\n".encode("latin-1"), "E_YAML_ENCODING"
    else:
        content, code = original + RECIPE_DOCS[case][0][len(H.TINY):], RECIPE_DOCS[case][1]
    write(fresh_sandbox, f"{kind}/{name}.yaml", content)
    refused(fresh_sandbox, "tiny-moe/cpu", code, file=f"recipes/{kind}/{name}.yaml")
    assert not H.pwned(fresh_sandbox)


def test_documents_at_the_limits_load():
    """Just under each limit: accepted, whole (how fast is bench/'s business, not a test's)."""
    from moeforge.compiler.recipe import document as L

    def leaves(value):
        return sum(leaves(v) for v in value) if isinstance(value, list) else 1

    def depth(value):
        return 1 + max(map(depth, value), default=0) if isinstance(value, list) else 0

    doc = without_hanging(load_text, bomb(4, 10) + "l4: [" + ", ".join(["*l3"] * 3) + "]\n", "limit.yaml")
    assert leaves(doc.data["l4"]) == 3 * 10**4                                # every alias expanded
    doc = without_hanging(load_text, "a: " + "[" * (L.MAX_DEPTH - 1) + "]" * (L.MAX_DEPTH - 1) + "\n", "limit.yaml")
    assert depth(doc.data["a"]) == L.MAX_DEPTH - 1
    doc = without_hanging(load_text, "a: 1\n" + "#" * (L.MAX_BYTES - 10) + "\n", "limit.yaml")
    assert doc.data == {"a": 1}


@pytest.mark.parametrize("text", ["a: !!int abc\n", "a: !!float abc\n", "a: !!bool maybe\n", 'a: !!int ""\n',
                                  "a: !<tag:yaml.org,2002:int> zz\n"])
def test_bug14_core_tags_with_bad_values(text):
    """(BUG-14, fixed) moeforge.compiler.recipe.load accepted the core tags (!!int, !!float, !!bool) and then lets PyYAML's
    SafeConstructor raise ValueError / KeyError / IndexError (an internal error for the CLI).
    Now: a located error at line 1."""
    with pytest.raises(CompileError) as err:
        load_text(text, "t.yaml")
    assert err.value.diagnostics[0].pos.line == 1


@pytest.mark.parametrize("where", ["document", "override"])
def test_bug15_integer_with_too_many_digits(fresh_sandbox, where):
    """(BUG-15, fixed) `a: 111...1` (5000 digits) in a document, or `--set training.seed=111...1`:
    Python 3.11's int/str conversion limit raised ValueError inside the loader / yaml.safe_load
    (an internal error). Now: a located error."""
    digits = "1" * 5000
    if where == "document":
        with pytest.raises(CompileError):
            load_text(f"a: {digits}\n", "t.yaml")
    else:
        refused(fresh_sandbox, "tiny-moe/cpu", "E_OVERRIDE", overrides=[f"training.seed={digits}"])


def test_hostile_documents_through_the_cli(sandbox, moeforge_cli):
    """As a process: exit 1, the located diagnostic on stdout, no traceback (moeforge_cli checks)."""
    for case in ("alias-bomb", "python-object", "deep-flow"):
        rid = f"hostile/cli-{case}"
        write(sandbox, f"{rid}.yaml", RECIPE_DOCS[case][0])
        proc = moeforge_cli(sandbox, "compile", rid, timeout=HANG)  # TimeoutExpired only on a hang
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"recipes/{rid}.yaml:" in proc.stdout and f"error[{RECIPE_DOCS[case][1]}]" in proc.stdout
        assert not (sandbox / "build" / rid).exists()


# ----------------------------------------------------------------------------- paths

@pytest.fixture
def outside(tmp_path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "o.yaml").write_text(H.TINY)
    return d


def _extends(target: str) -> str:
    return H.TINY + f"extends: {target}\n"


def test_extends_escapes(fresh_sandbox, outside):
    """extends: with .., absolute paths and ids that leave recipes/ (existing files or not)."""
    root = fresh_sandbox / "recipes"
    cases = {"dotdot": "../../../outside/o.yaml", "absolute": str(outside / "o.yaml"), "etc": "/etc/passwd.yaml",
             "id-dotdot": "../outside/o", "deep-dotdot": "../" * 30 + "etc/passwd.yaml",
             "dev": "/dev/zero.yaml", "proc": "/proc/self/environ.yaml"}
    for name, target in cases.items():
        write(fresh_sandbox, f"hostile/ext-{name}.yaml", _extends(target))
        diags = refused(fresh_sandbox, f"hostile/ext-{name}", "E_PATH_ESCAPE")
        assert diags[0].pos.line == H.TINY.count("\n") + 1, diags[0].render()
    # inside recipes/, even when spelled with .. or as an absolute path: allowed
    write(fresh_sandbox, "hostile/ext-inside.yaml", _extends(str(root / "tiny-moe" / "cpu.yaml")))
    H.compile_here(fresh_sandbox, "hostile/ext-inside")


def test_recipe_argument_escapes(fresh_sandbox, outside, moeforge_cli):
    for arg in (str(outside / "o.yaml"), "../outside/o", "../../outside/o.yaml", "/etc/passwd", "/dev/zero",
                "hostile/../../../outside/o"):
        proc = moeforge_cli(fresh_sandbox, "compile", arg, "--out", str(outside / "build"))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "E_PATH_ESCAPE" in proc.stdout or "E_RECIPE_NOT_FOUND" in proc.stdout, proc.stdout
    assert not (outside / "build").exists()


def test_symlinks_out_of_recipes(fresh_sandbox, outside):
    """Links that lead out of recipes/ are refused wherever they are met: the recipe itself, a
    directory on its path, extends:, a platform or a model document."""
    root = fresh_sandbox / "recipes"
    (root / "hostile" / "file-link.yaml").symlink_to(outside / "o.yaml")
    refused(fresh_sandbox, "hostile/file-link", "E_PATH_ESCAPE")
    (root / "hostile" / "dir-link").symlink_to(outside, target_is_directory=True)
    refused(fresh_sandbox, "hostile/dir-link/o", "E_PATH_ESCAPE")
    write(fresh_sandbox, "hostile/ext-dir-link.yaml", _extends("dir-link/o.yaml"))
    refused(fresh_sandbox, "hostile/ext-dir-link", "E_PATH_ESCAPE")
    (root / "platforms" / "evil.yaml").symlink_to(outside / "o.yaml")
    write(fresh_sandbox, "hostile/plat-link.yaml", H.TINY.replace("platform: cpu", "platform: evil"))
    refused(fresh_sandbox, "hostile/plat-link", "E_PATH_ESCAPE")
    (root / "models" / "evil.yaml").symlink_to("/dev/zero")
    write(fresh_sandbox, "hostile/model-link.yaml", H.TINY.replace("model: tiny-moe", "model: evil"))
    refused(fresh_sandbox, "hostile/model-link", "E_PATH_ESCAPE")


def test_special_files_are_not_read(fresh_sandbox, deadline):
    """A FIFO or a directory named *.yaml is not a recipe (a FIFO would block the reader forever)."""
    root = fresh_sandbox / "recipes"
    os.mkfifo(root / "hostile" / "fifo.yaml")
    (root / "hostile" / "dir.yaml").mkdir()
    refused(fresh_sandbox, "hostile/fifo", "E_RECIPE_NOT_FOUND")
    refused(fresh_sandbox, "hostile/dir", "E_RECIPE_NOT_FOUND")
    write(fresh_sandbox, "hostile/ext-fifo.yaml", _extends("fifo.yaml"))
    refused(fresh_sandbox, "hostile/ext-fifo", "E_EXTENDS_NOT_FOUND")


@pytest.mark.parametrize("via", ["argument", "extends"])
def test_bug16_symlink_loop(fresh_sandbox, via):
    """(BUG-16, fixed) recipes/hostile/loop1.yaml -> loop2.yaml -> loop1.yaml: Path.resolve()
    (Python 3.11) raised RuntimeError('Symlink loop from ...') in compose._inside (an internal
    error). Now: a located error at the reference."""
    root = fresh_sandbox / "recipes" / "hostile"
    (root / "loop1.yaml").symlink_to("loop2.yaml")
    (root / "loop2.yaml").symlink_to("loop1.yaml")
    if via == "argument":
        with pytest.raises(CompileError):
            H.compile_here(fresh_sandbox, "hostile/loop1")
    else:
        write(fresh_sandbox, "hostile/ext-loop.yaml", _extends("loop1.yaml"))
        with pytest.raises(CompileError):
            H.compile_here(fresh_sandbox, "hostile/ext-loop")
