"""The vocabulary a Megatron-LM launch builds its model with, for `moeforge import`: the tokenizer's own size,
read from its files when they are reachable (never by importing transformers or sentencepiece), padded as
Megatron-LM pads it.

Why its own module: most launches never state a vocabulary size. Megatron-LM 0.19.2's build_tokenizer
(megatron/core/tokenizers/utils/build_tokenizer.py) takes it from the tokenizer and pads it up to a multiple
of --make-vocab-size-divisible-by x TP (vocab_size_with_padding) unless --no-pad-vocab-size; --padded-vocab-size
wins over both. What each tokenizer's size is (megatron/core/tokenizers/text/libraries):
- NullTokenizer: --vocab-size itself (its end-of-document id is vocab_size - 1; the 0.19 NullTokenizer adds no
  extra EOD row, unlike the legacy megatron/training/tokenizer one, which added 1);
- GPT2BPETokenizer: len() of the Hugging Face GPT-2 tokenizer of --vocab-file / --merge-file: the entries of
  vocab.json (50257 for GPT-2's own files); so too a launch with those two files and no --tokenizer-type
  (Megatron-LM's own MoE functional tests);
- HuggingFaceTokenizer: len(AutoTokenizer(--tokenizer-model)): tokenizer.json's vocabulary and added tokens (and
  tokenizer_config.json's added_tokens_decoder), counted once each;
- SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer: the .model's piece count;
- TikTokenizer: --vocab-size, else its default 131072.
"""
from __future__ import annotations

from pathlib import Path

from moeforge.compiler.bounded import LIMITS, read_bytes, read_json
from moeforge.compiler.targets.megatron_args import lm_default

GPT2_VOCAB = 50257           # GPT-2's vocab.json (encoder.json): 50,000 merges + 256 bytes + <|endoftext|>
TIKTOKEN_DEFAULT = 2 ** 17   # tiktoken_tokenizer.py DEFAULT_TIKTOKEN_MAX_VOCAB
SENTENCEPIECE = ("SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer")
KEY = "architecture.vocab_size"


def tokenizer_vocab(g, dirs: list[Path]) -> tuple[int | None, str]:
    """(the tokenizer's vocabulary before padding, how it is known) or (None, why it cannot be here).
    `g(dest, default)` reads the launch's arguments; `dirs` are where a relative path may be (the script's
    directory, the current one)."""
    tok = g("tokenizer_type", lm_default("tokenizer_type"))
    gpt2_files = tok is None and g("vocab_file") and g("merge_file")
    if gpt2_files:  # Megatron-LM's MoE functional tests pass GPT-2's files and no type
        size, how = _gpt2(g, dirs)
        return size, f"no --tokenizer-type, and --vocab-file / --merge-file are GPT-2 BPE files: {how}"
    if tok in ("NullTokenizer", None):
        size = g("vocab_size")
        name = tok or "no --tokenizer-type: read as NullTokenizer"
        return (int(size), f"{name}: --vocab-size") if size is not None else (
            None, f"{name} without --vocab-size" if tok else "the launch names no --tokenizer-type")
    if tok == "TikTokenizer":
        size = g("vocab_size")
        return (int(size), "TikTokenizer: --vocab-size") if size is not None else (
            TIKTOKEN_DEFAULT, "TikTokenizer's default vocabulary")
    if tok == "GPT2BPETokenizer":
        return _gpt2(g, dirs)
    model = g("tokenizer_model")
    if tok == "HuggingFaceTokenizer":
        return _huggingface(model, dirs)
    if tok in SENTENCEPIECE:
        path = _find(model, dirs)
        if path is None or not path.is_file():
            return None, f"{tok}: --tokenizer-model {model} is not a file reachable here"
        try:
            size = sentencepiece_pieces(read_bytes(path, LIMITS["vocabulary"]))
        except ValueError as exc:  # bounded.Unreadable among them
            return None, f"{tok}: {path} is not a SentencePiece model ({exc})"
        if g("special_tokens"):
            return None, (f"{tok}: {size} pieces in {path.name}, plus the --special-tokens it adds that are not "
                          "among them")
        return size, f"the pieces of {path.name} (--tokenizer-model)"
    return None, f"the vocabulary of {tok} is not read by moeforge"


def padded(size: int, g, tp: int) -> tuple[int, int]:
    """(Megatron-LM's padded vocabulary, the multiple): vocab_size_with_padding, unless --no-pad-vocab-size."""
    multiple = int(g("make_vocab_size_divisible_by", lm_default("make_vocab_size_divisible_by"))) * tp
    if not g("pad_vocab_size", True):
        return size, 1
    return -(-size // multiple) * multiple, multiple


def _gpt2(g, dirs: list[Path]) -> tuple[int | None, str]:
    path = _find(g("vocab_file"), dirs)
    if path is None:
        where = f"--vocab-file {g('vocab_file')} is not reachable here" if g("vocab_file") else "no --vocab-file"
        return GPT2_VOCAB, f"GPT-2's own vocabulary ({where}; a GPT-2 BPE vocab.json has {GPT2_VOCAB} entries)"
    try:
        return len(read_json(path, LIMITS["vocabulary"])), f"the entries of {path.name} (--vocab-file)"
    except (ValueError, TypeError) as exc:  # bounded.Unreadable among them
        return None, f"--vocab-file {path} cannot be read ({exc})"


def _find(name, dirs: list[Path]) -> Path | None:
    if not name or "${" in str(name) or "$(" in str(name):
        return None
    path = Path(str(name)).expanduser()
    for candidate in ([path] if path.is_absolute() else [d / path for d in dirs] + [path]):
        if candidate.exists():
            return candidate
    return None


def _huggingface(model, dirs: list[Path]) -> tuple[int | None, str]:
    path = _find(model, dirs)
    if path is None:
        return None, (f"HuggingFaceTokenizer: --tokenizer-model {model} is not a local directory here (a Hugging Face "
                      "Hub id, or a path on the training machine)" if model else "HuggingFaceTokenizer without "
                      "--tokenizer-model")
    folder = path if path.is_dir() else path.parent
    file = folder / "tokenizer.json" if path.is_dir() else path
    if not file.is_file() or file.suffix != ".json":
        return None, f"HuggingFaceTokenizer: no tokenizer.json in {folder}"
    try:
        data = read_json(file, LIMITS["vocabulary"])
        vocab = data["model"]["vocab"]
        tokens = set(vocab) if isinstance(vocab, dict) else {piece[0] for piece in vocab}
        tokens |= {t["content"] for t in data.get("added_tokens") or []}
        config = folder / "tokenizer_config.json"
        if config.is_file():
            extra = read_json(config, LIMITS["vocabulary"]).get("added_tokens_decoder") or {}
            tokens |= {t["content"] for t in extra.values() if isinstance(t, dict) and "content" in t}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # bounded.Unreadable among the ValueErrors
        return None, f"HuggingFaceTokenizer: {file} cannot be read as a tokenizer.json ({exc.__class__.__name__})"
    return len(tokens), f"the tokens of {folder.name}/{file.name} (--tokenizer-model), added tokens included"


def sentencepiece_pieces(data: bytes) -> int:
    """The piece count of a SentencePiece ModelProto (field 1, `repeated SentencePiece pieces`), read from its
    protobuf wire format (no sentencepiece import)."""
    i, n, count = 0, len(data), 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            if i >= n:
                raise ValueError("truncated")
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value
            if shift > 63:
                raise ValueError("bad varint")

    while i < n:
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 1:
            i += 8
        elif wire == 2:
            length = varint()
            i += length
            count += number == 1
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
        if i > n or number == 0:
            raise ValueError("truncated")
    if count == 0:
        raise ValueError("no pieces")
    return count
