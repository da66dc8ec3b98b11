"""Issue 42, the compiler's half: integral values as integers (item 1), text output safe for terminals and CI
logs (9), schema patterns that refuse a trailing newline (10), bounded work (11), and one located line for
each input that used to be an internal error (12). Each case is the issue's reproduction; the CLI cases run
`python -m moeforge.compiler` in the sandbox checkout (conftest.moeforge: no traceback, no "internal error").
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import hostilelib as H
from moeforge.compiler.diagnostics import CompileError

REPO = Path(__file__).resolve().parents[2]


def write(root: Path, rel: str, text: str) -> Path:
    path = root / "recipes" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def codes(err: pytest.ExceptionInfo) -> list[str]:
    return [d.code for d in err.value.diagnostics]


def plan_of(root: Path, rid: str) -> dict:
    return json.loads((root / "build" / rid / "plan.json").read_text())


# ----------------------------------------------------------------------------- item 1: 1.0 is 1

def test_an_integral_float_where_an_integer_is_meant_is_an_integer(fresh_sandbox, moeforge_cli):
    """`--set training.micro_batch_size=1.0` wrote "num_microbatches": 4.0 (the runtime then died in range());
    `tp: 1.0` passed check and was a LayoutError in compile. Both are normalised where the schema says
    integer, in one place (moeforge.compiler.recipe.integers, decided while validating), so check, compile and diff agree."""
    proc = moeforge_cli(fresh_sandbox, "compile", "tiny-moe/cpu", "--set", "training.micro_batch_size=1.0")
    assert proc.returncode == 0, proc.stdout
    text = (fresh_sandbox / "build" / "tiny-moe" / "cpu" / "plan.json").read_text()
    assert re.search(r'"num_microbatches": 4,\n', text) and not re.search(r"\b\d+\.0\b", text.split('"decisions"')[0])
    training = plan_of(fresh_sandbox, "tiny-moe/cpu")["training"]
    assert type(training["micro_batch_size"]) is int and type(training["num_microbatches"]) is int

    write(fresh_sandbox, "hostile/tp-float.yaml", H.TINY.replace("  tp: 1\n", "  tp: 1.0\n"))
    write(fresh_sandbox, "hostile/tp-int.yaml", H.TINY)
    assert "  tp: 1.0\n" in (fresh_sandbox / "recipes" / "hostile" / "tp-float.yaml").read_text()
    assert moeforge_cli(fresh_sandbox, "check", "recipes/hostile/tp-float.yaml").returncode == 0
    for rid in ("hostile/tp-float", "hostile/tp-int"):
        assert moeforge_cli(fresh_sandbox, "compile", rid).returncode == 0
    a, b = (plan_of(fresh_sandbox, f"hostile/tp-{s}") for s in ("float", "int"))
    assert a["layout"] == b["layout"] and type(a["layout"]["tp"]) is int
    assert moeforge_cli(fresh_sandbox, "diff", "hostile/tp-float", "hostile/tp-int").returncode == 0
    assert moeforge_cli(fresh_sandbox, "diff", "build/hostile/tp-float", "build/hostile/tp-int").returncode == 0

    # a plan that states 1.0 (not one compile writes) is not "the same configuration" as one with 1
    for d in a["decisions"]:
        if d["field"] == "tensor_model_parallel_size":
            d["value"] = 1.0
    edited = fresh_sandbox / "edited.json"
    edited.write_text(json.dumps(a))
    proc = moeforge_cli(fresh_sandbox, "diff", str(edited), "build/hostile/tp-int")
    assert proc.returncode == 1 and "parallelism.tp: 1.0 -> 1" in proc.stdout


def test_normalising_keeps_numbers_and_refuses_what_int64_cannot_hold(fresh_sandbox):
    H.compile_here(fresh_sandbox, "tiny-moe/cpu", ["schedule.lr=1.0", "model.architecture.num_layers=2.0"])
    plan = plan_of(fresh_sandbox, "tiny-moe/cpu")
    assert type(plan["optimizer"]["lr"]) is float and type(plan["transformer_config"]["num_layers"]) is int
    with pytest.raises(CompileError) as err:
        H.compile_here(fresh_sandbox, "tiny-moe/cpu", ["parallelism.tp=1e30"])
    [d] = err.value.diagnostics
    assert d.code == "E_INT_RANGE" and d.pos.file == "--set parallelism.tp=1e30"


# ----------------------------------------------------------------------------- item 9: printable text

HOSTILE_KEY = 'x\x1b[2J\x1b]0;owned\x07\n::error file=recipes/a.yaml,line=1::forged\n::add-mask::secret\r##[warning]y'


def assert_printable(text: str) -> None:
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]", text), repr(text)
    for line in text.split("\n"):
        assert not line.lstrip().startswith("::") and "##[" not in line, repr(line)


def test_document_text_cannot_drive_a_terminal_or_a_ci_log(fresh_sandbox, moeforge_cli):
    """An unknown key with an escape sequence, a newline and GitHub workflow commands: check and compile print
    it escaped on one line (diagnostics.printable, in Diagnostic.render: every text command, the pre-commit
    hook's `moeforge check` included); --format github and json keep their own escaping."""
    data = yaml.safe_load(H.TINY)
    data["moe"][HOSTILE_KEY] = 1
    write(fresh_sandbox, "hostile/escape.yaml", yaml.safe_dump(data, allow_unicode=True))
    for args in (("check", "recipes/hostile/escape.yaml"), ("compile", "hostile/escape"),
                 ("check", "::error file=x::pwned.yaml")):
        proc = moeforge_cli(fresh_sandbox, *args)
        assert proc.returncode == 1
        assert_printable(proc.stdout + proc.stderr)
    proc = moeforge_cli(fresh_sandbox, "check", "--format", "github", "recipes/hostile/escape.yaml")
    [line] = proc.stdout.splitlines()  # one workflow command of ours, nothing a value started
    assert line.startswith("::error file=recipes/hostile/escape.yaml,line=") and "%0A::error" in line
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", line)
    proc = moeforge_cli(fresh_sandbox, "check", "recipes/hostile/escape.yaml")
    assert r"unknown key 'x\x1b[2J\x1b]0;owned\x07\n::error file=recipes/a.yaml,line=1::forged\n" in proc.stdout
    assert r"\::error file=x::pwned.yaml: error[E_RECIPE_NOT_FOUND]" in \
        moeforge_cli(fresh_sandbox, "check", "::error file=x::pwned.yaml").stdout


def test_explain_prints_a_document_s_value_escaped(sandbox, moeforge_cli):
    """A path may hold an escape sequence (its pattern refuses only NUL and line breaks); explain's table
    printed the value raw, so `moeforge explain` cleared the terminal and retitled it."""
    value = "x\x1b[2J\x1b]0;owned\x07"
    proc = moeforge_cli(sandbox, "explain", "tiny-moe/cpu", "--set", f"data.cache_dir={value}")
    assert proc.returncode == 0, proc.stderr
    assert_printable(proc.stdout)
    assert r"x\x1b[2J\x1b]0;owned\x07" in proc.stdout
    proc = moeforge_cli(sandbox, "explain", "tiny-moe/cpu", "--set", f"data.cache_dir={value}", "--format", "json")
    assert value in proc.stdout.encode().decode("unicode_escape")  # JSON's own escaping: \u001b


# ----------------------------------------------------------------------------- item 10: no trailing newline

def _patterns():
    for schema in sorted((REPO / "schemas").glob("*.json")):
        found = []

        def walk(node):
            if isinstance(node, dict):
                if isinstance(node.get("pattern"), str):
                    found.append(node["pattern"])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
        walk(json.loads(schema.read_text()))
        for pattern in dict.fromkeys(found):
            yield pytest.param(pattern, id=f"{schema.stem}:{pattern[:40]}")


END = r"$(?!\n)"  # `$` alone also matches before a final newline in Python's re (jsonschema uses re.search)


@pytest.mark.parametrize("pattern", list(_patterns()))
@settings(max_examples=15, derandomize=True, database=None, deadline=None)
@given(data=st.data())
def test_every_schema_pattern_refuses_a_trailing_newline(pattern, data):
    """Every `pattern` in schemas/*.json: a value it accepts is refused with a newline (or CR LF) after it,
    as ECMA-262 (what editors run) refuses it; values generated from the pattern itself."""
    import jsonschema

    assert pattern.startswith("^") and pattern.endswith(END), f"{pattern}: anchor it as ^...{END}"
    value = data.draw(st.from_regex(pattern[: -len(END)] + "$", fullmatch=True))
    check = jsonschema.Draft202012Validator({"type": "string", "pattern": pattern}).is_valid
    assert check(value)
    assert not check(value + "\n") and not check(value + "\r\n")


@pytest.mark.parametrize("where,text", [
    ("name", H.TINY.replace("name: tiny-moe-cpu", 'name: "tiny-moe-cpu\\n"')),
    ("launch.time", H.TINY + 'launch: {time: "00:30:00\\n"}\n'),
    ("launch.k8s_namespace", H.TINY + 'launch: {k8s_namespace: "default\\n"}\n'),
    ("data.cache_dir", H.TINY + 'data: {kind: mock, cache_dir: "/cache\\n"}\n'),
])
def test_a_value_for_a_script_cannot_end_in_a_newline(fresh_sandbox, where, text):
    """What a schema pattern guards ends up in #SBATCH lines, the args file's header and the manifest; `$`
    matched before a final newline, so "00:30:00\\n" was a valid launch.time."""
    write(fresh_sandbox, "hostile/newline.yaml", text)
    with pytest.raises(CompileError) as err:
        H.compile_here(fresh_sandbox, "hostile/newline")
    [d] = err.value.diagnostics
    assert d.code == "E_SCHEMA" and d.message.startswith(where) and d.pos.file == "recipes/hostile/newline.yaml"


def test_a_platform_version_cannot_end_in_a_newline(fresh_sandbox):
    platform = fresh_sandbox / "recipes" / "platforms" / "cpu.yaml"
    platform.write_text(re.sub(r"megatron_core: \"?([0-9.]+)\"?", r'megatron_core: "\1\\n"', platform.read_text()))
    with pytest.raises(CompileError) as err:
        H.compile_here(fresh_sandbox, "tiny-moe/cpu")
    assert codes(err) == ["E_SCHEMA"] and err.value.diagnostics[0].pos.file == "recipes/platforms/cpu.yaml"


# ----------------------------------------------------------------------------- item 11: bounded work

@pytest.fixture(scope="module")
def wide(sandbox) -> str:
    """A 480 KB recipe: tiny-moe/cpu and 40,000 more top-level keys."""
    text = H.TINY + "".join(f"k{i:05d}: {i}\n" for i in range(40_000))
    assert len(text) > 480_000
    write(sandbox, "hostile/wide.yaml", text)
    return "hostile/wide"


@pytest.mark.parametrize("command", ["check", "compile", "explain"])
def test_a_recipe_with_40k_keys_is_answered(sandbox, moeforge_cli, wide, command):
    """It hung check/compile/explain (compose._merge went over every origin for every key: 1k keys 1.4 s, 4k
    19 s). An answer now: the first unknown keys one by one, the rest in one line (the time is bench/'s)."""
    proc = moeforge_cli(sandbox, command, f"recipes/{wide}.yaml" if command == "check" else wide, timeout=300)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stdout.splitlines() if "error[E_UNKNOWN_KEY]" in ln]
    assert len(lines) == 21 and lines[-1].endswith("error[E_UNKNOWN_KEY]: 39980 more unknown keys in (document)")
    assert lines[0].startswith(f"recipes/{wide}.yaml:32:1: ")


class CountingDict(dict):
    """A dict that counts the keys iterated over (what a quadratic merge does n times)."""

    iterated = 0

    def __iter__(self):
        for key in super().__iter__():
            CountingDict.iterated += 1
            yield key


def test_composition_is_linear():
    from moeforge.compiler.recipe import compose

    n = 5000
    layer = {f"k{i}": i for i in range(n)}
    positions = {(k,): i for i, k in enumerate(layer)}
    origins = CountingDict({(k,): -1 for k in layer})
    data = dict(layer)
    compose._merge(data, origins, layer, positions)
    assert dict(origins) == positions and data == layer
    assert CountingDict.iterated <= 2 * n, f"{CountingDict.iterated} origins visited for {n} keys"


def test_plan_layout_bounds_the_gpu_count(sandbox, moeforge_cli):
    """--gpus 1099511627776 hung (the divisors of N were found by trying every number up to N)."""
    proc = moeforge_cli(sandbox, "plan-layout", "tiny-moe", "--platform", "h100", "--gpus", str(1 << 40))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "--gpus 1099511627776 is more than moeforge plans for (at most 1048576)" in proc.stderr
    from moeforge.compiler.planner.space import divisors

    assert all(divisors(n) == [d for d in range(1, n + 1) if n % d == 0] for n in range(1, 400))
    assert divisors(1 << 40) == [1 << i for i in range(41)]


def test_import_reads_a_bounded_input(sandbox, moeforge_cli, tmp_path):
    """`import` of a doubling bash array or /dev/zero was OOM-killed at about 22 GB."""
    doubling = tmp_path / "doubling.sh"
    doubling.write_text('A=(x)\n' + 'A=("${A[@]}" "${A[@]}")\n' * 40 + 'python pretrain_gpt.py "${A[@]}"\n')
    growing = tmp_path / "growing.sh"
    growing.write_text('A=x\n' + 'A="$A$A"\n' * 40 + 'python pretrain_gpt.py "$A"\n')
    cases = [(doubling, None, "expands to more than 4194304 characters"),
             (growing, None, "expands to more than 4194304 characters"),
             ("/dev/zero", None, "not a regular file"), ("-", b"\0" * (5 << 20), "larger than 4194304 bytes")]
    for source, stdin, why in cases:
        for command in ("import", "lint-config"):
            proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", command, str(source),
                                   *(["--root", str(tmp_path)] * (command == "import"))], cwd=sandbox,
                                  input=stdin or b"", capture_output=True, timeout=300,
                                  env={**os.environ, "PYTHONPATH": str(sandbox)})
            text = (proc.stdout + proc.stderr).decode()
            assert proc.returncode == 2 and why in text and text.strip().count("\n") == 0, (command, source, text)


def test_import_reads_what_a_launch_names_within_bounds(sandbox, moeforge_cli, tmp_path):
    """A launch's `source` and its tokenizer files are read through the same bounded reader: /dev/zero named as
    either is a note saying it cannot be read, and the import goes on (it read /dev/zero until killed)."""
    script = tmp_path / "zero.sh"
    script.write_text("source /dev/zero\npython pretrain_gpt.py --num-experts 8 --num-layers 2 --hidden-size 64 "
                      "--num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 "
                      "--global-batch-size 8 --tokenizer-type GPT2BPETokenizer --vocab-file /dev/zero\n")
    proc = moeforge_cli(sandbox, "import", str(script), "--platform", "cpu", "--root", str(tmp_path / "out"),
                        timeout=300)
    assert "--vocab-file /dev/zero cannot be read (not a regular file" in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- item 12: one located line

SEED = "  seed: 1234\n"
HOSTILE_VALUES = {
    "alias-in-list": (H.TINY + "x: &a [1, *a]\n", "E_YAML_RECURSIVE_ALIAS", 32),
    "alias-in-map": (H.TINY + "x: &a {b: *a}\n", "E_YAML_RECURSIVE_ALIAS", 32),
    "5000-digits": (H.TINY.replace(SEED, f"  seed: {'1' * 5000}\n"), "E_INT_RANGE", 29),
    "10^38": (H.TINY.replace(SEED, f"  seed: {10 ** 38}\n"), "E_INT_RANGE", 29),
    "int64-max+1": (H.TINY.replace(SEED, f"  seed: {2 ** 63}\n"), "E_INT_RANGE", 29),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_VALUES))
def test_hostile_values_are_one_located_error(fresh_sandbox, case):
    """A recursive alias, 5000 digits (an internal error) and 10^38 (compiled) are each one located error."""
    text, code, line = HOSTILE_VALUES[case]
    assert SEED in H.TINY and H.TINY.count("\n") == 31
    write(fresh_sandbox, "hostile/bad.yaml", text)
    with pytest.raises(CompileError) as err:
        H.compile_here(fresh_sandbox, "hostile/bad")
    [d] = err.value.diagnostics
    assert (d.code, d.pos.file, d.pos.line) == (code, "recipes/hostile/bad.yaml", line), d.render()


def test_a_directory_check_goes_on_past_a_bad_file(fresh_sandbox, moeforge_cli, monkeypatch, capsys):
    """One recursive alias aborted `check` of the whole directory (exit 2, internal error); now that file has
    its line and the others are checked. A moeforge bug that one file triggers is said at that file too."""
    write(fresh_sandbox, "hostile/a-good.yaml", H.TINY)
    write(fresh_sandbox, "hostile/b-alias.yaml", H.TINY + "x: &a [*a]\n")
    write(fresh_sandbox, "hostile/c-good.yaml", H.TINY)
    proc = moeforge_cli(fresh_sandbox, "check", "recipes/hostile")
    assert proc.returncode == 1 and "checked 3 document(s): 1 error(s)" in proc.stdout
    assert "recipes/hostile/b-alias.yaml:32:4: error[E_YAML_RECURSIVE_ALIAS]" in proc.stdout

    from moeforge.compiler import driver, project
    from moeforge.compiler.commands import check

    monkeypatch.setattr(project, "_root", fresh_sandbox)
    real = driver.load

    def buggy(path, *a, **kw):
        if "b-alias" in str(path):
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, *a, **kw)
    monkeypatch.setattr(driver, "load", buggy)
    diags = [check.check_one(fresh_sandbox / "recipes" / "hostile" / f"{n}.yaml", False)
             for n in ("a-good", "b-alias", "c-good")]
    assert [[d.code for d in ds if d.is_error] for ds in diags] == [[], ["E_INTERNAL"], []]


def test_deep_and_huge_json_is_one_line(fresh_sandbox, moeforge_cli, tmp_path):
    """JSON nested 3000 deep and a 5000-digit integer: diff (plans) and lint-config (flat configs) said
    "internal error: RecursionError"; every JSON the compiler reads goes through moeforge.compiler.bounded (import's
    Hugging Face config.json too)."""
    deep, huge = tmp_path / "deep" / "plan.json", tmp_path / "huge" / "plan.json"
    for path, text in ((deep, '{"a": ' + "[" * 3000 + "]" * 3000 + "}"), (huge, '{"a": ' + "1" * 5000 + "}")):
        path.parent.mkdir()
        path.write_text(text)
        proc = moeforge_cli(fresh_sandbox, "diff", str(path), str(path))
        assert proc.returncode == 1 and "error[E_NOT_A_PLAN]" in proc.stdout
        proc = moeforge_cli(fresh_sandbox, "lint-config", str(path))
        assert proc.returncode == 2 and "unusable input: cannot parse JSON" in proc.stdout + proc.stderr
        proc = moeforge_cli(fresh_sandbox, "import", str(path), "--root", str(tmp_path / "imported"))  # a HF config
        assert proc.returncode == 2 and proc.stderr.startswith(f"{path}: error: ") and proc.stderr.count("\n") == 1


def test_a_symlink_loop_does_not_abort_matrix(fresh_sandbox, moeforge_cli):
    (fresh_sandbox / "recipes" / "hostile" / "loop.yaml").symlink_to("loop.yaml")
    proc = moeforge_cli(fresh_sandbox, "matrix", timeout=600)
    assert proc.returncode == 0 and re.search(r"\nhostile/loop +ERR", proc.stdout)
    proc = moeforge_cli(fresh_sandbox, "check", "recipes/hostile")
    assert "a symbolic link that leads nowhere" in proc.stdout


@pytest.mark.parametrize("key", ["extends", "schema"])
def test_set_cannot_change_extends_or_schema(fresh_sandbox, key):
    """They were silently ignored (the chain is read before any --set; schema is the file's own)."""
    with pytest.raises(CompileError) as err:
        H.compile_here(fresh_sandbox, "tiny-moe/cpu", [f"{key}=other"])
    [d] = err.value.diagnostics
    assert d.code == "E_OVERRIDE" and d.message == f"{key}: cannot be set with --set"
    assert d.pos.file == f"--set {key}=other" and d.help


def test_an_integer_past_int64_in_an_override_is_refused(fresh_sandbox):
    with pytest.raises(CompileError) as err:
        H.compile_here(fresh_sandbox, "tiny-moe/cpu", [f"training.seed={10 ** 38}"])
    assert codes(err) == ["E_INT_RANGE"]
