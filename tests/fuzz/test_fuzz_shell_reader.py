"""The shell reader (compiler/launch_reader/) on generated scripts: bash's constructs recombined, nested and
repeated. Each example runs in a forked child with fuzzlib's time limit; the property is that a script either
reads (every value within MAX_EXPANDED) or is refused with TooLarge naming `file:line`, and nothing else: no hang,
no RecursionError, no MemoryError, no other exception (issue 46 item 3). `make fuzz` (MOEFORGE_FUZZ=long) runs
about 30x the examples of the normal suite."""
from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

import fuzzlib
from fuzzlib import fuzz_settings

# pieces a script is made of: openers and closers (so nesting happens), operators, names, values, statements
ATOMS = ["$(", ")", "${X:-", "${A//x/$A}", "${A%%*y}", "${A#x}", "${#A}", "}", "$((", "))", " ** ", " << ", " * ",
         " - ", "-", "9", "999999999", "0x7f", "64#zz", "A", "B", "X", "$A", "$B", "\"$A$A\"", "A=", "B=", "X=",
         "A=xx", "A=(\"${A[@]}\" \"${A[@]}\")", "A+=", "f(){ ", " }", "f", "g(){ f;f;f; }", "g", ";", " ", "\n",
         "'", "\"", "$'\\e\\n'", "[[ ", " =~ ", " ]]", "^(a+)+$", "(a|aa)*", " == ", "*", "if ", " then ", " fi",
         " else ", "for i in ", " do ", " done", "case $A in ", " x) ", ";;", " esac", "eval ", "bash -c ",
         "source ", "export ", "declare -a ", "&&", "||", "|", "\\\n", "<<EOF\n", "\nEOF\n", "$@", "$1", "shift",
         "python pretrain_gpt.py ", "--num-layers ", "--split '99,1,0' ", "#", "\x1b", "\u2028", "\ud800"]
scripts = st.lists(st.sampled_from(ATOMS), min_size=1, max_size=60).map("".join)
# structures known to be costly, repeated: each must stay within a budget
costly = st.builds(lambda body, times: body * times,
                   st.sampled_from(["A=${A//x/$A}\n", "A=\"$A$A\"\n", "$(", "${X:-", "f(){ f;f;f;f; }; f\n",
                                    "A=$(( A ** 99999 + A ))\n", "((", "if true; then ", "eval 'A=1'\n"]),
                   st.integers(1, 400))


def _read(text: str):
    from moeforge.compiler.launch_reader.shell import MAX_EXPANDED, TooLarge, read_script

    try:
        script = read_script(text, "fuzz.sh")
    except TooLarge as exc:
        return "refused", str(exc)
    sizes = [len(v) for v in script.vars.values()] + [sum(map(len, a)) for a in script.arrays.values()]
    sizes += [sum(map(len, c.words)) for c in script.commands]
    return "read", max(sizes, default=0) <= MAX_EXPANDED


def _check(text: str) -> None:
    outcome = fuzzlib.isolated(_read, text)
    assert outcome.status == "ok", (text[:400], outcome.error, outcome.traceback[-2000:])
    kind, detail = outcome.value
    if kind == "refused":
        assert re.match(r"fuzz\.sh(:\d+ \((eval|bash -c)\))*:\d+: ", detail), detail
    else:
        assert detail is True, text[:400]


@fuzz_settings(weight=2.0)
@given(text=scripts)
def test_generated_scripts_read_or_are_refused_by_line(text):
    _check(text)


@fuzz_settings(weight=1.0)
@given(prefix=scripts, body=costly, suffix=scripts)
def test_costly_structures_stay_within_the_budgets(prefix, body, suffix):
    _check(prefix + "\n" + body + "\n" + suffix)
