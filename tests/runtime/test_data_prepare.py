"""`moeforge data prepare` (issue 13): JSONL -> Megatron indexed dataset, end to end.

Every run goes through the real CLI (`python -m moeforge.compiler data prepare`, which starts
`python -m moeforge.runtime.data_prepare`), and every dataset is read back by megatron-core's own
IndexedDataset in a separate process. No test asserts anything about wall-clock time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
PY312 = ROOT / ".venv312" / "bin" / "python"
TIMEOUT = 600
EOD = 256

READER = textwrap.dedent("""\
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import megatron.core
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    out = {}
    for prefix in sys.argv[1:]:
        ds = IndexedDataset(prefix)
        out[prefix] = {"sequences": len(ds), "dtype": ds.index.dtype.__name__,
                       "document_indices": ds.document_indices.tolist(),
                       "docs": [ds[i].tolist() for i in range(len(ds))]}
    out["version"] = megatron.core.__version__
    print(json.dumps(out))
    """)


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.pop("MOEFORGE_DATA_PREPARE_TEST_DELAY", None)
    env.update(extra)
    return env


def _has(python, *modules) -> bool:
    if not Path(python).exists():
        return False
    probe = "import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)"
    return subprocess.run([str(python), "-c", probe, *modules], capture_output=True, env=_env()).returncode == 0


def _interpreter_with(*modules):
    """This test's Python, else .venv312's, when it can import ``modules``; None otherwise."""
    for python in (PY, PY312):
        if _has(python, *modules):
            return str(python)
    return None


def prepare(*args, python=PY, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "moeforge.compiler", "data", "prepare", *map(str, args)], cwd=ROOT,
                          env=_env(**env), capture_output=True, text=True, timeout=TIMEOUT)


def read_back(*prefixes, python=PY) -> dict:
    proc = subprocess.run([str(python), "-c", READER, *map(str, prefixes)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


TEXTS = ["hello, world", "", "  spaces kept  ", "ünïcödé — ✓ 漢字 🙂", 'quote " and \\ backslash\nnewline',
         "tab\there"]


def write_corpus(path: Path, n: int) -> list[str]:
    """``n`` documents (more than one batch of 1024 lines), with blank lines between some."""
    docs = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            text = TEXTS[i % len(TEXTS)] + (f" #{i}" if i % 7 else "")
            docs.append(text)
            f.write(json.dumps({"id": i, "text": text, "body": text}, ensure_ascii=i % 2 == 0) + "\n")
            if i % 500 == 0:
                f.write("\n   \n")  # empty and whitespace-only lines: skipped
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """One corpus prepared twice: --workers 1 into a directory that does not exist yet, and
    --workers 2 --progress (forced: stderr is a pipe here) --json-key body (the same text)."""
    tmp = tmp_path_factory.mktemp("data-prepare")
    src = tmp / "corpus.jsonl"
    docs = write_corpus(src, 2500)
    one = prepare(src, "--tokenizer", "byte", "--output", tmp / "new" / "dir" / "w1")
    two = prepare(src, "--tokenizer", "byte", "--output", tmp / "w2", "--workers", "2", "--progress",
                  "--json-key", "body")
    return {"tmp": tmp, "src": src, "docs": docs, "one": one, "two": two,
            "w1": tmp / "new" / "dir" / "w1", "w2": tmp / "w2"}


def test_help_describes_every_option():
    proc = subprocess.run([PY, "-m", "moeforge.compiler", "data", "prepare", "--help"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: moeforge data prepare")
    sys.path.insert(0, str(ROOT))
    from moeforge.runtime.data_prepare.command import build_parser  # argparse only: no megatron-core here

    for action in build_parser()._actions:
        for name in action.option_strings or [action.metavar]:
            assert name in proc.stdout, name
    for words in ("Empty and whitespace-only lines are skipped", "NullTokenizer", "sentencepiece",
                  "transformers", "exit codes"):
        assert words in proc.stdout
    listing = subprocess.run([PY, "-m", "moeforge.compiler", "data", "--help"], cwd=ROOT, env=_env(),
                             capture_output=True, text=True, timeout=TIMEOUT)
    assert listing.returncode == 0 and "prepare" in listing.stdout


@pytest.mark.parametrize("reader", ["this", "venv312"])
def test_tokens_are_utf8_bytes_plus_eod(corpus, reader):
    python = PY if reader == "this" else PY312
    if reader == "venv312" and not _has(PY312, "megatron.core"):
        pytest.skip(".venv312 with megatron-core 0.19 is not built (make setup312)")
    for run in (corpus["one"], corpus["two"]):
        assert run.returncode == 0, run.stderr
    got = read_back(corpus["w1"], corpus["w2"], python=python)
    expected = [list(t.encode("utf-8")) + [EOD] for t in corpus["docs"]]
    for prefix in (corpus["w1"], corpus["w2"]):
        ds = got[str(prefix)]
        assert ds["dtype"] == "uint16"  # DType.optimal_dtype(257)
        assert ds["sequences"] == len(expected) == 2500
        assert ds["document_indices"] == list(range(len(expected) + 1))  # one sequence per document
        assert ds["docs"] == expected


def test_metadata_and_summary(corpus):
    run, prefix, src = corpus["one"], corpus["w1"], corpus["src"]
    assert run.returncode == 0, run.stderr
    meta = json.loads(Path(f"{prefix}.json").read_text())
    n_tokens = sum(len(t.encode("utf-8")) + 1 for t in corpus["docs"])
    assert meta["documents"] == 2500 and meta["tokens"] == n_tokens and meta["dtype"] == "uint16"
    assert meta["tokenizer"]["type"] == "byte" and meta["tokenizer"]["vocab_size"] == 257
    assert meta["tokenizer"]["eod_id"] == EOD
    assert meta["tokenizer"]["megatron_lm_args"] == ["--tokenizer-type", "NullTokenizer", "--vocab-size",
                                                     "257", "--null-tokenizer-eod-id", "256"]
    assert meta["source"]["path"] == str(src.resolve())
    assert meta["source"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert meta["empty_lines_skipped"] == 2 * 5  # "\n   \n" after documents 0, 500, ..., 2000
    assert meta["append_eod"] is True and meta["json_key"] == "text"
    summary = run.stdout.strip().splitlines()
    assert len(summary) == 1
    line = summary[0]
    assert line.startswith(f"prepared 2500 documents, {n_tokens} tokens")
    assert "tokens/s" in line and "10 empty lines skipped" in line
    for ext in (".bin", ".idx", ".json"):
        assert f"{prefix}{ext}" in line
    assert "%|" not in run.stderr  # no progress bar: stderr is not a terminal and none was asked for


def test_any_number_of_workers_writes_the_same_bytes(corpus):
    for run in (corpus["one"], corpus["two"]):
        assert run.returncode == 0, run.stderr
    for ext in (".bin", ".idx"):
        assert Path(f"{corpus['w1']}{ext}").read_bytes() == Path(f"{corpus['w2']}{ext}").read_bytes()
    assert leftovers(corpus["w1"].parent) == [] and leftovers(corpus["w2"].parent) == []


def test_progress_bar_is_forced_by_progress(corpus, tmp_path):
    run = corpus["two"]
    assert run.returncode == 0, run.stderr
    if _has(PY, "tqdm"):
        assert "100%|" in run.stderr and "B/s" in run.stderr
        return
    # this Python lacks tqdm: the run says so in one line, and the bar is checked where tqdm is
    assert "no progress bar: tqdm is not installed" in run.stderr
    python = _interpreter_with("megatron.core", "tqdm")
    if python is None:
        pytest.skip("no Python here has both megatron-core and tqdm (make setup installs tqdm)")
    small = tmp_path / "small.jsonl"
    write_corpus(small, 50)
    bar = prepare(small, "--tokenizer", "byte", "--output", tmp_path / "p", "--progress", python=python)
    assert bar.returncode == 0, bar.stderr
    assert "100%|" in bar.stderr and "B/s" in bar.stderr


BAD = [  # (line content, expected report fragment)
    ("{not json", "not valid JSON"),
    ("[1, 2]", "an array, not a JSON object"),
    ('{"body": "x", "id": 3}', 'no "text" key (keys: "body", "id") (fix: --json-key body'),
    ('{"text": ["a", "b"]}', '"text" is an array, not a string'),
    ('{"text": null}', '"text" is null, not a string'),
    ('{"text": "\\ud800"}', "unpaired surrogate"),
    ("42", "a number, not a JSON object"),
]


def test_bad_lines_are_reported_and_nothing_is_written(tmp_path):
    src = tmp_path / "bad.jsonl"
    lines, where = [], {}
    for i in range(30):
        lines.append(json.dumps({"text": f"fine {i}"}))
        if i % 4 == 1 and len(where) < len(BAD):
            content, fragment = BAD[len(where)]
            lines.append(content)
            where[len(lines)] = fragment
    lines.append("")  # empty: skipped, not bad
    with open(src, "wb") as f:
        f.write(("\n".join(lines) + "\n").encode())
        f.write(b'{"text": "\xff"}\n')  # not UTF-8
        first_extra = len(lines) + 2
        f.write(b"[]\n" * 25)
    where[len(lines) + 1] = "not valid UTF-8 (byte 0xff at column 11)"
    out = tmp_path / "missing" / "dir" / "corpus"
    run = prepare(src, "--tokenizer", "byte", "--output", out)
    assert run.returncode == 2, run.stderr
    reports = [ln for ln in run.stderr.splitlines() if ln.startswith(f"{src}:")]
    assert len(reports) == 20  # the first 20, then a count
    for lineno, fragment in where.items():
        report = next(r for r in reports if r.startswith(f"{src}:{lineno}: "))
        assert fragment in report and "(fix: " in report, report
    numbers = [int(r.split(":")[1]) for r in reports]
    assert numbers == sorted(where) + list(range(first_extra, first_extra + 20 - len(where)))
    total = len(where) + 25
    assert f"{total} bad lines in {src} ({total - 20} more not shown); nothing written" in run.stderr
    assert not (tmp_path / "missing").exists()  # not even the output directory
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_a_corpus_of_empty_lines_is_refused(tmp_path):
    src = tmp_path / "empty.jsonl"
    src.write_text("\n  \n\n")
    run = prepare(src, "--tokenizer", "byte", "--output", tmp_path / "x")
    assert run.returncode == 2
    assert "no documents (3 lines, all empty)" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl"]


@pytest.mark.parametrize("output,fix", [("data/corpus.bin", "--output data/corpus"),
                                        ("data/corpus.idx", "--output data/corpus"),
                                        ("data/", "--output data/corpus")])
def test_an_output_that_is_not_a_prefix_is_refused(tmp_path, output, fix):
    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "x"}\n')
    run = subprocess.run([PY, "-m", "moeforge.compiler", "data", "prepare", str(src), "--tokenizer", "byte",
                          "--output", output], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert run.returncode == 2
    assert f"(fix: {fix})" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "data").exists()


def test_missing_input_and_tokenizer_are_refused(tmp_path):
    run = prepare(tmp_path / "nope.jsonl", "--tokenizer", "byte", "--output", tmp_path / "x")
    assert run.returncode == 2 and "nope.jsonl: no such file" in run.stderr
    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "x"}\n')
    run = prepare(src, "--tokenizer", tmp_path / "no-tokenizer", "--output", tmp_path / "x")
    assert run.returncode == 2 and "does not exist (fix: --tokenizer byte" in run.stderr
    run = prepare(src, "--tokenizer", "byte", "--output", tmp_path / "x", "--workers", "0")
    assert run.returncode == 2 and "--workers" in run.stderr


@pytest.mark.parametrize("how", ["SIGINT to the process group, --workers 2",
                                 "SIGTERM to moeforge only, --workers 1"])
def test_an_interrupted_run_leaves_nothing_and_keeps_the_old_dataset(tmp_path, how):
    src = tmp_path / "corpus.jsonl"
    write_corpus(src, 3000)  # three batches: the test hook sleeps before the second and third
    out = tmp_path / "out"
    out.mkdir()
    old = {ext: f"older dataset {ext}".encode() for ext in (".bin", ".idx", ".json")}
    for ext, content in old.items():
        (out / f"corpus{ext}").write_bytes(content)
    group = how.startswith("SIGINT")
    proc = subprocess.Popen([PY, "-m", "moeforge.compiler", "data", "prepare", str(src), "--tokenizer", "byte",
                             "--output", str(out / "corpus"), "--workers", "2" if group else "1"],
                            cwd=ROOT, env=_env(MOEFORGE_DATA_PREPARE_TEST_DELAY="600"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    err: list[str] = []
    written = threading.Event()

    def drain():
        for line in proc.stderr:
            err.append(line)
            if "first batch written" in line:
                written.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert written.wait(TIMEOUT), "".join(err)
        assert leftovers(out), "the run is mid-way: its temporaries exist"
        if group:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        else:
            proc.send_signal(signal.SIGTERM)  # what a scheduler does
        rc = proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(TIMEOUT)
    stderr = "".join(err)
    assert rc == (130 if group else 143), stderr
    assert f"interrupted by {'SIGINT' if group else 'SIGTERM'}" in stderr
    assert "Traceback" not in stderr
    assert leftovers(out) == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {f"corpus{e}": c for e, c in old.items()}


def test_without_megatron_core_one_line_says_which_environment(tmp_path):
    """A real interpreter without megatron-core: a bare venv of this Python with moeforge installed (editable, as
    `make setup` installs it: the finder this venv has) and no other package."""
    bare = tmp_path / "bare"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=TIMEOUT)
    [site] = bare.glob("lib/python3*/site-packages")
    editable = sorted(Path(sysconfig.get_paths()["purelib"]).glob("__editable__*moeforge*"))
    assert editable, "moeforge is not installed editable in this venv (make setup)"
    for found in editable:
        shutil.copy2(found, site / found.name)
    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "x"}\n')
    run = prepare(src, "--tokenizer", "byte", "--output", tmp_path / "out" / "x",
                  python=bare / "bin" / "python")
    assert run.returncode == 3
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "megatron-core is not importable" in lines[0] and "make setup" in lines[0]
    assert not (tmp_path / "out").exists()


TOKENIZER_SCRIPT = textwrap.dedent("""\
    import sys
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "</s>": 1, "hello": 2, "world": 3, "moe": 4, "forge": 5}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="</s>").save_pretrained(sys.argv[1])
    """)


def test_huggingface_tokenizer_directory(tmp_path):
    python = _interpreter_with("megatron.core", "transformers", "tokenizers")
    if python is None:
        pytest.skip("no Python here has megatron-core, transformers and tokenizers (make setup312 builds one)")
    tok = tmp_path / "tokenizer"
    made = subprocess.run([python, "-c", TOKENIZER_SCRIPT, str(tok)], env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert made.returncode == 0, made.stderr
    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "hello world"}\n\n{"text": "moe forge unknown"}\n{"text": ""}\n')
    run = prepare(src, "--tokenizer", tok, "--output", tmp_path / "hf", python=python)
    assert run.returncode == 0, run.stderr
    got = read_back(tmp_path / "hf", python=python)[str(tmp_path / "hf")]
    assert got["docs"] == [[2, 3, 1], [4, 5, 0, 1], [1]]  # eod = eos_token_id = 1, unknown word -> [UNK]
    assert got["dtype"] == "uint16"
    meta = json.loads((tmp_path / "hf.json").read_text())
    assert meta["tokenizer"]["type"] == "huggingface" and meta["tokenizer"]["path"] == str(tok)
    assert meta["tokenizer"]["vocab_size"] == 6 and meta["tokenizer"]["eod_id"] == 1
    assert meta["tokenizer"]["files"] == ["tokenizer.json", "tokenizer_config.json"]
    assert len(meta["tokenizer"]["sha256"]) == 64
    assert meta["documents"] == 3 and meta["tokens"] == 8
