"""A Hugging Face config.json as moeforge reads it (whether a file is one: compiler/launch_reader/kinds.py): its JSON,
the language model inside a multimodal config, the family that reads it (model_type, else auto_map's
configuration class, else the architecture), and its quantization_config. Each problem is one line naming the key."""
from __future__ import annotations

import json
import re

from moeforge.compiler.bounded import Unreadable, parse_json
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.importer.hf import families as F
from moeforge.compiler.importer.hf.keys import HfRefused
from moeforge.compiler.launch_reader.text import ImportError_


class BadJson(ImportError_):
    """Text that is not JSON, with its line:column."""

    def __init__(self, message: str, location: str):
        super().__init__(message)
        self.location = location


def load(text: str) -> dict:
    """The config's JSON through the compiler's bounded reader (nesting, integer digits, finite numbers)."""
    try:
        data = parse_json(text)
    except Unreadable as exc:
        if exc.where is None:
            raise ImportError_(f"{exc}: not a Hugging Face config.json moeforge reads") from None
        raise BadJson(f"invalid JSON ({exc.detail}); expected a Hugging Face config.json", exc.where) from None
    if not isinstance(data, dict):
        raise ImportError_(f"expected a JSON object (a Hugging Face config.json), got a {type(data).__name__}")
    check_characters(data)
    return data


# C0/C1 controls, DEL, line separators, lone surrogates, U+FFFE/F: no config.json key or name holds one, a terminal
# obeys some, and YAML refuses them even in a comment (PyYAML's ReaderError was once an internal error here)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def check_characters(data) -> None:
    """Every key and string value free of control characters, else one line naming the key path (iterative: the
    bounded reader has capped the nesting already)."""
    stack = [(data, "")]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            where = f"{path}.{key}" if isinstance(key, str) and path else (f"{path}[{key}]" if path or not
                                                                           isinstance(key, str) else key)
            if isinstance(key, str) and _CONTROL.search(key):
                raise ImportError_(f"key {printable(json.dumps(where, ensure_ascii=True))}: holds a control "
                                   "character (a terminal escape, a line break); a config.json key is a name: "
                                   "remove it")
            if isinstance(value, str) and _CONTROL.search(value):
                raise ImportError_(f"{printable(where)}: the value {json.dumps(value[:60], ensure_ascii=True)} holds "
                                   "a control character (a terminal escape, a line break): remove it")
            if isinstance(value, (dict, list)):
                stack.append((value, where))


def language_model(data: dict) -> tuple[dict, str, list[str]]:
    """(the language model's keys, their prefix in config.json, notes): a multimodal config keeps it under
    text_config (its vision tower is not a language model and is not imported)."""
    text = data.get("text_config")
    if text is None:
        return data, "", []
    if not isinstance(text, dict):
        raise ImportError_(f"text_config: expected a mapping (the language model's config), got {json.dumps(text)}")
    outer = data.get("model_type") or (data.get("architectures") or ["?"])[0]
    inner = dict(text)
    if "quantization_config" in data and "quantization_config" not in inner:  # stated once for the whole model
        inner["quantization_config"] = data["quantization_config"]
    others = [k for k in data if k.endswith("_config") and k not in ("text_config", "quantization_config")]
    note = (f"a multimodal config ({outer}): its language model (text_config, model_type "
            f"{inner.get('model_type', '?')}) is imported"
            + (f"; {', '.join(others)} {'is' if len(others) == 1 else 'are'} not" if others else ""))
    return inner, "text_config.", [note]


def check_identity(data: dict, prefix: str = "") -> None:
    """model_type, architectures and auto_map of the right types (a multimodal config's own ones too)."""
    for key, kind, ok in (("model_type", "a string", lambda v: isinstance(v, str)),
                          ("architectures", "a list of class names",
                           lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v)),
                          ("auto_map", "a mapping", lambda v: isinstance(v, dict))):
        if data.get(key) is not None and not ok(data[key]):
            raise ImportError_(f"{prefix}{key}: expected {kind}, got {json.dumps(data[key])}")


def family(data: dict, prefix: str = "") -> tuple[F.Family, list[str]]:
    """The family that reads `data`, and how it was recognised when not by a model_type transformers knows."""
    check_identity(data, prefix)
    model_type = data.get("model_type")
    if model_type in F.BY_MODEL_TYPE:
        fam = F.BY_MODEL_TYPE[model_type]
        notes = []
        if model_type not in (fam.model_types[0],):
            notes.append(f"{prefix}model_type {model_type}: read as {fam.name} ({fam.config_class}'s keys)")
        return fam, notes
    auto = data.get("auto_map") or {}
    auto_config = str(auto.get("AutoConfig", "")).rsplit(".", 1)[-1]
    if auto_config in F.BY_CONFIG_CLASS:
        fam = F.BY_CONFIG_CLASS[auto_config]
        return fam, [f"{prefix}model_type {model_type!r} is custom code (auto_map AutoConfig {auto['AutoConfig']}): "
                     f"its configuration class is {fam.config_class}, so it is read as {fam.name}"]
    known = [a for a in data.get("architectures") or [] if a in F.BY_ARCHITECTURE]
    if known and model_type is None:
        fam = F.BY_ARCHITECTURE[known[0]]
        return fam, [f"{prefix}model_type absent: architectures {known[0]} is read as {fam.name}"]
    if not any(data.get(k) for k in F.EXPERTS):
        what = f"model_type {model_type!r}" if model_type else "this config"
        raise ImportError_(f"{prefix}{what} is not a Mixture-of-Experts model (no {' / '.join(F.EXPERTS)}): "
                           "moeforge compiles MoE training")
    families = ", ".join(sorted(t for f in F.FAMILIES for t in f.model_types))
    custom = f" (auto_map AutoConfig {auto.get('AutoConfig')}: custom code)" if auto_config else ""
    raise ImportError_(f"{prefix}model_type {model_type!r}{custom}: not a family moeforge reads ({families}); if its "
                       "keys are one of these families', set model_type to it")


def quantization(data: dict, prefix: str = "") -> list[str]:
    """Notes on quantization_config (the checkpoint's storage format), or a refusal naming its quant_method."""
    q = data.get("quantization_config")
    if q is None:
        return []
    if not isinstance(q, dict):
        raise ImportError_(f"{prefix}quantization_config: expected a mapping, got {q!r}")
    method = q.get("quant_method")
    if method not in F.QUANTIZATION:
        raise HfRefused(f"{prefix}quantization_config.quant_method {method!r}: a post-training quantized checkpoint "
                        f"(moeforge reads {', '.join(F.QUANTIZATION)}); import the unquantized model's config.json")
    blocks = q.get("weight_block_size")
    fmt = f" ({q['fmt']})" if q.get("fmt") else ""
    text = F.QUANTIZATION[method].format(blocks=f"{fmt}, in {'x'.join(map(str, blocks))} blocks" if blocks else fmt)
    return [f"{prefix}quantization_config.quant_method {method}: {text}"]
