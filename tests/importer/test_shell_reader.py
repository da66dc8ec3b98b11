"""The shell reader (compiler/launch_reader/shell.py) reads a launch script as bash runs it.

Each script under tests/data/import/shell/ (written for these tests, one per construct) is the launch of flat.sh
written another way. Judged twice: bash itself runs each script with stand-in launchers (tests/fidelity/
bash_capture.py) and the reader must hand pretrain_gpt.py exactly bash's words; and each imports to the same
recipe and model documents as flat.sh, so to the same plan (tests/fidelity/test_import_matches_launch.py puts
their builds through Megatron-LM's own parse_args and validate_args). What the reader cannot know is a note
naming the construct and its line.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from moeforge.compiler.importer import launch as importer
from moeforge.compiler.launch_reader.shell import read_script
from moeforge.compiler.launch_reader.text import ImportError_, launch_words

ROOT = Path(__file__).resolve().parents[2]
SHELL = ROOT / "tests" / "data" / "import" / "shell"
sys.path.insert(0, str(ROOT / "tests" / "fidelity"))
from bash_capture import bash_words  # noqa: E402

CONSTRUCTS = sorted(p.name for p in SHELL.glob("*.sh") if p.name not in ("flat.sh", "sourced_common.sh"))


@pytest.fixture(scope="module")
def flat(root):
    return importer.import_text((SHELL / "flat.sh").read_text(), str(SHELL / "flat.sh"), "h100", root, "launch")


@pytest.mark.parametrize("script", ["flat.sh", *CONSTRUCTS])
def test_reader_hands_pretrain_gpt_the_words_bash_does(script):
    path = SHELL / script
    ran = bash_words(path)
    assert ran, f"bash ran no entry point in {script}"
    assert launch_words(path.read_text(), path)[0] == ran[-1]


@pytest.mark.parametrize("script", CONSTRUCTS)
def test_construct_imports_to_the_flat_launchs_documents(script, root, flat):
    path = SHELL / script
    imp = importer.import_text(path.read_text(), str(path), "h100", root, "launch")
    assert imp.unmapped == flat.unmapped
    assert imp.recipe == flat.recipe
    assert {k: v for k, v in imp.model.items() if k != "description"} == \
        {k: v for k, v in flat.model.items() if k != "description"}
    assert imp.recipe["parallelism"]["pp"] == 2 and imp.recipe["resources"]["nodes"] == 2


def _script(text: str):
    return read_script(text, "s.sh")


def test_semicolons_split_assignments():
    s = _script("A=1; B=2;C=3\n")
    assert (s.vars["A"], s.vars["B"], s.vars["C"]) == ("1", "2", "3")


def test_nested_defaults_and_assigning_defaults():
    s = _script("X=${UNSET_A:-${UNSET_B:-7}}\nY=${Z:=4}\nW=${X:+set}\nV=${X:-no}\n")
    assert (s.vars["X"], s.vars["Y"], s.vars["Z"], s.vars["W"], s.vars["V"]) == ("7", "4", "4", "set", "7")
    assert any("UNSET_A=7 (line 1)" in n and "UNSET_B=7 (line 1)" in n for n in s.notes)


def test_pattern_removal_substitution_length_and_substrings():
    s = _script('P=/a/b/model.tar.gz\nA=${P##*/}\nB=${P%%.*}\nC=${P/model/ckpt}\nD=${#P}\nE=${P:3:1}\nF=${P^^}\n')
    assert (s.vars["A"], s.vars["B"], s.vars["C"]) == ("model.tar.gz", "/a/b/model", "/a/b/ckpt.tar.gz")
    assert (s.vars["D"], s.vars["E"], s.vars["F"]) == ("17", "b", "/A/B/MODEL.TAR.GZ")


def test_arithmetic_is_c_integer_arithmetic():
    s = _script("PP=8\nA=$((PP*1))\nB=$(( -7 / 2 ))\nC=$((2**10 % 1000))\nD=$((PP > 4 ? 1 : 0))\nE=$((0x10 + 010))\n")
    assert [s.vars[k] for k in "ABCDE"] == ["8", "-3", "24", "1", "24"]


def test_unquoted_array_elements_split_quoted_ones_do_not():
    s = _script('A=("--tokenizer-type NullTokenizer" --x)\n'
                'python pretrain_gpt.py ${A[@]} "${A[@]}" "${A[*]}"\n')
    assert s.commands[-1].words[2:] == ["--tokenizer-type", "NullTokenizer", "--x", "--tokenizer-type NullTokenizer",
                                        "--x", "--tokenizer-type NullTokenizer --x"]


def test_what_cannot_be_known_is_named_never_guessed():
    s = _script("H=$(hostname)\n"
                "if [ -f /etc/x ]; then TP=4; fi\n"
                "for n in $(seq 3); do LAYERS=$n; done\n"
                "while true; do PP=2; done\n"
                "source ./missing.sh\n"
                "python pretrain_gpt.py --data-path $DATA_DIR/x --tp ${TP}\n")
    notes = "\n".join(s.notes)
    assert "s.sh:1: $(hostname): a command substitution is not run" in notes
    assert "s.sh:2: if [ -f /etc/x ]: its condition cannot be known" in notes
    assert "s.sh:3: for n in ...: its words cannot be known" in notes
    assert "s.sh:4: a while loop: not run" in notes
    assert "s.sh:5: source ./missing.sh: no such file beside the script" in notes
    assert "kept as written, for the launch's environment to resolve: ${DATA_DIR} (line 6), ${TP} (line 6)" in notes
    assert s.commands[-1].words[2:] == ["--data-path", "${DATA_DIR}/x", "--tp", "${TP}"]
    assert "TP" not in s.vars and "LAYERS" not in s.vars and "PP" not in s.vars


def test_eval_and_sh_c_strings_are_read_as_scripts():
    s = _script("CMD='pretrain_gpt.py --a 1'\neval \"python $CMD\"\nenv X=1 sh -c \"python $CMD --b 2\"\n")
    runs = [c.words for c in s.commands if c.words[0] == "python"]
    assert runs == [["python", "pretrain_gpt.py", "--a", "1"], ["python", "pretrain_gpt.py", "--a", "1", "--b", "2"]]


def test_a_fragment_without_a_command_says_so():
    with pytest.raises(ImportError_, match=r"no launch command found.*MODEL_ARGS holds Megatron-LM flags"):
        launch_words('MODEL_ARGS=" \\\n  --num-layers 4 \\\n  --num-experts 8"\n')
    with pytest.raises(ImportError_, match=r"the command at s.sh:1 runs `python -m examples.other`"):
        launch_words("python -m examples.other --num-layers 4 --hidden-size 8 --num-experts 8 --a 1 --b 2 --c 3\n",
                     "s.sh")
