"""The tokenizers `moeforge data prepare` reads with: byte, a HuggingFace directory, a SentencePiece model.

Why its own module: a tokenizer travels to the worker processes as a spec (kind, path) and each
worker loads its own; the fingerprint of the files that define it goes into PREFIX.json so that a
training run can check it trains on the tokenizer the data was made with; and the Megatron-LM flags
that select it are written next to it.  Only numpy and the tokenizer's own library are imported.
"""
from __future__ import annotations

import hashlib
import os
import sys

BYTE_VOCAB_SIZE = 257
BYTE_EOD = 256
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                      "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
                      "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")


class DataError(Exception):
    """Bad input or arguments: one message, exit 2, nothing written."""


class Missing(Exception):
    """A package this run needs is not importable in this interpreter: exit 3."""


def interpreter_name() -> str:
    return sys.executable or "this Python"


def load_tokenizer(spec: tuple[str, str | None]):
    """(encode(text) -> list|ndarray of ids, vocab_size, eod_id) for ``spec``."""
    kind, path = spec
    if kind == "byte":
        import numpy

        def encode(text: str):
            return numpy.frombuffer(text.encode("utf-8"), dtype=numpy.uint8)
        return encode, BYTE_VOCAB_SIZE, BYTE_EOD
    if kind == "huggingface":
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise Missing(f"--tokenizer {path} is a HuggingFace tokenizer directory, which needs the "
                          f"`transformers` package, not importable in {interpreter_name()} ({exc}): "
                          f"pip install transformers, or use --tokenizer byte") from None
        try:
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as exc:  # transformers raises many kinds for a directory it cannot read
            raise DataError(f"--tokenizer {path}: transformers cannot load a tokenizer from this "
                            f"directory: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
                            f"(fix: point it at a directory with tokenizer.json/tokenizer_config.json, "
                            f"as save_pretrained writes)") from None
        if tok.eos_token_id is None:
            raise DataError(f"--tokenizer {path}: the tokenizer has no eos_token, so there is no "
                            f"end-of-document id to append (fix: set eos_token in its "
                            f"tokenizer_config.json)")
        tok.model_max_length = 1 << 62  # documents are longer than any context: no length warning

        def encode(text: str):
            return tok.encode(text, add_special_tokens=False)
        return encode, len(tok), int(tok.eos_token_id)
    if kind == "sentencepiece":
        try:
            import sentencepiece
        except ImportError as exc:
            raise Missing(f"--tokenizer {path} is a SentencePiece model, which needs the "
                          f"`sentencepiece` package, not importable in {interpreter_name()} ({exc}): "
                          f"pip install sentencepiece, or use --tokenizer byte") from None
        try:
            sp = sentencepiece.SentencePieceProcessor(model_file=path)
        except Exception as exc:
            raise DataError(f"--tokenizer {path}: sentencepiece cannot load it: {exc} "
                            f"(fix: give a SentencePiece .model file)") from None
        if sp.eos_id() < 0:
            raise DataError(f"--tokenizer {path}: the model has no eos piece, so there is no "
                            f"end-of-document id to append (fix: train it with an eos piece)")

        def encode(text: str):
            return sp.encode(text)
        return encode, sp.get_piece_size(), int(sp.eos_id())
    raise AssertionError(kind)


def tokenizer_spec(arg: str) -> tuple[str, str | None]:
    if arg == "byte":
        return ("byte", None)
    path = os.path.abspath(arg)
    if os.path.isdir(path):
        return ("huggingface", path)
    if os.path.isfile(path) and path.endswith(".model"):
        return ("sentencepiece", path)
    what = "is a file but not a SentencePiece .model" if os.path.isfile(path) else "does not exist"
    raise DataError(f"--tokenizer {arg}: {what} (fix: --tokenizer byte, a HuggingFace tokenizer "
                    f"directory, or a SentencePiece .model file)")


def tokenizer_fingerprint(spec: tuple[str, str | None]) -> dict:
    """sha256 of the files that define the tokenizer (for byte: none are needed)."""
    kind, path = spec
    if kind == "byte":
        return {}
    if kind == "sentencepiece":
        return {"sha256": _sha256_file(path), "files": [os.path.basename(path)]}
    files = sorted(f for f in os.listdir(path)
                   if f in HF_TOKENIZER_FILES and os.path.isfile(os.path.join(path, f)))
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode() + b"\0" + _sha256_file(os.path.join(path, f)).encode() + b"\n")
    return {"sha256": h.hexdigest(), "files": files}


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def megatron_lm_tokenizer_args(spec: tuple[str, str | None], vocab_size: int, eod: int) -> list[str]:
    kind, path = spec
    if kind == "byte":
        return ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(vocab_size),
                "--null-tokenizer-eod-id", str(eod)]
    if kind == "huggingface":
        return ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", path]
    return ["--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", path]
