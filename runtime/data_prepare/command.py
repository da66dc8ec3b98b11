"""Tokenize a JSONL corpus into a Megatron indexed dataset: PREFIX.bin + PREFIX.idx + PREFIX.json.

    python -m moeforge.runtime.data_prepare INPUT.jsonl --tokenizer byte|PATH --output PREFIX
                                   [--workers N] [--json-key text] [--progress|--no-progress]

(``moeforge data prepare ...`` runs exactly this in a subprocess, so the compiler never imports
torch or megatron-core.)  The workflow is Megatron-LM's ``tools/preprocess_data.py --append-eod``:
one document per line, the tokenizer's end-of-document id appended to each document, written with
megatron-core's ``IndexedDatasetBuilder`` in the dtype ``DType.optimal_dtype(vocab_size)`` picks.

Why these choices:
- Nothing is written under PREFIX unless the whole corpus is good and the run finished: the files
  are built in a temporary directory beside the output (``.NAME.tmp-XXXXXXXX/``) that becomes the
  dataset's generation, published with one rename (publish.py: .bin, .idx and .json become
  visible together or not at all); SIGINT, SIGTERM, SIGHUP or an error removes the temporaries and
  leaves an older dataset of the same name untouched, and the next run removes what a killed one left.
  Started by ``moeforge data prepare``, the run (and its worker pool) dies with that parent.
- Bad lines are reported as ``INPUT:LINE: what (fix: ...)`` (the first 20, then a count) and the
  run exits 2: a silently skipped document would change the token stream without anyone knowing.
- ``--workers N`` tokenizes batches of lines in N spawned processes and consumes the results in
  input order with at most 2N batches in flight (bounded memory), so the output is byte-identical
  for every N.
- PREFIX.json records the tokenizer (type, path, fingerprint, vocab size, eod id, the Megatron-LM
  flags that train on it), counts, dtype and the source's sha256: a training run can check that
  the dataset was made with the tokenizer it is about to use.

Exit codes: 0 written; 2 bad input or arguments (nothing written); 3 megatron-core, numpy or the
tokenizer's library is not importable here; 7 internal error; 128+N killed by signal N (nothing
written).  Worker processes import only numpy and the tokenizer's library, never megatron-core.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections import deque

from moeforge.runtime.data_prepare import publish as publishing
from moeforge.runtime.data_prepare.encode import MAX_REPORTED, await_batch, batches, encode_batch, init_worker, reset_worker
from moeforge.runtime.data_prepare.tokenizers import (DataError, Missing, interpreter_name, load_tokenizer,
                                             megatron_lm_tokenizer_args, tokenizer_fingerprint, tokenizer_spec)
from moeforge.runtime.errors import EXIT_BACKEND_MISSING, EXIT_BAD_PLAN, EXIT_INTERNAL
from moeforge.runtime.launch.ranks import die_with_parent

EXIT_BAD_INPUT = EXIT_BAD_PLAN  # 2, as every moeforge command uses for bad input
PROG_ENV = "MOEFORGE_DATA_PREPARE_PROG"  # set by `moeforge data prepare` so usage names it
# Test hook: seconds to sleep before encoding every batch after the first (the first batch is
# written at once and announced on stderr), so a test can interrupt a run that is mid-way.
TEST_DELAY_ENV = "MOEFORGE_DATA_PREPARE_TEST_DELAY"
TEST_MARKER = "data prepare test hook: first batch written"

SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


DESCRIPTION = """\
Tokenize a JSONL corpus into a Megatron indexed dataset (PREFIX.bin + PREFIX.idx) with
megatron-core's IndexedDatasetBuilder, as Megatron-LM's tools/preprocess_data.py --append-eod
does: one document per line, the tokenizer's end-of-document id appended to every document
(an empty string becomes a document of just that id), dtype chosen by megatron-core for the
vocabulary size (uint16 below 65500 ids, else int32). Empty and whitespace-only lines are skipped.
PREFIX.json describes the result: tokenizer, vocab size, eod id, documents, tokens, dtype,
source file and its sha256, and the Megatron-LM flags to train on it.

Every input line must be a JSON object whose --json-key value is a string. Bad lines are
reported as INPUT:LINE: what is wrong (fix: ...), the first 20 then a count, and the run exits 2
with nothing written. The files are built under temporary names in the output directory and
moved into place only when the run succeeds: an interrupted or failed run leaves no PREFIX.bin/
.idx/.json of its own and an existing dataset of the same name untouched.
"""

EPILOG = """\
tokenizers:
  byte         UTF-8 bytes 0..255, end-of-document id 256, vocab size 257; train with
               Megatron-LM --tokenizer-type NullTokenizer --vocab-size 257 --null-tokenizer-eod-id 256
  DIR          a HuggingFace tokenizer directory (transformers AutoTokenizer, local files only;
               eod = eos_token_id, vocab size = len(tokenizer)); needs `transformers`
  FILE.model   a SentencePiece model (eod = eos_id, vocab size = piece count); needs `sentencepiece`
  (a directory literally named byte: write ./byte)

exit codes: 0 written, 2 bad input or arguments (nothing written), 3 megatron-core or the
tokenizer's library is not importable in this Python, 7 internal error, 130/143 interrupted.

example:
  moeforge data prepare corpus.jsonl --tokenizer byte --output data/corpus --workers 4
"""


class Interrupted(BaseException):
    """A termination signal arrived; raised from the signal handler (not an Exception, so no
    ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# --------------------------------------------------------------------------------------------
# arguments


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog or os.environ.get(PROG_ENV) or "python -m moeforge.runtime.data_prepare",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="INPUT.jsonl",
                   help="the corpus: one JSON object per line (UTF-8); empty lines are skipped")
    p.add_argument("--tokenizer", required=True, metavar="byte|PATH",
                   help="'byte' (UTF-8 bytes, eod 256, vocab 257), a HuggingFace tokenizer "
                        "directory, or a SentencePiece .model file (see below)")
    p.add_argument("--output", required=True, metavar="PREFIX",
                   help="output prefix, without suffix: writes PREFIX.bin, PREFIX.idx and "
                        "PREFIX.json (replacing older ones only on success); its directory is "
                        "created if missing")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                   help="tokenizer processes (default 1: tokenize in this process); the output "
                        "is byte-identical for every N")
    p.add_argument("--json-key", default="text", metavar="KEY",
                   help="the key holding each document's text (default: text)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (bytes read, rate, ETA; needs tqdm); default: "
                        "shown only when stderr is a terminal")
    return p


# --------------------------------------------------------------------------------------------
# the run


def import_megatron():
    """megatron-core's IndexedDatasetBuilder and DType, or Missing with one line saying what to do."""
    import logging
    import warnings

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime" noise
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed", ...
            import megatron.core
            from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    except ImportError as exc:
        raise Missing(f"megatron-core is not importable in {interpreter_name()} ({exc}); "
                      f"run this in the project's runtime environment: `make setup`, then "
                      f".venv/bin/python -m moeforge.compiler data prepare ...") from None
    return IndexedDatasetBuilder, DType, getattr(megatron.core, "__version__", "unknown")


def _progress_bar(show: bool | None, total: int, desc: str):
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        print(f"{_prog()}: no progress bar: tqdm is not installed in {interpreter_name()} "
              f"(`make setup` installs it)", file=sys.stderr, flush=True)
        return None
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                file=sys.stderr, dynamic_ncols=True, mininterval=0.5)


def _prog() -> str:
    return os.environ.get(PROG_ENV) or "moeforge.runtime.data_prepare"


def _check_paths(args) -> tuple[str, str, str]:
    """(input path, output directory, output name) or DataError."""
    if not os.path.exists(args.input):
        raise DataError(f"{args.input}: no such file (fix: give the path of a JSONL corpus)")
    if os.path.isdir(args.input):
        raise DataError(f"{args.input}: is a directory (fix: give the path of a JSONL corpus file)")
    out = args.output
    for suffix in (".bin", ".idx", ".json"):
        if out.endswith(suffix):
            raise DataError(f"--output {out}: is a prefix, without suffix; {suffix} is added "
                            f"(fix: --output {out[:-len(suffix)]})")
    if not out or out.endswith(os.sep) or os.path.basename(out) in ("", ".", ".."):
        raise DataError(f"--output {out!r}: names a directory, not a prefix "
                        f"(fix: --output {os.path.join(out or '.', 'corpus')})")
    if os.path.isdir(out):
        raise DataError(f"--output {out}: is a directory; the prefix names files beside it "
                        f"(fix: --output {os.path.join(out, 'corpus')})")
    for ext in (".bin", ".idx", ".json"):
        if os.path.isdir(out + ext):
            raise DataError(f"{out + ext}: is a directory, so it cannot be replaced (fix: move it "
                            f"away, or choose another --output)")
    outdir = os.path.dirname(os.path.abspath(out))
    return args.input, outdir, os.path.basename(out)


class _Signals:
    """Turns SIGINT/SIGTERM/SIGHUP into Interrupted (once: later ones are ignored while cleaning
    up), or records them while the finished files are moved into place."""

    def __init__(self):
        self.old: dict = {}
        self.deferring = False
        self.done = False
        self.pending: int | None = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self.old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.done:
            return
        if self.deferring:
            self.pending = self.pending or signum
            return
        self.done = True
        raise Interrupted(signum)

    def resume(self) -> None:
        """Stop deferring; a signal that came meanwhile interrupts now."""
        self.deferring = False
        if self.pending is not None and not self.done:
            self.done = True
            raise Interrupted(self.pending)

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)
        return False


def prepare(args, sig: _Signals) -> int:
    path, outdir, name = _check_paths(args)
    spec = tokenizer_spec(args.tokenizer)
    builder_cls, DType, mcore_version = import_megatron()
    try:
        import numpy  # noqa: F401  (megatron-core needs it too: reaching here means it is there)
    except ImportError as exc:  # pragma: no cover
        raise Missing(f"numpy is not importable in {interpreter_name()} ({exc}): `make setup`") from None
    delay = float(os.environ.get(TEST_DELAY_ENV) or 0)
    if args.workers > 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # our processes are the parallelism

    # the tokenizer is loaded here too: its vocabulary fixes the dtype, and a bad one fails early
    loaded = load_tokenizer(spec)
    _, vocab_size, eod = loaded
    dtype = numpy.dtype(DType.optimal_dtype(vocab_size))
    if eod >= vocab_size:
        raise DataError(f"--tokenizer {args.tokenizer}: end-of-document id {eod} is outside the "
                        f"vocabulary of {vocab_size} (fix: use a consistent tokenizer)")
    reset_worker()
    total = os.path.getsize(path)
    created = []  # the directories this run creates, deepest last: removed again if it fails
    d = outdir
    while not os.path.exists(d):
        created.insert(0, d)
        d = os.path.dirname(d)
    succeeded = False
    start = time.monotonic()
    prefix = publishing.Prefix(outdir, name)
    bar = builder = tmp = lock = None
    try:
        sig.deferring = True  # no interruption between creating the temporaries and knowing them
        os.makedirs(outdir, exist_ok=True)
        lock = publishing.lock(prefix, args.output)
        publishing.clean_stale(prefix)  # what killed runs left: no live run owns it while we hold the lock
        tmp = prefix.make_build_dir()
        sig.resume()
        temps = {ext: os.path.join(tmp, name + ext) for ext in publishing.EXTS}
        builder = builder_cls(temps[".bin"], dtype=dtype.type)
        sha = hashlib.sha256()
        docs = tokens = empty = bad_count = lines = 0
        bad: list = []
        announced = False

        def consume(result):
            nonlocal docs, tokens, empty, bad_count, announced
            lengths, toks, bad_here, nbad, nempty, nbytes = result
            empty += nempty
            if nbad:
                bad.extend(bad_here[:max(0, MAX_REPORTED - len(bad))])
                bad_count += nbad
            if not bad_count:
                offset = 0
                for n in lengths:
                    builder.add_document(toks[offset:offset + n], [n])
                    offset += n
                docs += len(lengths)
                tokens += int(toks.size)
            if bar is not None:
                bar.update(nbytes)
            if delay and not announced:
                announced = True
                print(TEST_MARKER, file=sys.stderr, flush=True)

        with open(path, "rb") as f:
            def read():
                nonlocal lines
                for batch in batches(f, delay > 0):
                    for raw in batch[1]:
                        sha.update(raw)
                    lines += len(batch[1])
                    yield batch

            if args.workers == 1:
                init_worker(spec, args.json_key, dtype.name, delay, in_pool=False, loaded=loaded)
                bar = _progress_bar(args.progress, total, name)
                for batch in read():
                    consume(encode_batch(batch))
            else:
                import multiprocessing

                ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads
                with ctx.Pool(args.workers, initializer=init_worker,
                              initargs=(spec, args.json_key, dtype.name, delay, os.getpid())) as pool:
                    bar = _progress_bar(args.progress, total, name)  # after the pool: no fork
                    pending: deque = deque()
                    for batch in read():
                        pending.append(pool.apply_async(encode_batch, (batch,)))
                        if len(pending) >= 2 * args.workers:
                            consume(await_batch(pending.popleft()))
                    while pending:
                        consume(await_batch(pending.popleft()))
        if bar is not None:
            bar.close()
            bar = None

        if bad_count:
            for lineno, problem, fix in bad:
                print(f"{args.input}:{lineno}: {problem} (fix: {fix})", file=sys.stderr)
            more = bad_count - len(bad)
            print(f"{_prog()}: {bad_count} bad line{'s' if bad_count != 1 else ''} in {args.input}"
                  f"{f' ({more} more not shown)' if more else ''}; nothing written under "
                  f"{args.output}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if docs == 0:
            raise DataError(f"{args.input}: no documents ({lines} line{'s' if lines != 1 else ''}, "
                            f"all empty) (fix: one JSON object per line, e.g. "
                            f'{{"{args.json_key}": "..."}})')
        builder.finalize(temps[".idx"])
        seconds = time.monotonic() - start
        meta = {
            "schema": "moeforge/indexed-dataset/v1",
            "format": "megatron-core IndexedDataset (PREFIX.bin + PREFIX.idx)",
            "tokenizer": {"type": spec[0], "path": spec[1], "vocab_size": vocab_size,
                          "eod_id": eod, **tokenizer_fingerprint(spec),
                          "megatron_lm_args": megatron_lm_tokenizer_args(spec, vocab_size, eod)},
            "documents": docs,
            "tokens": tokens,
            "dtype": dtype.name,
            "append_eod": True,
            "json_key": args.json_key,
            "empty_lines_skipped": empty,
            "source": {"path": os.path.abspath(path), "sha256": sha.hexdigest(), "bytes": total,
                       "lines": lines},
            "megatron_core": mcore_version,
        }
        with open(temps[".json"], "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")
        for p in temps.values():
            publishing.fsync(p)
        sig.deferring = True  # a signal now waits until the dataset is published
        publishing.publish(prefix, tmp)  # the three files become visible together
        succeeded = True
    finally:
        sig.done = True  # from here on a signal no longer interrupts: cleaning up must finish
        sig.deferring = False
        if bar is not None:
            bar.close()
        if builder is not None and not builder.data_file.closed:
            builder.data_file.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if lock is not None:
            if not succeeded and prefix.generation() is None:  # no dataset of this layout: leave no trace
                publishing.remove(prefix.lock_path)
            os.close(lock)
        if not succeeded:
            for d in reversed(created):
                try:
                    os.rmdir(d)
                except OSError:
                    break

    rate = tokens / seconds if seconds > 0 else float("inf")
    skipped = f", {empty} empty line{'s' if empty != 1 else ''} skipped" if empty else ""
    shown = [args.output + ext for ext in (".bin", ".idx", ".json")]
    print(f"prepared {docs} documents, {tokens} tokens ({dtype.name}{skipped}) in {seconds:.1f} s "
          f"({rate:,.0f} tokens/s) -> {', '.join(shown)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # started by `moeforge data prepare`: killing it must not leave this run going
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else EXIT_BAD_INPUT
    prog = _prog()
    with _Signals() as sig:
        try:
            return prepare(args, sig)
        except DataError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except Missing as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return EXIT_BACKEND_MISSING
        except Interrupted as exc:
            name = signal.Signals(exc.signum).name
            print(f"\n{prog}: interrupted by {name}: temporaries removed, nothing written under "
                  f"{args.output}", file=sys.stderr)
            return 128 + exc.signum
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"{prog}: error: {where}{exc.strerror or exc} (nothing written under "
                  f"{args.output})", file=sys.stderr)
            return EXIT_BAD_INPUT
        except Exception as exc:  # a bug here, not in the input: say so plainly, one line
            print(f"{prog}: internal error: {type(exc).__name__}: {exc} (nothing written under "
                  f"{args.output})", file=sys.stderr)
            return EXIT_INTERNAL

