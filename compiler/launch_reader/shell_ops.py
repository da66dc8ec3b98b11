"""Bash's operators on values for compiler/launch_reader/shell_eval.py: `$((...))` in C integer arithmetic, `[ ]` /
`[[ ]]` tests (the text operations themselves, pattern removal and substitution, `=~` and quote removal, are
shell_text.py's).

Why apart: these are bash's own rules, each small and pure (or reading values through the reader's lookup and
word expansion, the Operators mixin), so the expansion of words reads as words. The parser, the words being
built (Fields) and where a node is (Ctx) are here too, shared by both.
"""
from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass

from moeforge.compiler.launch_reader.shell_text import Unevaluated, regex_search

UNSET = object()     # a variable the script never set
# characters one variable, one array or one command's words may hold: a launch's come to kilobytes; a script that
# doubles an array forty times (A=("${A[@]}" "${A[@]}")) grew until the kernel killed the import at 22 GB
MAX_EXPANDED = 1 << 22
ARITH_NESTING = 32   # a variable's value read as arithmetic, naming another: bash stops at 1024 levels


@functools.lru_cache(maxsize=1)
def parser():
    """tree-sitter-bash's parser (imported here, lazily: a launch is read only by import and lint-config)."""
    import tree_sitter  # lazy: see the docstring
    import tree_sitter_bash  # lazy: as above

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


@dataclass
class Ctx:
    """The text a node belongs to, what to call it in a note, and its first line's number minus one."""
    src: bytes
    where: str
    line0: int

    def line(self, node) -> int:
        """The node's 1-based line in its file: a here-document run as a script counts from where it sits (line0)."""
        return self.line0 + node.start_point[0] + 1


class Fields:
    """Words being built: quoted text joins the current word, an unquoted expansion's value is split on blanks."""

    def __init__(self):
        self.words: list[str] = []
        self.cur: str | None = None
        self.unknown = False

    def lit(self, s: str) -> None:
        """Join text to the current word without splitting: quoted text and literals."""
        self.cur = (self.cur or "") + s

    def split(self, s: str) -> None:
        """Add an unquoted expansion's value split on blanks (an edge blank ends the word), as bash does."""
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
        """Close the current word; a word begun by quotes counts even when empty, as bash keeps ""."""
        if self.cur is not None:
            self.words.append(self.cur)
            self.cur = None

    def result(self) -> list[str]:
        """The finished words, the one being built included."""
        self.end()
        return self.words


def to_int(text) -> int | None:
    """An integer as Python reads a literal (0x10 too), None for anything else: indexes and shift counts."""
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        return None


class Operators:
    """Arithmetic and tests over the reader's words (mixed into shell_eval.Words)."""

    # ------------------------------------------------------------------ arithmetic

    def arithmetic(self, node, ctx) -> int | None:
        """A $((...)) value; None (kept as written, with a note) when it is not one expression or not known."""
        inner = [c for c in node.named_children]
        if len(inner) != 1:
            self.note_node(node, ctx, self.text(node, ctx), "not evaluated: kept as written")
            return None
        value = self.arith_node(inner[0], ctx)
        return value

    def arith_node(self, node, ctx) -> int | None:
        """One arithmetic node's integer value, None when any operand is unknown (an unset name is noted)."""
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
            b = Fields()
            self.expand(node, ctx, b, quoted=True)
            return None if b.unknown else self._arith_value("".join(b.result()), ctx)
        if t == "parenthesized_expression":
            inner = node.named_children
            return self.arith_node(inner[0], ctx) if len(inner) == 1 else None
        if t == "unary_expression":
            op, operand = node.children[0].type, node.named_children[-1]
            if op not in ("-", "+", "!", "~"):
                return None
            if operand.type == "binary_expression":
                # tree-sitter-bash reads `-3 - 1` as -(3 - 1); in bash (C) a unary operator binds tighter than any
                # binary one, so it applies to the leftmost operand
                return self._unary_leftmost(op, operand, ctx)
            v = self.arith_node(operand, ctx)
            return None if v is None else _unary_arith(op, v)
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

    def _unary_leftmost(self, op: str, node, ctx) -> int | None:
        if node.type != "binary_expression":
            v = self.arith_node(node, ctx)
            return None if v is None else _unary_arith(op, v)
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        operator = node.child_by_field_name("operator")
        a = self._unary_leftmost(op, left, ctx) if left is not None else None
        c = self.arith_node(right, ctx) if right is not None else None
        return None if a is None or c is None or operator is None else _binary(operator.type, a, c)

    def _arith_value(self, value, ctx) -> int | None:
        """A variable's value read as arithmetic, as bash reads it again as an expression (A=B, B=A nests forever:
        past ARITH_NESTING levels it is unknown, as bash stops with "expression recursion level exceeded")."""
        depth = getattr(self, "_arith_depth", 0)
        if depth > ARITH_NESTING:
            return None
        self._arith_depth = depth + 1
        try:
            return self._arith_value_of(value, ctx)
        finally:
            self._arith_depth = depth

    def _arith_value_of(self, value, ctx) -> int | None:
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

    # ------------------------------------------------------------------ tests

    def test(self, node, ctx) -> bool | None:
        """A [ ] or [[ ]] test's status; None when it is not one expression or its operands are unknown."""
        inner = [c for c in node.named_children]
        if len(inner) != 1:
            return None
        double = node.children[0].type == "[["
        return self.test_expr(inner[0], ctx, double)

    def test_expr(self, node, ctx, double: bool) -> bool | None:
        """One test expression's truth; `double` marks [[ ]], whose == is a pattern match; None when unknown."""
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
            try:
                return _binary_test(o, a, c, glob)
            except Unevaluated as exc:
                self.note_node(node, ctx, self.text(node, ctx)[:60], f"{exc}: not evaluated")
                return None
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
        try:
            return _binary_test(words[1], words[0], words[2], False)
        except Unevaluated:
            return None
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
        return regex_search(c, a)
    if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
        x, y = to_int(a), to_int(c)
        if x is None or y is None:
            return None
        return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
    if op in ("<", ">"):
        return a < c if op == "<" else a > c
    return None


def _binary(op: str, a: int, c: int) -> int | None:
    """C's operators on bash's 64-bit signed integers: every result wraps as bash's does, so no operand grows past
    64 bits (`$(( 9 ** 999999999 ))` took Python's unbounded integers until it hung); a shift counts modulo 64."""
    if op in ("/", "%") and c == 0:
        return None
    if op == "/":
        return _wrap(abs(a) // abs(c) * (1 if (a >= 0) == (c >= 0) else -1))  # C division: toward zero
    if op == "%":
        return _wrap(a - c * _binary("/", a, c))
    ops = {"+": lambda: a + c, "-": lambda: a - c, "*": lambda: a * c,
           "**": lambda: pow(a, c, 1 << 64) if c >= 0 else None,
           "<<": lambda: a << (c & 63), ">>": lambda: a >> (c & 63), "&": lambda: a & c, "|": lambda: a | c,
           "^": lambda: a ^ c, "<": lambda: int(a < c), "<=": lambda: int(a <= c), ">": lambda: int(a > c),
           ">=": lambda: int(a >= c), "==": lambda: int(a == c), "!=": lambda: int(a != c),
           "&&": lambda: int(bool(a and c)), "||": lambda: int(bool(a or c))}
    if op not in ops:
        return None
    value = ops[op]()
    return None if value is None else _wrap(value)


def _unary_arith(op: str, v: int) -> int:
    return _wrap({"-": -v, "+": v, "!": int(not v), "~": ~v}[op])


def _wrap(value: int) -> int:
    """An integer as bash's intmax_t holds it (two's complement, 64 bits)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def _arith_number(text: str) -> int | None:
    """A number as bash reads one in arithmetic (BASE#DIGITS, 0x.., 0.. octal, decimal), wrapped to 64 bits; one
    longer than any 64-bit number's digits is refused (None) before Python converts it."""
    text = text.strip()
    if len(text) > 80:
        return None
    m = re.fullmatch(r"(\d+)#([0-9A-Za-z@_]+)", text)
    if m:
        try:
            return _wrap(int(m.group(2), int(m.group(1))))
        except ValueError:
            return None
    if re.fullmatch(r"0[0-7]+", text):
        return _wrap(int(text, 8))
    try:
        return _wrap(int(text, 0))
    except ValueError:
        return None
