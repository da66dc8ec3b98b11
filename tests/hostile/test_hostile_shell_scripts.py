"""Hostile launch scripts through the shell reader (compiler/launch_reader/, issue 46 items 3 and 8): every
budget (arithmetic size, expansion size, statements run, regex work, nesting) ends in a located refusal or a
note, never a hang, a MemoryError abort or a RecursionError; and through the CLI, one line and exit 2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moeforge.compiler.launch_reader import shell
from moeforge.compiler.launch_reader.shell import TooLarge, read_script

HANG = 300  # seconds: only a hang reaches it, however slow the machine (tests never time their own speed)
RUN = "python pretrain_gpt.py --num-layers 2\n"


def _read(text: str):
    """read_script in a child process, so that a hang or an abort fails this test instead of the run."""
    code = ("import sys\nfrom moeforge.compiler.launch_reader.shell import TooLarge, read_script\n"
            "try:\n    s = read_script(sys.stdin.read(), 'h.sh')\nexcept TooLarge as exc:\n    print('TOOLARGE', exc)\n"
            "else:\n    print('VARS', {k: (v if len(v) < 200 else len(v)) for k, v in s.vars.items()})\n"
            "    print('NOTES', s.notes)\n")
    proc = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=HANG)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr[-2000:]
    return proc.stdout


def test_arithmetic_is_bashs_64_bit_integers():
    """`9 ** 999999999` hung in Python's unbounded integers; bash wraps at 64 bits, and so does the reader now."""
    s = read_script("A=$(( 9 ** 999999999 ))\nB=$(( 1 << 999999999999 ))\nC=$(( 2 ** 63 ))\n"
                    "D=$(( -9223372036854775807 - 1 ))\nE=$(( -3 - 1 * 2 ))\nF=$(( 16#" + "f" * 70 + " ))\n"
                    "G=$(( 9223372036854775807 + 1 ))\n")
    assert s.vars["A"] == "3591297635458227769"       # bash 5: echo $(( 9 ** 999999999 ))
    assert s.vars["B"] == s.vars["C"] == s.vars["D"] == s.vars["G"] == "-9223372036854775808"
    assert s.vars["E"] == "-5"
    assert s.vars["F"] == "-1"


def test_arithmetic_that_names_itself_is_unknown_not_a_recursion():
    s = read_script("A=B\nB=A\nC=$(( A + 1 ))\nX='X+1'\nY=$(( X ))\n")
    assert s.vars["C"] == "$(( A + 1 ))" and s.vars["Y"] == "$(( X ))"


def test_a_function_that_calls_itself_ten_times_is_a_located_refusal():
    out = _read("f(){ f;f;f;f;f;f;f;f;f;f; }; f\n" + RUN)
    assert out.startswith(f"TOOLARGE h.sh:1: the script runs more than {shell.MAX_STEPS} statements"), out


def test_a_substitution_that_squares_its_value_is_a_note():
    out = _read("A=xx\n" + "A=${A//x/$A}\n" * 30 + RUN)
    assert "a substitution whose result is more than 4194304 characters: not evaluated, kept as written" in out, out


def test_a_glob_over_a_long_value_is_a_note():
    out = _read("A=xx\n" + 'A="$A$A"\n' * 20 + "B=${A%%*y}\nC=${A//*x/y}\nD=${A#xx}\n" + RUN)
    assert "${A%%*y}: a glob over 2097152 characters (more than 4096): not evaluated" in out, out
    assert "'B': '${A%%*y}'" in out and "'D': 2097150" in out  # a literal pattern is linear: evaluated


@pytest.mark.parametrize("regex,value", [("^(a+)+$", "a" * 40 + "!"), ("^(a|aa)*$", "a" * 40 + "!"),
                                          ("a*a*a*a*a*b", "a" * 100), ("^x$", "x" * 200), ("^(a)\\1$", "aa")])
def test_a_regex_whose_matching_can_explode_is_not_evaluated(regex, value):
    out = _read(f"A='{value}'\nif [[ $A =~ {regex} ]]; then X=1; fi\n" + RUN)
    assert "not evaluated" in out and "no branch read" in out and "'X'" not in out, out


def test_an_ordinary_regex_is_still_evaluated():
    s = read_script("GPU=H100\nif [[ $GPU =~ ^(H|B)[0-9]+$ ]]; then X=1; else X=2; fi\n"
                    "V=0.19.2\n[[ $V =~ ^0\\.1[0-9] ]] && Y=old\n")
    assert s.vars["X"] == "1" and s.vars["Y"] == "old"


@pytest.mark.parametrize("text", ["A=" + "$(" * 200 + "x" + ")" * 200 + "\n",
                                  "A=" + "${X:-" * 300 + "x" + "}" * 300 + "\n",
                                  "A=$((" + "(" * 400 + "1" + ")" * 400 + "))\n",
                                  "if true; then " * 150 + "A=1; " + "fi; " * 150 + "\n"],
                         ids=["command-substitutions", "defaults", "parentheses", "ifs"])
def test_deep_nesting_is_a_located_refusal_not_a_recursion_error(text):
    out = _read(text + RUN)
    assert out.startswith(f"TOOLARGE h.sh:1: constructs nested more than {shell.MAX_NESTING} levels deep"), out


def test_ordinary_nesting_reads():
    s = read_script("A=${X:-${Y:-${Z:-7}}}\nB=$(( ((((1 + 2)))) * 3 ))\n")
    assert s.vars["A"] == "7" and s.vars["B"] == "9"


def test_the_nesting_note_says_its_limit():
    """`{MAX_DEPTH}` was printed literally (a missing f-string prefix)."""
    deep = "bash -c 'x'\n"
    for _ in range(shell.MAX_DEPTH + 2):
        deep = f"eval {deep!r}"
    s = read_script(deep)
    assert any(f"nesting deeper than {shell.MAX_DEPTH} levels" in n for n in s.notes), s.notes
    assert not any("{MAX_DEPTH}" in n for n in s.notes)


@pytest.mark.parametrize("command", ["import", "lint-config"])
@pytest.mark.parametrize("body", ["f(){ f;f;f;f;f;f;f;f;f;f; }; f\n", "A=" + "$(" * 200 + "x" + ")" * 200 + "\n"],
                         ids=["recursion", "nesting"])
def test_through_the_cli_one_line_and_exit_2(tmp_path, command, body):
    script = tmp_path / "h.sh"
    script.write_text(body + "python pretrain_gpt.py --num-layers 2 --num-experts 4\n", encoding="utf-8")
    extra = ["--root", str(tmp_path / "r"), "--platform", "h100"] if command == "import" else []
    proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", command, str(script), *extra],
                          capture_output=True, text=True, timeout=HANG, cwd=tmp_path,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2 and text.strip().count("\n") == 0, text
    assert "h.sh:1:" in text and "internal error" not in text and "Traceback" not in text


def test_read_script_raises_only_too_large():
    with pytest.raises(TooLarge):
        read_script("A=" + "${X:-" * 300 + "x" + "}" * 300 + "\n")


@pytest.mark.parametrize("text", ["*A=${X:-", "A+(=${A}", "[A=$A"])
def test_an_odd_assignment_name_is_not_read_as_a_regex(text):
    """Found by tests/fuzz/test_fuzz_shell_reader.py: a name tree-sitter-bash takes from `*A=` went into a regex
    unescaped (re.error: multiple repeat, an internal error)."""
    read_script(text)


def test_a_long_and_or_chain_is_one_level_not_deep_nesting():
    """tree-sitter-bash nests `a && b && c` to the left; a chain of 2000 was a RecursionError before the nesting
    budget, and 120 would have been refused by it: the reader walks the chain as bash does, left to right."""
    s = read_script("A=1 && " * 2000 + "B=2 || C=3 && D=4\nfalse && E=1 || F=2\n")
    assert s.vars["A"] == "1" and s.vars["B"] == "2" and s.vars["D"] == "4" and s.vars["F"] == "2"
    assert "C" not in s.vars and "E" not in s.vars
