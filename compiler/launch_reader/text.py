"""Reading a Megatron launch as text: which kind it is, its words, its flags as argument dests, and
a flag's value as a knob's value.

Why its own module: `moeforge import` and `moeforge lint-config` both read launch scripts, args
files, functional-test MODEL_ARGS and Bridge override lists, and both need the same words and the
same verdict on each flag (Megatron-LM 0.19.2's parser, kept as data in
compiler/data/megatron_lm_args.json).  The script is never executed: a small expander substitutes
the variables and arrays the script itself assigns; any other `${VAR}` is kept literally.
"""
from __future__ import annotations

import ast
import json
import re
import shlex
import sys
from pathlib import Path

import yaml

from compiler.knobs import table as K
from compiler.targets.megatron_args import lm_parser
from compiler.resources import BUILTIN_RECIPES


class ImportError_(Exception):
    """The input cannot be imported (exit 2)."""

# ----------------------------------------------------------------------- reading the source

_ASSIGN = re.compile(r"^(?:export\s+|declare\s+-a\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(\[@\]|\[\*\])?(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_BRIDGE_LINE = re.compile(r"^\+{0,2}[A-Za-z_][\w]*(\.[\w]+)+=")
LAUNCHERS = ("pretrain_gpt.py", "pretrain_mamba.py", "pretrain_hybrid.py")


def detect(text: str, name: str = "") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if name.endswith((".yaml", ".yml")) or (lines and lines[0].startswith("MODEL_ARGS")):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("MODEL_ARGS"), dict):
            return "functional-test"
    if lines and all(_BRIDGE_LINE.match(ln) or re.match(r"^[A-Za-z_]\w*=null$", ln) for ln in lines):
        return "bridge"
    if lines and all(ln.startswith("--") or ln.startswith("'") for ln in lines):
        return "args"
    return "launch"


def _logical_lines(text: str) -> list[str]:
    """Statements: continuations joined, a multi-line array assignment `A=( ... )` kept together."""
    joined = _join_continuations(text)
    out, pending, depth = [], "", 0
    for line in joined.splitlines():
        stripped = _strip_comment(line)
        if not stripped.strip() and not pending:
            continue
        pending = f"{pending} {stripped}" if pending else stripped
        depth += _parens(stripped)
        if depth <= 0:
            out.append(pending.strip())
            pending, depth = "", 0
    if pending.strip():
        out.append(pending.strip())
    return out


def _join_continuations(text: str) -> str:
    """The text with comments removed and backslash-newlines joined, as bash reads it: a `#` at a word start
    outside quotes comments out the rest of its line (a trailing backslash there continues nothing), a
    backslash-newline outside quotes or inside double quotes joins two lines, and single quotes keep both."""
    out, quote, i, n = [], None, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and quote != "'" and i + 1 < n and text[i + 1] in "\r\n":
            i += 3 if text[i + 1:i + 3] == "\r\n" else 2
            out.append(" ")
            continue
        if c == "\\" and quote != "'":
            out.append(text[i:i + 2])
            i += 2
            continue
        if quote is None and c == "#" and (i == 0 or text[i - 1].isspace()):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "'\"" and quote in (None, c):
            quote = None if quote == c else c
        out.append(c)
        i += 1
    return "".join(out)


def _strip_comment(line: str) -> str:
    """The line without a `#` comment (outside quotes, at a word start)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _parens(line: str) -> int:
    """Open minus closed array parentheses outside quotes (`A=(` opens; `$(`...`)` balances itself)."""
    n, quote = 0, None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            n += 1
        elif ch == ")":
            n -= 1
    return n


def _unquoted_braces(statement: str) -> str:
    """An unquoted `${NAME}` word as `$NAME`, which Shell.words splits as bash does (Megatron-LM's examples keep
    their flags in a string, MODEL_ARGS="--a 1 --b 2", and pass ${MODEL_ARGS}); a quoted one stays one word."""
    out, quote, i = [], None, 0
    while i < len(statement):
        c = statement[i]
        if quote is None and c == "\\":
            out.append(statement[i:i + 2])
            i += 2
            continue
        if c in "'\"" and quote in (None, c):
            quote = None if quote == c else c
        m = re.match(r"\$\{([A-Za-z_]\w*)\}(?=\s|;|$)", statement[i:]) if quote is None else None
        if m and (i == 0 or statement[i - 1].isspace()):
            out.append("$" + m.group(1))
            i += m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


class Shell:
    """Variables and arrays a script assigns, and expansion of words with them (no execution)."""

    def __init__(self):
        self.vars: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}

    def words(self, statement: str) -> list[str]:
        try:
            raw = shlex.split(_unquoted_braces(statement), comments=False, posix=True)
        except ValueError as exc:
            raise ImportError_(f"cannot split shell words ({exc}): {statement[:80]}") from None
        out: list[str] = []
        for w in raw:
            m = re.fullmatch(r"\$\{([A-Za-z_]\w*)\[[@*]\]\}|\$([A-Za-z_]\w*)", w)
            name = m and (m.group(1) or m.group(2))
            if name and name in self.arrays:
                out += self.arrays[name]
            elif name and name in self.vars and m.group(2):
                out += self.vars[name].split()  # unquoted $VAR: word splitting
            else:
                out.append(self.expand(w))
        return out

    def expand(self, word: str) -> str:
        def sub(m):
            name, arr, default = m.group(1) or m.group(4), m.group(2), m.group(3)
            if arr and name in self.arrays:
                return " ".join(self.arrays[name])
            if name in self.vars:
                return self.vars[name]
            if default is not None:
                return self.expand(default)
            return "${" + name + "}"  # not assigned here: kept, resolved at launch
        return _VAR.sub(sub, word)

    def run(self, statement: str) -> list[str] | None:
        """Record an assignment (None), or return the words of a command."""
        m = _ASSIGN.match(statement)
        if m and " " not in statement.split("=", 1)[0].replace("export ", "").replace("declare -a ", "").strip():
            name, plus, rest = m.group(1), m.group(2), m.group(3).strip()
            if rest.startswith("(") and rest.endswith(")"):
                values = self.words(rest[1:-1])
                self.arrays[name] = (self.arrays.get(name, []) if plus else []) + values
            else:
                words = self.words(rest) if rest else [""]
                value = words[0] if words else ""
                self.vars[name] = (self.vars.get(name, "") if plus else "") + value
            return None
        if statement.startswith("export "):  # export A=1 B=2
            for part in self.words(statement[7:]):
                if "=" in part:
                    k, v = part.split("=", 1)
                    self.vars[k] = v
            return None
        return self.words(statement)


def launch_words(text: str) -> tuple[list[str], dict]:
    """(the words after pretrain_gpt.py, the launcher's own settings: nnodes, nproc_per_node, env)."""
    sh = Shell()
    command = None
    for stmt in _logical_lines(text):
        words = sh.run(stmt)
        if not words:
            continue
        hit = next((i for i, w in enumerate(words) if w.endswith(LAUNCHERS)), None)
        if hit is not None:
            command = (words[:hit], words[hit + 1:])
    if command is None:
        raise ImportError_("no pretrain_gpt.py command found (a launch script, a command line, an args file, "
                           "a functional-test model_config.yaml or a Bridge override list)")
    before, after = command
    launcher = {"env": dict(sh.vars)}
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
            try:
                notes[m.group(1)] = json.loads(m.group(2))
            except json.JSONDecodeError:
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
    return words, {"env": {str(k): str(v) for k, v in env.items()}}


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


def read_source(name: str) -> tuple[str | None, str | None]:
    """(text, None) of a file, or of stdin for '-' (`moeforge import` and `lint-config` take either); (None, the
    one-line error) when it cannot be read."""
    try:
        return (sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")), None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{name}: error: cannot read: {' '.join(str(exc).split())}"


# ----------------------------------------------------------------------- the platform it runs on

def platform_docs(root: Path) -> dict[str, dict]:
    """The platforms a recipe under ``root`` can name: the built-in catalogue's, then root/platforms (which win),
    as compose resolves a platform name."""
    out = {}
    for top in dict.fromkeys((BUILTIN_RECIPES, root)):
        for path in sorted((top / "platforms").glob("*.yaml")):
            data = yaml.safe_load(path.read_text())
            if isinstance(data, dict) and data.get("name"):
                out[data["name"]] = data
    return out


def guess_platform(text: str, dests: dict, platforms: dict) -> tuple[str | None, str]:
    """The platform the launch names through GPU facts and flags, else (None, why not)."""
    if dests.get("distributed_backend") == "gloo" or re.search(r"CUDA_VISIBLE_DEVICES=(\"\")?\s*$", text, re.M):
        cpu = [n for n, d in platforms.items() if d.get("device") == "cpu"]
        if len(cpu) == 1:
            return cpu[0], "--distributed-backend gloo: a CPU run"
    upper = text.upper()
    nvl72 = bool(re.search(r"NVL72|USE_MNNVL=1|NVLINK_DOMAIN_SIZE=72", upper))
    found = []
    for product in ("GB300", "GB200", "B300", "B200", "H200", "H100", "A100"):
        if re.search(rf"(?<![A-Z0-9]){product}(?![0-9])", upper):
            found.append(product)
            upper = upper.replace(product, "")
    candidates = [n for n, d in platforms.items() if d.get("gpu") and K.gpu_product(d["gpu"].get("name")) in found
                  and (not nvl72 or int(d.get("nvlink_domain") or 0) >= 72)]
    if len(candidates) == 1:
        return candidates[0], f"the launch names {', '.join(found)}" + (" and an NVL72 domain" if nvl72 else "")
    if candidates:
        return None, f"several platforms fit ({', '.join(candidates)})"
    return None, "no GPU named in the launch" if not found else f"no platform has a {', '.join(found)}"
