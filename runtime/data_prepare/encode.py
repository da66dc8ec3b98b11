"""Encoding one batch of JSONL lines into token ids: in a worker process, or in the main one.

Why its own module: `moeforge data prepare --workers N` hands batches to N spawned processes, which
import this module (numpy and the tokenizer's library, never megatron-core) and keep one encoder
each; every line is checked (UTF-8, one JSON object, the key, a string) and reported by number with
a fix, and a batch's result is the same in any process, so the output is byte-identical for every N.
"""
from __future__ import annotations

import json
import signal
import time

from moeforge.runtime.plan.inputs import InputError, parse_json
from moeforge.runtime.data_prepare.tokenizers import load_tokenizer

MAX_REPORTED = 20  # bad lines printed; the rest are counted
BATCH_LINES = 1024  # a batch ends at this many lines or BATCH_BYTES, whichever comes first
BATCH_BYTES = 1 << 20


_W: dict = {}  # this process's encoder state, set by init_worker


def reset_worker() -> None:
    """Forget this process's encoder (the main process encodes itself with --workers 1)."""
    _W.clear()


def init_worker(spec, key: str, dtype_name: str, delay: float, in_pool: int | bool, loaded=None) -> None:
    """This process's encoder; ``in_pool``: the pid of the run whose pool this worker is (else False)."""
    if in_pool:  # the parent handles Ctrl-C for everyone and terminates the pool; its death ends us
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        from moeforge.runtime.launch.ranks import die_with_parent

        die_with_parent(int(in_pool))
    try:
        import numpy

        encode, vocab, eod = loaded or load_tokenizer(spec)
    except BaseException as exc:  # an initializer that raises makes Pool respawn it forever:
        _W["error"] = exc         # keep the error and raise it from the first batch instead
        return
    _W.update(encode=encode, vocab=vocab, eod=eod, key=key, dtype=numpy.dtype(dtype_name),
              check_range=spec[0] != "byte", delay=delay, numpy=numpy)


def _describe(value) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _check_line(raw: bytes, key: str):
    """The document text of one non-empty line, or (problem, fix)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                      "re-encode the file as UTF-8")
    try:
        obj = parse_json(line, strict=False)
    except json.JSONDecodeError as exc:
        return None, (f"not valid JSON: {exc.msg} at column {exc.colno}",
                      f'write one JSON object per line, e.g. {{"{key}": "..."}}')
    except InputError as exc:
        return None, (f"not readable JSON: {exc}", "shorten or flatten the line's other values")
    if not isinstance(obj, dict):
        return None, (f"{_describe(obj)}, not a JSON object",
                      f'write each document as an object, e.g. {{"{key}": "..."}}')
    if key not in obj:
        keys = ", ".join(json.dumps(k) for k in list(obj)[:5]) + (", ..." if len(obj) > 5 else "")
        strings = [k for k, v in obj.items() if isinstance(v, str)]
        fix = (f"--json-key {strings[0]}" if len(strings) == 1 else "--json-key KEY") + \
            f" to read another key, or add {json.dumps(key)} to this line"
        return None, (f"no {json.dumps(key)} key (keys: {keys or 'none'})", fix)
    text = obj[key]
    if not isinstance(text, str):
        return None, (f"{json.dumps(key)} is {_describe(text)}, not a string",
                      f"make {json.dumps(key)} the document's text as one string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return None, (f"{json.dumps(key)} holds an unpaired surrogate \\u{ord(text[exc.start]):04x}",
                      "remove it or complete the \\uXXXX surrogate pair")
    return text, None


def _pause(seconds: float) -> None:
    """The test hook's pause, in naps of 0.1 s. Python runs a signal handler between bytecodes: a signal that
    lands just before one long time.sleep() starts would wait for the whole sleep, so each nap ends in time
    for the handler to interrupt the run."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))


def await_batch(async_result):
    """A pool worker's encoded batch, awaited in steps of 0.1 s by the main process: a signal that lands just
    before one long blocking wait starts would otherwise be handled only when the batch arrives."""
    import multiprocessing

    while True:
        try:
            return async_result.get(timeout=0.1)
        except multiprocessing.TimeoutError:
            continue


def encode_batch(batch):
    """``(first_lineno, [raw lines])`` -> (lengths, tokens, bad[:20], bad_count, empty, nbytes)."""
    first, lines, delay_this = batch
    if "error" in _W:
        raise _W["error"]
    if delay_this and _W["delay"]:
        _pause(_W["delay"])
    np = _W["numpy"]
    dtype, eod, key = _W["dtype"], _W["eod"], _W["key"]
    lengths, pieces, bad, bad_count, empty, nbytes = [], [], [], 0, 0, 0
    for i, raw in enumerate(lines):
        nbytes += len(raw)
        if not raw.strip():
            empty += 1
            continue
        text, problem = _check_line(raw, key)
        if problem is not None:
            bad_count += 1
            if len(bad) < MAX_REPORTED:
                bad.append((first + i, *problem))
            continue
        if bad_count:
            continue  # nothing will be written: only look for more bad lines
        ids = _W["encode"](text)
        doc = np.empty(len(ids) + 1, dtype=dtype)
        if _W["check_range"] and len(ids):
            arr = np.asarray(ids, dtype=np.int64)
            if arr.min() < 0 or arr.max() >= _W["vocab"]:
                raise RuntimeError(f"line {first + i}: the tokenizer produced id {int(arr.max())} "
                                   f"outside its vocabulary of {_W['vocab']}")
        doc[:-1] = ids
        doc[-1] = eod
        pieces.append(doc)
        lengths.append(doc.size)
    tokens = np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)
    return lengths, tokens, bad, bad_count, empty, nbytes


def batches(f, delay: bool):
    """``(first_lineno, lines, delay_this)`` batches of the binary file ``f`` (1-based lines)."""
    lineno, lines, size = 1, [], 0
    count = 0
    for raw in f:
        lines.append(raw)
        size += len(raw)
        if len(lines) >= BATCH_LINES or size >= BATCH_BYTES:
            yield lineno, lines, delay and count > 0
            count += 1
            lineno += len(lines)
            lines, size = [], 0
    if lines:
        yield lineno, lines, delay and count > 0
