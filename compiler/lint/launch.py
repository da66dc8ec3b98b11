"""lint-config of a launch: the flat mapping of Megatron-LM dests a launch script, args file,
functional-test MODEL_ARGS or Bridge override list stands for.

Why its own module: `moeforge lint-config` accepts what `moeforge import` reads (compiler/launch_reader/text.py
reads the text), and the mapping carries each value's line and the platform's `gpu` and `versions`
when the launch names one; flat_config.py then reads the mapping like any other.
"""
from __future__ import annotations

import functools
import re

import yaml

from moeforge.compiler import project
from moeforge.compiler.knobs import table as K
from moeforge.compiler.knobs.versions import version_int
from moeforge.compiler.launch_reader import kinds, text as launch_text
from moeforge.compiler.lint.values import UnusableInput

VERSION_KEYS = ("torch", "transformer_engine", "megatron_core")
V19 = version_int("0.19.2")


def launch_mapping(text: str, name: str) -> tuple[dict, dict] | None:
    """What `moeforge import` reads, as a flat mapping of Megatron-LM dests: a launch script or command line
    (pretrain_gpt.py), an args file, a functional-test model_config.yaml (MODEL_ARGS) or a Megatron-Bridge
    override list; with `gpu` and `versions` from the platform the launch names, when it names one.
    None: not one of those (an ordinary YAML / JSON mapping)."""
    kind = kinds.detect(text, name)
    if kind not in kinds.LAUNCHES:
        return None
    try:
        if kind == "bridge":
            data, lines = {}, {}
            for n, line in enumerate(text.splitlines(), 1):
                s = line.strip()
                if s and not s.startswith("#"):
                    key, _, raw = s.lstrip("+").partition("=")
                    if key in ("mixed_precision", "comm_overlap") or key.endswith("_target_"):
                        continue
                    try:
                        data[key] = yaml.safe_load(raw) if raw else None
                    except yaml.YAMLError:
                        data[key] = raw
                    lines[key] = n
            return data, lines
        launcher: dict = {}
        if kind == "args":
            words = launch_text.args_file_words(text)[0]
        elif kind == "functional-test":
            words, launcher = launch_text.functional_test_words(text)
        else:
            words, launcher = launch_text.launch_words(text, None if name in ("-", "<config>") else name)
        dests, bad = launch_text.parse_flags(words)
        platform = launch_text.guess_platform(text, dests, launch_text.platform_docs(project.recipes()),
                                              launcher.get("nproc_per_node"))[0]
    except launch_text.ImportError_ as exc:
        raise UnusableInput(str(exc)) from None
    flags = dests.pop("__flags__", {})
    data, lines = {}, {}
    for dest, value in dests.items():
        k = knob_of_dest(dest)
        if k is not None and not isinstance(value, bool):
            try:
                value = launch_text.knob_value(k, value)
            except (ValueError, SyntaxError):
                pass  # reported as a type problem by read()
        elif isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            value = int(value)
        data[dest] = value
        lines[dest] = line_of(text, flags.get(dest, dest).split()[0])
    if data.get("eval_iters") == 0:  # no evaluation: the interval moeforge writes anyway (Megatron-LM 0.19
        data.pop("eval_interval", None)  # divides by it) is not one
    for text_, why in bad:  # unknown flags: did-you-mean in read()
        key = text_.split()[0]
        if key.startswith("--"):
            data.setdefault(key, None)
            lines[key] = line_of(text, key)
    data["launch"] = context(kind, launcher, data)
    if platform is not None:
        doc = launch_text.platform_docs(project.recipes())[platform]
        data.setdefault("gpu", doc.get("gpu") and {"name": doc["gpu"]["name"]})
        data.setdefault("versions", {k: doc.get("software", {}).get(k) for k in VERSION_KEYS})
    return data, lines


WHY_MEGATRON_LM = {"args": "an args file of Megatron-LM flags", "functional-test": "a Megatron-LM functional-test "
                   "model_config.yaml (pretrain_gpt.py's flags)"}


def context(kind: str, launcher: dict, dests: dict) -> dict:
    """What the launch says about itself, beside its flags: who reads them (the entry point it runs, not which
    names it uses: --optimizer is Megatron-LM's flag too), training or inference (an inference entry point,
    functional-test MODE: inference, --inference-* flags), and whether the model's arguments come from the
    checkpoint (--use-checkpoint-args)."""
    entry = launcher.get("entry")
    inference_flags = sorted(d for d, v in dests.items() if d.startswith("inference_") and v not in (None, False))
    mode = "inference" if launcher.get("mode") == "inference" or inference_flags else "training"
    if launcher.get("mode") == "inference":
        why_mode = "MODE: inference" if kind == "functional-test" else f"the launch runs {entry}"
    else:
        why_mode = f"--{inference_flags[0].replace('_', '-')}" if inference_flags else ""
    return {"frontend": "megatron-lm", "mode": mode, "why_mode": why_mode,
            "why": WHY_MEGATRON_LM.get(kind) or f"the launch runs {entry} (Megatron-LM's entry point)",
            "checkpoint_args": dests.get("use_checkpoint_args") is True}


def line_of(text: str, word: str) -> int:
    """The first 1-based line holding ``word`` (0: none), so a launch's findings point at the flag."""
    for n, line in enumerate(text.splitlines(), 1):
        if word in line:
            return n
    return 0


def knob_of_dest(dest: str):
    """The knob a Megatron-LM 0.19 argument dest sets (the first in the table), else the knob of that field."""
    return _knobs_by_dest().get(dest) or K.BY_FIELD.get(dest)


@functools.lru_cache(maxsize=1)
def _knobs_by_dest() -> dict:
    out: dict = {}
    for k in K.KNOBS:
        for dest in k.lm_dests(V19):
            out.setdefault(dest, k)
    return out
