"""Reading a Megatron launch as text: which kind it is, its words, its flags as argument dests, and
a flag's value as a knob's value.

Why its own module: `moeforge import` and `moeforge lint-config` both read launch scripts, args
files, functional-test MODEL_ARGS and Bridge override lists, and both need the same words and the
same verdict on each flag (Megatron-LM 0.19.2's parser, kept as data in
compiler/data/megatron_lm_args.json).  A script is never executed: compiler/launch_reader/shell.py evaluates
what bash would (tree-sitter-bash parses it) and names what it cannot.
"""
from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import yaml

from moeforge.compiler.bounded import LIMITS, Unreadable, parse_json, read_text
from moeforge.compiler.knobs import table as K
from moeforge.compiler.launch_reader import kinds
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.recipe.load import load_file
from moeforge.compiler.targets.megatron_args import lm_parser
from moeforge.compiler.resources import BUILTIN_RECIPES


class ImportError_(Exception):
    """The input cannot be imported (exit 2)."""

# ----------------------------------------------------------------------- reading the source

def detect(text: str, name: str = "") -> str:
    """The kind of input (compiler/launch_reader/kinds.py); ImportError_ naming every expected kind when it is none."""
    kind = kinds.detect(text, name)
    if kind is None:
        raise ImportError_(f"not a launch: {kinds.expected()}; {kinds.what_it_is(text, name)}")
    if kind not in kinds.LAUNCHES:  # a Hugging Face config: `moeforge import` (importer/files.py) reads those
        raise ImportError_(f"{kind}: not a launch (moeforge import reads it as a Hugging Face config)")
    return kind


def launch_words(text: str, path: str | Path | None = None) -> tuple[list[str], dict]:
    """(the words after the entry point, the launch's context: `env` (what the script sets), `nnodes`,
    `nproc_per_node`, `entry` (the script it runs), `mode` (training | inference) and `notes` (what the shell
    reader could not evaluate)). The last command that runs an entry point is the launch."""
    from moeforge.compiler.launch_reader.shell import TooLarge, read_script  # lazy: tree-sitter-bash, only to read a script

    try:
        script = read_script(text, path)
    except TooLarge as exc:
        raise ImportError_(str(exc)) from None
    command = None
    for cmd in script.commands:
        hit = next((i for i, w in enumerate(cmd.words) if kinds.entry_point(w)), None)
        if hit is not None:
            command = (cmd.words[:hit], cmd.words[hit], cmd.words[hit + 1:], cmd.env)
    if command is None:
        flagged = max(script.commands, key=lambda c: sum(w.startswith("--") for w in c.words), default=None)
        if flagged is not None and sum(w.startswith("--") for w in flagged.words) >= 5:
            words = flagged.words
            runs = (f"python -m {words[words.index('-m') + 1]}" if "-m" in words[:-1]
                    else next((w for w in words if w.endswith(".py")), words[0]))
            raise ImportError_(f"no launch command found: the command at {flagged.where}:{flagged.line} runs "
                               f"`{runs[:80]}`, not pretrain_gpt.py or an inference entry point")
        raise ImportError_("no launch command found: no command in it runs pretrain_gpt.py or an inference entry "
                           "point" + kinds.fragment_hint(text))
    before, entry, after, env = command
    launcher = {"env": {**script.vars, **env}, "entry": Path(entry).name, "mode": kinds.entry_point(entry),
                "notes": script.notes}
    for i, w in enumerate(before):
        for key in ("nnodes", "nproc_per_node", "nproc-per-node"):
            if w.startswith(f"--{key}"):
                value = w.split("=", 1)[1] if "=" in w else (before[i + 1] if i + 1 < len(before) else "")
                launcher[key.replace("-", "_")] = value
    return after, launcher


def args_file_words(text: str) -> tuple[list[str], dict, str | None]:
    """Words of an args file, its `# not written: NAME=VALUE: why` notes and the recipe id in its header."""
    notes, rid = {}, None
    words: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^# not written: ([A-Za-z_][\w{}]*)=(.*?): ", s)
        if m:
            try:  # the bounded reader: a note nested 100000 levels was a RecursionError, 1e400 an infinity
                notes[m.group(1)] = parse_json(m.group(2))
            except Unreadable:
                pass
            continue
        m = re.match(r"^# Megatron-LM pretrain_gpt.py arguments for (\S+?):", s)
        if m:
            rid = m.group(1)
        if s and not s.startswith("#"):
            try:
                words += shlex.split(s, comments=True)
            except ValueError as exc:
                raise ImportError_(f"cannot split {s[:80]!r}: {exc}") from None
    return words, notes, rid


def functional_test_words(text: str) -> tuple[list[str], dict]:
    """The words Megatron-LM's functional-test runner (tests/functional_tests/shell_test_utils/_run_training.sh)
    makes of MODEL_ARGS: `true` is the bare flag; `[a b c]` is the words a, b, c; any other value is one word,
    spaces and parentheses included."""
    data = yaml.safe_load(text)
    words: list[str] = []
    for key, value in data["MODEL_ARGS"].items():
        flag = str(key) if str(key).startswith("-") else f"--{key}"
        if value is True:
            words.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        elif re.fullmatch(r"\[[^]]+\]", str(value).strip()):
            words += [flag, *str(value).strip()[1:-1].split()]
        else:
            words += [flag, str(value).strip()]
    env = data.get("ENV_VARS") if isinstance(data.get("ENV_VARS"), dict) else {}
    mode = "inference" if str(data.get("MODE", "")).lower() == "inference" else "training"
    return words, {"env": {str(k): str(v) for k, v in env.items()}, "mode": mode,
                   "entry": "MODE: inference" if mode == "inference" else "pretrain_gpt.py"}


# ----------------------------------------------------------------------- flags -> dests

def parse_flags(words: list[str]) -> tuple[dict, list]:
    """dest -> value (strings; True/False for switches; a list for nargs flags) and [(text, why)]
    for what Megatron-LM's parser does not know or refuses."""
    options = lm_parser()["options"]
    dests: dict = {}
    bad: list = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("--"):
            bad.append((w, "a word that is not a flag's value"))
            continue
        flag, eq, inline = w.partition("=")
        values = [inline] if eq else []
        if not eq:
            while i < len(words) and not (words[i].startswith("--") or re.match(r"^-[A-Za-z]", words[i])):
                values.append(words[i])
                i += 1
        entry = options.get(flag) or options.get(flag.replace("_", "-"))
        text = " ".join([flag, *values])
        if entry is None:
            bad.append((text, "not an argument of Megatron-LM " + lm_parser()["release"]))
            continue
        kind, dest = entry["kind"], entry["dest"]
        if kind in ("store_true", "store_false"):
            if values:
                bad.append((text, f"{flag} takes no value"))
                continue
            dests[dest] = kind == "store_true"
        elif kind == "value":
            if len(values) != 1:
                bad.append((text, f"{flag} takes one value"))
                if not values:
                    continue
            if entry.get("choices") and not _one_of(values[0], entry["choices"]):
                bad.append((text, f"not one of {', '.join(map(str, entry['choices']))}"))
                continue
            dests[dest] = values[0]
        else:
            if not values:
                bad.append((text, f"{flag} takes values"))
                continue
            dests[dest] = values
        dests.setdefault("__flags__", {})[dest] = text
    return dests, bad


def _one_of(word: str, choices: list) -> bool:
    """argparse converts a value with the flag's type before it checks the choices: `0` is one of
    `--timing-log-level`'s [0, 1, 2]."""
    for choice in choices:
        try:
            if (word if isinstance(choice, str) else type(choice)(word)) == choice:
                return True
        except ValueError:
            pass
    return False


# ----------------------------------------------------------------------- dests -> recipe and model


# ----------------------------------------------------------------------- values

def freq_value(text):
    """Megatron-LM's moe_freq_type: an int, or a Python list expression such as ([0]*3+[1]*58)."""
    if isinstance(text, int):
        return text
    s = str(text).strip()
    if re.fullmatch(r"\d+", s):
        return int(s)

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
            a, b = ev(node.left), ev(node.right)
            return a * b if isinstance(node.op, ast.Mult) else a + b
        raise ValueError(s)
    value = ev(ast.parse(s, mode="eval"))
    if not isinstance(value, (int, list)):
        raise ValueError(s)
    return value


def knob_value(k: K.Knob, raw):
    """A Megatron-LM string (or list) as the knob's value (ValueError when it is not one)."""
    if isinstance(raw, bool):
        return raw
    if raw is None or raw == "None":
        return None
    if k.field in ("window_size",):
        return [int(v) for v in str(raw).strip("()[]").split(",")]
    if k.field in ("window_attn_skip_freq", "linear_attention_freq"):
        return freq_value(raw)
    if k.kind == "set":
        return None if raw in ([], None) else list(raw if isinstance(raw, list) else [raw])
    if isinstance(raw, list):
        if len(raw) == 1:
            raw = raw[0]
        elif k.field == "data_paths":
            return raw
        else:
            raise ValueError(f"one value expected, got {len(raw)}")
    if k.field == "split":
        return split_value(raw)
    if k.kind in ("int", "opt_int"):
        f = float(raw)
        if not f.is_integer():
            raise ValueError(raw)
        return int(f)
    if k.kind == "float":
        return float(raw)
    if k.kind == "enum":
        value = k.plan_value(raw)
        if k.field not in K.OPEN_ENUMS and value not in k.domain:
            raise ValueError(f"not one of {', '.join(str(d) for d in k.domain)}")
        return value
    return raw


def split_value(raw) -> str:
    """--split as megatron-core reads it (datasets/blended_megatron_dataset_config.py parse_and_normalize_split:
    re.findall("[.0-9]+"), each a float, at most three, padded with 0): `"--split '99,1,0'"` kept in a bash array
    reaches Megatron-LM with its quotes (bash removes no quotes after expansion) and trains on 99,1,0."""
    numbers = re.findall(r"[.0-9]+", str(raw))
    try:
        [float(n) for n in numbers]
    except ValueError:
        raise ValueError(f"{raw!r}: megatron-core reads the numbers in it ({', '.join(numbers)}) as floats") from None
    if not 1 <= len(numbers) <= 3:
        raise ValueError(f"{raw!r}: megatron-core reads 1 to 3 numbers (train, valid, test weights) in it, "
                         f"found {len(numbers)}")
    return ",".join(numbers)


def read_source(name: str) -> tuple[str | None, str | None]:
    """(text, None) of a file, or of stdin for '-' (`moeforge import` and `lint-config` take either); (None, the
    one-line error) when it cannot be read."""
    try:
        return read_text(name, LIMITS["launch"]), None
    except Unreadable as exc:
        return None, f"{name}: error: {exc}"


# ----------------------------------------------------------------------- the platform it runs on

def platform_docs(root: Path) -> dict[str, dict]:
    """The platforms a recipe under ``root`` can name: the built-in catalogue's, then root/platforms (which win),
    as compose resolves a platform name."""
    out = {}
    for top in dict.fromkeys((BUILTIN_RECIPES, root)):
        for path in sorted((top / "platforms").glob("*.yaml")):
            try:
                data = load_file(path).data
            except CompileError:
                continue  # a platform that does not load is no platform to import onto (check says why)
            if isinstance(data, dict) and data.get("name"):
                out[data["name"]] = data
    return out


def _gpus(text: str) -> tuple[list[str], bool]:
    """The GPU products a text names, and whether it names an NVL72 domain."""
    upper = text.upper()
    nvl72 = bool(re.search(r"NVL72|USE_MNNVL=1|NVLINK_DOMAIN_SIZE=72", upper))
    found = []
    for product in ("GB300", "GB200", "B300", "B200", "H200", "H100", "A100"):
        if re.search(rf"(?<![A-Z0-9]){product}(?![0-9])", upper):
            found.append(product)
            upper = upper.replace(product, "")
    return found, nvl72


def _code_and_comments(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The text without its `#` comments (a `#` at a line's start or after a blank, as bash and args files read
    it), and the comments with their line numbers."""
    code, comments = [], []
    for number, line in enumerate(text.splitlines(), 1):
        m = re.search(r"(^|\s)#", line)
        if m and not line.lstrip().startswith("#!"):
            comments.append((number, line[m.end():]))
            line = line[:m.start()]
        code.append(line)
    return "\n".join(code), comments


def guess_platform(text: str, dests: dict, platforms: dict, per_node: str | None = None) -> tuple[str | None, str]:
    """The platform the launch names through GPU facts and flags, else (None, why not). ``per_node``: the
    launcher's --nproc_per_node, which tells CPU platforms apart (ranks per node)."""
    if dests.get("distributed_backend") == "gloo" or re.search(r"CUDA_VISIBLE_DEVICES=(\"\")?\s*$", text, re.M):
        cpu = [n for n, d in platforms.items() if d.get("device") == "cpu"]
        if len(cpu) > 1 and per_node and per_node.isdigit():
            cpu = [n for n in cpu if platforms[n].get("gpus_per_node") == int(per_node)] or cpu
        if len(cpu) == 1:
            return cpu[0], "--distributed-backend gloo: a CPU run" + (f" of {per_node} ranks per node" if per_node else "")
        if cpu:
            return None, f"a CPU run, and several CPU platforms fit ({', '.join(cpu)})"
    code, comments = _code_and_comments(text)
    where = "the launch names"
    found, nvl72 = _gpus(code)
    if not found:  # only a comment says it: a guess, said as one, with the line it came from
        found, said_nvl72 = _gpus("\n".join(c for _, c in comments))
        nvl72 = nvl72 or said_nvl72
        line = next((n for n, c in comments if _gpus(c)[0]), None)
        where = f"a comment on line {line} names"
    candidates = [n for n, d in platforms.items() if d.get("gpu") and K.gpu_product(d["gpu"].get("name")) in found
                  and (not nvl72 or int(d.get("nvlink_domain") or 0) >= 72)]
    if len(candidates) == 1:
        said = f"{where} {', '.join(found)}" + (" and an NVL72 domain" if nvl72 else "")
        if where != "the launch names":
            said += " (no command or variable does; pass --platform NAME if it is not this one)"
        return candidates[0], said
    if candidates:
        return None, f"several platforms fit ({', '.join(candidates)})"
    return None, "no GPU named in the launch" if not found else f"no platform has a {', '.join(found)}"
