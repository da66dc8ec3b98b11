"""Bash words, arithmetic and tests evaluated on tree-sitter-bash's syntax tree, for compiler/launch_reader/shell.py.

Why apart from the statements: this is where bash's own rules live (quote removal, field splitting of unquoted
expansions only, `"${A[@]}"` as one word per element, `${X:-d}` and friends, `$((...))` in C integer
arithmetic, `[ ]` / `[[ ]]` operators), and where what cannot be known is marked so the statements can say so.
"""
from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

UNSET = object()     # a variable the script never set
SPECIAL_UNKNOWN = {"?", "$", "!", "-", "_", "RANDOM", "SECONDS", "LINENO"}
# how a variable the script never sets is read, as a note says it
UNSET_READINGS = {
    "default": "not set by the script, so the defaults it gives apply (the environment at launch may differ)",
    "kept": "not set by the script: kept as written, for the launch's environment to resolve",
    "empty": "not set by the script: read as empty where the script tests it",
    "arith": "not set by the script: arithmetic on it is kept as written",
    "argument": "the script is read as run without arguments",
}


@functools.lru_cache(maxsize=1)
def parser():
    """tree-sitter-bash's parser (imported here, lazily: a launch is read only by import and lint-config)."""
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


@dataclass
class Ctx:
    """The text a node belongs to, what to call it in a note, and its first line's number minus one."""
    src: bytes
    where: str
    line0: int

    def line(self, node) -> int:
        return self.line0 + node.start_point[0] + 1


class _Fields:
    """Words being built: quoted text joins the current word, an unquoted expansion's value is split on blanks."""

    def __init__(self):
        self.words: list[str] = []
        self.cur: str | None = None
        self.unknown = False

    def lit(self, s: str) -> None:
        self.cur = (self.cur or "") + s

    def split(self, s: str) -> None:
        if not s:
            return
        parts = s.split()
        if s[0].isspace():
            self.end()
        for i, p in enumerate(parts):
            if i:
                self.end()
            self.lit(p)
        if s[-1].isspace():
            self.end()

    def end(self) -> None:
        if self.cur is not None:
            self.words.append(self.cur)
            self.cur = None

    def result(self) -> list[str]:
        self.end()
        return self.words


def to_int(text) -> int | None:
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        return None


class Words:
    """Expansion of words; the statements' reader (shell.py) subclasses it and supplies `state`, `positional`,
    `path` and `name`."""

    def __init__(self):
        self.reported: dict = {}

    # ------------------------------------------------------------------ notes

    def text(self, node, ctx) -> str:
        return ctx.src[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def note(self, line: int, where: str, what: str) -> None:
        self.state.notes.append(f"{where}:{line}: {what}")

    def note_node(self, node, ctx, construct: str, what: str) -> None:
        construct = " ".join(construct.split())
        self.note(ctx.line(node), ctx.where, f"{construct}: {what}")

    def _unset(self, name: str, node, ctx, how: str, detail: str | None = None) -> None:
        """A variable the script never set, used (first use per variable and reading, gathered by unset_notes)."""
        if name.isdigit() or name in ("@", "*"):
            how = "argument"
        self.reported.setdefault((ctx.where, how), {}).setdefault(name, (ctx.line(node), detail))

    def unset_notes(self) -> list[str]:
        out = []
        for (where, how), uses in self.reported.items():
            items = ", ".join(f"{n}={d if d else chr(34) * 2} (line {line})" if how == "default"
                              else f"${{{n}}} (line {line})" for n, (line, d) in uses.items())
            out.append(f"{where}: {UNSET_READINGS[how]}: {items}")
        return out

    # ------------------------------------------------------------------ words

    def words_of(self, nodes, ctx, keep_unknown: bool = True) -> list[str] | None:
        """The words of argument nodes after expansion and splitting; None when a part cannot be known and
        keep_unknown is False."""
        out: list[str] = []
        for node in nodes:
            if node.type == "comment":
                continue
            b = _Fields()
            self.expand(node, ctx, b, quoted=False)
            if b.unknown and not keep_unknown:
                return None
            out += b.result()
        return out

    def word(self, node, ctx) -> str | None:
        """One word's value as a test or a pattern reads it (no splitting; unset is empty); None: unknown."""
        if node is None:
            return None
        b = _Fields()
        self.expand(node, ctx, b, quoted=True, unset_empty=True)
        return None if b.unknown else "".join(b.result())

    def scalar(self, node, ctx) -> str:
        """An assignment's value: no splitting; what cannot be known kept as written."""
        b = _Fields()
        self.expand(node, ctx, b, quoted=True)
        return " ".join(b.result()) if node.type != "array" else ""

    def expand(self, node, ctx, b: _Fields, quoted: bool, unset_empty: bool = False) -> None:
        t = node.type
        if t == "word" or (not node.is_named and t not in ('"',)):
            b.lit(_unescape_word(self.text(node, ctx)))
        elif t in ("number", "extglob_pattern", "regex", "test_operator", "brace_expression", "variable_name",
                   "special_variable_name", "file_descriptor"):
            b.lit(self.text(node, ctx))
        elif t == "raw_string":
            b.lit(self.text(node, ctx)[1:-1])
        elif t == "ansi_c_string":
            b.lit(_ansi_c(self.text(node, ctx)[2:-1]))
        elif t in ("string", "translated_string"):
            self.string(node, ctx, b, unset_empty)
        elif t == "string_content":
            b.lit(_unescape_dq(self.text(node, ctx)))
        elif t in ("concatenation", "command_name"):
            for child in node.children:
                self.expand(child, ctx, b, quoted, unset_empty)
        elif t in ("simple_expansion", "expansion"):
            self.parameter(node, ctx, b, quoted, unset_empty)
        elif t == "arithmetic_expansion":
            value = self.arithmetic(node, ctx)
            if value is None:
                b.unknown = True
                b.lit(self.text(node, ctx))
            else:
                b.lit(str(value))
        elif t == "command_substitution":
            value = self.substitution(node, ctx)
            if value is None:
                b.unknown = True
                self.note_node(node, ctx, self.text(node, ctx)[:60], "a command substitution is not run: kept as "
                               "written")
                b.lit(self.text(node, ctx))
            elif quoted:
                b.lit(value)
            else:
                b.split(value)
        else:
            b.unknown = True
            self.note_node(node, ctx, self.text(node, ctx)[:60], f"a {t.replace('_', ' ')} is not evaluated: kept "
                           "as written")
            b.lit(self.text(node, ctx))

    def string(self, node, ctx, b: _Fields, unset_empty: bool) -> None:
        """"...": its parts without splitting; the gaps between parts are literal text."""
        inner = [c for c in node.children if c.type not in ('"', '$"')]
        only_splat = len(inner) == 1 and self._is_splat(inner[0], ctx)
        if not only_splat:
            b.lit("")
        pos = node.children[0].end_byte if node.children else node.start_byte
        for child in inner:
            if child.start_byte > pos:
                b.lit(_unescape_dq(ctx.src[pos:child.start_byte].decode("utf-8", "replace")))
            text = self.text(child, ctx)
            if text[:1].isspace():  # tree-sitter-bash puts the blanks before `$` into the `$` token
                b.lit(text[:len(text) - len(text.lstrip())])
            self.expand(child, ctx, b, quoted=True, unset_empty=unset_empty)
            pos = child.end_byte
        end = node.children[-1].start_byte if node.children and node.children[-1].type == '"' else node.end_byte
        if end > pos:
            b.lit(_unescape_dq(ctx.src[pos:end].decode("utf-8", "replace")))

    def heredoc_text(self, node, ctx) -> str:
        """An unquoted here-document's text: expansions done, a backslash escaping only $ ` \\ and newline."""
        b, pos = _Fields(), node.start_byte
        b.lit("")
        for child in node.named_children:
            if child.start_byte > pos:
                b.lit(_unescape_heredoc(ctx.src[pos:child.start_byte].decode("utf-8", "replace")))
            if child.type == "heredoc_content":
                b.lit(_unescape_heredoc(self.text(child, ctx)))
            else:
                self.expand(child, ctx, b, quoted=True)
            pos = child.end_byte
        if node.end_byte > pos:
            b.lit(_unescape_heredoc(ctx.src[pos:node.end_byte].decode("utf-8", "replace")))
        return "".join(b.result())

    def _is_splat(self, node, ctx) -> bool:
        return node.type in ("expansion", "simple_expansion") and re.fullmatch(
            r"\$\{?(@|[A-Za-z_]\w*\[@\])\}?", self.text(node, ctx)) is not None

    # ------------------------------------------------------------------ parameters

    def lookup(self, name: str, index: str | None = None):
        """A parameter's value: a string, a list (`@`, `A[@]`), UNSET, or None when it cannot be known."""
        st = self.state
        if name.isdigit():
            n = int(name)
            if n == 0:
                return str(self.path) if self.path else self.name
            return self.positional[n - 1] if n <= len(self.positional) else UNSET
        if name in ("@", "*"):
            return list(self.positional)
        if name == "#":
            return str(len(self.positional))
        if name in SPECIAL_UNKNOWN:
            return None
        if name == "BASH_SOURCE" and index in (None, "0"):
            return str(self.path) if self.path else self.name
        if name in st.arrays:
            arr = st.arrays[name]
            if index in ("@", "*"):
                return list(arr)
            i = to_int(index) if index is not None else 0
            if i is None:
                return None
            return arr[i] if -len(arr) <= i < len(arr) else UNSET
        if name in st.vars:
            if index in ("@", "*"):
                return [st.vars[name]]
            return st.vars[name] if index in (None, "0") else UNSET
        return UNSET

    def parameter(self, node, ctx, b: _Fields, quoted: bool, unset_empty: bool) -> None:
        raw = self.text(node, ctx).strip()
        children = [c for c in node.children if c.type not in ("${", "}", "$")]
        prefix = None
        if children and not children[0].is_named and children[0].type in ("#", "!"):
            prefix = children.pop(0).type
        if not children:
            b.lit(raw)
            return
        target, rest = children[0], children[1:]
        index = None
        if target.type == "subscript":
            index = self.word(target.child_by_field_name("index"), ctx)
            name = self.text(target.child_by_field_name("name"), ctx)
        else:
            name = self.text(target, ctx)
        value = self.lookup(name, index)
        if prefix == "#":
            if value is None:
                value = None
            elif isinstance(value, list):
                value = str(len(value))
            else:
                value = str(len("" if value is UNSET else value))
        elif prefix == "!":
            self.note_node(node, ctx, raw, "indirect expansion is not evaluated: kept as written")
            value = None
        elif rest:
            value = self.operator(node, ctx, name, value, rest, raw)
        if value is None:
            b.unknown = True
            b.lit(raw)
            return
        if value is UNSET:
            if unset_empty:
                self._unset(name, node, ctx, "empty")
                return
            self._unset(name, node, ctx, "kept")
            b.unknown = True
            b.lit("${" + name + "}")
            return
        if isinstance(value, list):
            if quoted and (index == "*" or name == "*"):
                b.lit(" ".join(value))
            elif quoted:
                for i, v in enumerate(value):
                    if i:
                        b.end()
                    b.lit(v)
            else:
                for v in value:
                    b.split(v + " ")
            return
        if quoted:
            b.lit(value)
        else:
            b.split(value)

    def operator(self, node, ctx, name: str, value, rest, raw: str):
        """${X<op>...}: defaults, alternatives, errors, substrings, pattern removal and substitution."""
        op = rest[0].type
        operands = rest[1:]

        def operand(nodes=None):
            b = _Fields()
            for n in (operands if nodes is None else nodes):
                self.expand(n, ctx, b, quoted=True)
            return None if b.unknown else "".join(b.result())
        if isinstance(value, list) and op not in (":-", "-", ":+", "+"):
            value = " ".join(value)
        empty = value is UNSET or (op.startswith(":") and value == "")
        if op in (":-", "-", ":=", "=", ":?", "?"):
            if value is None:
                return None
            if not empty:
                return value
            if op.endswith("?"):
                self.note_node(node, ctx, raw, "the script stops here unless it is set: kept as written")
                return None
            default = operand()
            self._unset(name, node, ctx, "default", default)
            if op.endswith("=") and default is not None:
                self.state.vars[name] = default
            return default
        if op in (":+", "+"):
            if value is None:
                return None
            return "" if empty else operand()
        if value is None:
            return None
        if value is UNSET:
            value = ""
        if op in ("#", "##", "%", "%%"):
            pattern = operand()
            return None if pattern is None else _remove(value, pattern, op)
        if op in ("/", "//", "/#", "/%"):
            slash = [i for i, n in enumerate(operands) if not n.is_named and n.type == "/"]
            pattern = operand(operands[:slash[0]] if slash else operands)
            repl = operand(operands[slash[0] + 1:]) if slash else ""
            if pattern is None or repl is None:
                return None
            return _substitute(value, pattern, repl, op)
        if op == ":":
            numbers = [n for n in operands if n.is_named]
            parts = [self.arith_node(n, ctx) for n in numbers]
            if None in parts or not parts:
                return None
            start = parts[0] if parts[0] >= 0 else max(0, len(value) + parts[0])
            return value[start:start + parts[1]] if len(parts) > 1 else value[start:]
        if op in ("^^", ",,", "^", ","):
            return value.upper() if op.startswith("^") else value.lower()
        self.note_node(node, ctx, raw, "this parameter expansion is not evaluated: kept as written")
        return None

    # ------------------------------------------------------------------ arithmetic

    def arithmetic(self, node, ctx) -> int | None:
        inner = [c for c in node.named_children]
        if len(inner) != 1:
            self.note_node(node, ctx, self.text(node, ctx), "not evaluated: kept as written")
            return None
        value = self.arith_node(inner[0], ctx)
        return value

    def arith_node(self, node, ctx) -> int | None:
        t = node.type
        if t == "number":
            return _arith_number(self.text(node, ctx))
        if t == "variable_name":
            value = self.lookup(self.text(node, ctx))
            if value is UNSET:
                self._unset(self.text(node, ctx), node, ctx, "arith")
                return None
            return self._arith_value(value, ctx)
        if t in ("simple_expansion", "expansion", "string", "concatenation", "word", "arithmetic_expansion"):
            b = _Fields()
            self.expand(node, ctx, b, quoted=True)
            return None if b.unknown else self._arith_value("".join(b.result()), ctx)
        if t == "parenthesized_expression":
            inner = node.named_children
            return self.arith_node(inner[0], ctx) if len(inner) == 1 else None
        if t == "unary_expression":
            op, operand = node.children[0].type, node.named_children[-1]
            v = self.arith_node(operand, ctx)
            if v is None:
                return None
            return {"-": -v, "+": v, "!": int(not v), "~": ~v}.get(op)
        if t == "binary_expression":
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            op = node.child_by_field_name("operator")
            a, c = self.arith_node(left, ctx), self.arith_node(right, ctx)
            if a is None or c is None or op is None:
                return None
            return _binary(op.type, a, c)
        if t == "ternary_expression":
            cond, *branches = node.named_children
            v = self.arith_node(cond, ctx)
            return None if v is None or len(branches) != 2 else self.arith_node(branches[0 if v else 1], ctx)
        return None

    def _arith_value(self, value, ctx) -> int | None:
        if value is None or isinstance(value, list):
            return None
        text = str(value).strip()
        if text == "":
            return 0
        if re.fullmatch(r"[A-Za-z_]\w*", text):  # bash evaluates a variable's value as an expression again
            return self._arith_value(self.lookup(text), ctx) if self.lookup(text) is not UNSET else None
        number = _arith_number(text)
        if number is not None:
            return number
        sub = parser().parse(f"$(( {text} ))".encode())
        node = sub.root_node
        while node.named_children and node.type != "arithmetic_expansion":
            node = node.named_children[0]
        if node.type != "arithmetic_expansion" or len(node.named_children) != 1:
            return None
        return self.arith_node(node.named_children[0], Ctx(f"$(( {text} ))".encode(), ctx.where, ctx.line0))

    # ------------------------------------------------------------------ command substitution

    def substitution(self, node, ctx) -> str | None:
        """$(...) of the path helpers a script uses to find its own directory (dirname, basename, cd X && pwd,
        realpath); anything else is not run (None)."""
        body = node.named_children
        if len(body) != 1:
            return None
        cmd = body[0]
        if cmd.type == "list" and len(cmd.named_children) == 2 and cmd.children[1].type == "&&":
            first, second = cmd.named_children
            if self._words(second, ctx) == ["pwd"] and (w := self._words(first, ctx)) and w[0] == "cd" and len(w) == 2:
                return w[1]
            return None
        words = self._words(cmd, ctx)
        if not words or len(words) < 2:
            return None
        head, args = words[0], [a for a in words[1:] if not a.startswith("-")]
        if head == "dirname" and len(args) == 1:
            return str(PurePosixPath(args[0]).parent)
        if head == "basename" and args:
            base = PurePosixPath(args[0]).name
            return base[:-len(args[1])] if len(args) > 1 and base.endswith(args[1]) else base
        if head in ("realpath", "readlink") and len(args) == 1 and words[1:] != args[:1]:
            return args[0]
        if head == "echo" and all(not w.startswith("-") for w in words[1:]):
            return " ".join(words[1:])
        return None

    def _words(self, cmd, ctx) -> list[str] | None:
        if cmd.type != "command":
            return None
        parts = [c for i, c in enumerate(cmd.children) if cmd.field_name_for_child(i) in ("name", "argument")]
        return self.words_of(parts, ctx, keep_unknown=False)

    # ------------------------------------------------------------------ tests

    def test(self, node, ctx) -> bool | None:
        inner = [c for c in node.named_children]
        if len(inner) != 1:
            return None
        double = node.children[0].type == "[["
        return self.test_expr(inner[0], ctx, double)

    def test_expr(self, node, ctx, double: bool) -> bool | None:
        t = node.type
        if t == "parenthesized_expression":
            return self.test_expr(node.named_children[0], ctx, double) if node.named_children else None
        if t == "unary_expression":
            op = node.children[0]
            operand = node.named_children[-1]
            if op.type == "!":
                v = self.test_expr(operand, ctx, double)
                return None if v is None else not v
            word = self.word(operand, ctx)
            return _unary(self.text(op, ctx), word, self)
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if op is None or left is None or right is None:
                return None
            o = self.text(op, ctx)
            if o in ("&&", "||", "-a", "-o"):
                a = self.test_expr(left, ctx, double)
                if a is not None and (a is False) == (o in ("&&", "-a")):
                    return a
                c = self.test_expr(right, ctx, double)
                return c if a is not None else (c if c == (o in ("||", "-o")) else None)
            a, c = self.word(left, ctx), self.word(right, ctx)
            glob = double and right.type in ("extglob_pattern", "word", "concatenation") and o in ("==", "!=", "=")
            return _binary_test(o, a, c, glob)
        word = self.word(node, ctx)
        return None if word is None else word != ""


def test_words(words: list[str]) -> bool | None:
    """`test ARGS` / `[ ARGS ]` given as words (POSIX's rules by argument count)."""
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 2:
        if words[0] == "!":
            return words[1] == ""
        return _unary(words[0], words[1], None)
    if len(words) == 3:
        if words[0] == "!":
            v = test_words(words[1:])
            return None if v is None else not v
        return _binary_test(words[1], words[0], words[2], False)
    return None


def _unary(op: str, word: str | None, reader) -> bool | None:
    if op == "-z":
        return None if word is None else word == ""
    if op == "-n":
        return None if word is None else word != ""
    if op == "-v" and reader is not None and word is not None:
        return word in reader.state.vars or word in reader.state.arrays
    return None  # -f, -d, -e, ...: the file system of the machine that runs it


def _binary_test(op: str, a: str | None, c: str | None, glob: bool) -> bool | None:
    if a is None or c is None:
        return None
    if op in ("=", "=="):
        return fnmatch.fnmatchcase(a, c) if glob else a == c
    if op == "!=":
        return not fnmatch.fnmatchcase(a, c) if glob else a != c
    if op == "=~":
        try:
            return re.search(c, a) is not None
        except re.error:
            return None
    if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
        x, y = to_int(a), to_int(c)
        if x is None or y is None:
            return None
        return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
    if op in ("<", ">"):
        return a < c if op == "<" else a > c
    return None


def _binary(op: str, a: int, c: int) -> int | None:
    if op in ("/", "%") and c == 0:
        return None
    if op == "/":
        return abs(a) // abs(c) * (1 if (a >= 0) == (c >= 0) else -1)  # C division: toward zero
    if op == "%":
        return a - c * _binary("/", a, c)
    ops = {"+": lambda: a + c, "-": lambda: a - c, "*": lambda: a * c, "**": lambda: a ** c if c >= 0 else None,
           "<<": lambda: a << c, ">>": lambda: a >> c, "&": lambda: a & c, "|": lambda: a | c, "^": lambda: a ^ c,
           "<": lambda: int(a < c), "<=": lambda: int(a <= c), ">": lambda: int(a > c), ">=": lambda: int(a >= c),
           "==": lambda: int(a == c), "!=": lambda: int(a != c), "&&": lambda: int(bool(a and c)),
           "||": lambda: int(bool(a or c))}
    return ops[op]() if op in ops else None


def _arith_number(text: str) -> int | None:
    text = text.strip()
    m = re.fullmatch(r"(\d+)#([0-9A-Za-z@_]+)", text)
    if m:
        try:
            return int(m.group(2), int(m.group(1)))
        except ValueError:
            return None
    if re.fullmatch(r"0[0-7]+", text):
        return int(text, 8)
    try:
        return int(text, 0)
    except ValueError:
        return None


def _remove(value: str, pattern: str, op: str) -> str:
    """${X#p} ${X##p} ${X%p} ${X%%p}: the shortest / longest prefix / suffix matching the glob removed."""
    n = len(value)
    if op.startswith("#"):
        cuts = range(n + 1) if op == "#" else range(n, -1, -1)
        for i in cuts:
            if fnmatch.fnmatchcase(value[:i], pattern):
                return value[i:]
    else:
        cuts = range(n, -1, -1) if op == "%" else range(n + 1)
        for i in cuts:
            if fnmatch.fnmatchcase(value[i:], pattern):
                return value[:i]
    return value


def _substitute(value: str, pattern: str, repl: str, op: str) -> str:
    """${X/p/r} (first), ${X//p/r} (all), ${X/#p/r} (prefix), ${X/%p/r} (suffix); the longest match of the glob."""
    n = len(value)
    if op == "/#":
        for i in range(n, -1, -1):
            if fnmatch.fnmatchcase(value[:i], pattern):
                return repl + value[i:]
        return value
    if op == "/%":
        for i in range(n + 1):
            if fnmatch.fnmatchcase(value[i:], pattern):
                return value[:i] + repl
        return value
    out, i, done = [], 0, False
    while i <= n:
        hit = None if done else next((j for j in range(n, i, -1) if fnmatch.fnmatchcase(value[i:j], pattern)), None)
        if hit is not None:
            out.append(repl)
            i = hit
            done = op == "/"
            continue
        if i < n:
            out.append(value[i])
        i += 1
    return "".join(out)


def _unescape_word(text: str) -> str:
    """An unquoted word without its backslashes (`\\x` is x; a backslash-newline joins lines)."""
    return re.sub(r"\\(\r?\n|.)", lambda m: "" if m.group(1).strip("\r\n") == "" and "\n" in m.group(1)
                  else m.group(1), text, flags=re.S)


def _unescape_dq(text: str) -> str:
    """Double-quoted text: a backslash escapes only $ ` " \\ and a newline (which it removes)."""
    return re.sub(r"\\(\r?\n|[$`\"\\])", lambda m: "" if "\n" in m.group(1) else m.group(1), text)


def _unescape_heredoc(text: str) -> str:
    return re.sub(r"\\(\r?\n|[$`\\])", lambda m: "" if "\n" in m.group(1) else m.group(1), text)


def _ansi_c(text: str) -> str:
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return text
