"""Issue 46 item 4: values a user typed or a file held reach the terminal and CI logs only through printable.

Each command below once echoed such a value raw: `--root` that is not a directory, `init DIR`, compile's
summary line (its --out) and `launch --target print` (the build's path, shell-quoted but with ESC, BEL and a
newline kept, so a forged `::error` workflow command started a line of its own)."""
from __future__ import annotations

import re

from moeforge.compiler.cli import main

HOSTILE = "o\x1b]0;owned\x07\n::error file=a.yaml,line=1::forged"
RECIPE = "builtin:qwen3-30b-a3b/h100-bf16-ep16-alltoall-overlap"
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _clean(text: str) -> None:
    """No control character but the line ends, and no line that GitHub Actions would obey."""
    assert not CONTROL.search(text), repr(text[-400:])
    for line in text.split("\n"):
        assert not line.lstrip().startswith("::") and "##[" not in line, repr(line)
    assert "\\x1b]0;owned\\x07" in text  # the value is shown, escaped, not dropped


def _run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_root_that_is_not_a_directory(tmp_path, capsys):
    rc, out = _run(capsys, "--root", str(tmp_path / HOSTILE), "check")
    assert rc == 2 and "not a directory" in out
    _clean(out)


def test_init_echoes_its_directory_escaped(tmp_path, capsys):
    rc, out = _run(capsys, "init", str(tmp_path / HOSTILE))
    assert rc == 0 and "wrote" in out and "moeforge project at" in out
    _clean(out)


def test_compile_and_launch_print_echo_the_build_escaped(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / HOSTILE
    rc, out = _run(capsys, "compile", RECIPE, "--out", str(out_dir), "--quiet")
    assert rc == 0 and "compiled " in out
    _clean(out)
    build = next(out_dir.glob("*/*"))
    rc, out = _run(capsys, "launch", str(build), "--target", "print")
    assert rc == 0 and out.count("\n") == 3, out  # local, slurm, k8s: one line each, the newline escaped
    _clean(out)
