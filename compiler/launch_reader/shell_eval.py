"""Bash words evaluated on tree-sitter-bash's syntax tree, for compiler/launch_reader/shell.py.

Why apart from the statements: this is where bash's rules for words live (quote removal, field splitting of
unquoted expansions only, `"${A[@]}"` as one word per element, `${X:-d}` and friends; arithmetic and tests are
shell_ops.py), and where what cannot be known is marked so the statements can say so.
"""
from __future__ import annotations

import re
from pathlib import PurePosixPath

from moeforge.compiler.launch_reader.shell_ops import (MAX_EXPANDED, UNSET, Ctx, Fields, Operators, parser, test_words,
                                                       to_int)
from moeforge.compiler.launch_reader.shell_text import (Unevaluated, ansi_c, remove_pattern, substitute_pattern,
                                                        unescape_dq, unescape_heredoc, unescape_word)

__all__ = ["Ctx", "Words", "parser", "test_words", "to_int"]  # what shell.py reads here

SPECIAL_UNKNOWN = {"?", "$", "!", "-", "_", "RANDOM", "SECONDS", "LINENO"}
# how a variable the script never sets is read, as a note says it
UNSET_READINGS = {
    "default": "not set by the script, so the defaults it gives apply (the environment at launch may differ)",
    "kept": "not set by the script: kept as written, for the launch's environment to resolve",
    "empty": "not set by the script: read as empty where the script tests it",
    "arith": "not set by the script: arithmetic on it is kept as written",
    "argument": "the script is read as run without arguments",
}


class Words(Operators):
    """Expansion of words; the statements' reader (shell.py) subclasses it and supplies `state`, `positional`,
    `path` and `name`."""

    max_expanded = MAX_EXPANDED

    def __init__(self):
        self.reported: dict = {}

    # ------------------------------------------------------------------ notes

    def text(self, node, ctx) -> str:
        """A node's source text, decoded leniently: a stray byte must not stop reading a launch."""
        return ctx.src[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def note(self, line: int, where: str, what: str) -> None:
        """Record what could not be known, as "file:line: what", for import's report."""
        self.state.notes.append(f"{where}:{line}: {what}")

    def note_node(self, node, ctx, construct: str, what: str) -> None:
        """A note at the node's line naming the construct (whitespace collapsed, so it stays one line)."""
        construct = " ".join(construct.split())
        self.note(ctx.line(node), ctx.where, f"{construct}: {what}")

    def _unset(self, name: str, node, ctx, how: str, detail: str | None = None) -> None:
        """A variable the script never set, used (first use per variable and reading, gathered by unset_notes)."""
        if name.isdigit() or name in ("@", "*"):
            how = "argument"
        self.reported.setdefault((ctx.where, how), {}).setdefault(name, (ctx.line(node), detail))

    def unset_notes(self) -> list[str]:
        """One note per place and reading of the variables the script never set, instead of one per use."""
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
            b = Fields()
            self.expand(node, ctx, b, quoted=False)
            if b.unknown and not keep_unknown:
                return None
            out += b.result()
        return out

    def word(self, node, ctx) -> str | None:
        """One word's value as a test or a pattern reads it (no splitting; unset is empty); None: unknown."""
        if node is None:
            return None
        b = Fields()
        self.expand(node, ctx, b, quoted=True, unset_empty=True)
        return None if b.unknown else "".join(b.result())

    def scalar(self, node, ctx) -> str:
        """An assignment's value: no splitting; what cannot be known kept as written."""
        b = Fields()
        self.expand(node, ctx, b, quoted=True)
        return " ".join(b.result()) if node.type != "array" else ""

    def expand(self, node, ctx, b: Fields, quoted: bool, unset_empty: bool = False) -> None:
        """Append a word node's expansion to `b`: unquoted values split on blanks, unknown parts kept as written."""
        t = node.type
        if t == "word" or (not node.is_named and t not in ('"',)):
            b.lit(unescape_word(self.text(node, ctx)))
        elif t in ("number", "extglob_pattern", "regex", "test_operator", "brace_expression", "variable_name",
                   "special_variable_name", "file_descriptor"):
            b.lit(self.text(node, ctx))
        elif t == "raw_string":
            b.lit(self.text(node, ctx)[1:-1])
        elif t == "ansi_c_string":
            b.lit(ansi_c(self.text(node, ctx)[2:-1]))
        elif t in ("string", "translated_string"):
            self.string(node, ctx, b, unset_empty)
        elif t == "string_content":
            b.lit(unescape_dq(self.text(node, ctx)))
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

    def string(self, node, ctx, b: Fields, unset_empty: bool) -> None:
        """"...": its parts without splitting; the gaps between parts are literal text."""
        inner = [c for c in node.children if c.type not in ('"', '$"')]
        only_splat = len(inner) == 1 and self._is_splat(inner[0], ctx)
        if not only_splat:
            b.lit("")
        pos = node.children[0].end_byte if node.children else node.start_byte
        for child in inner:
            if child.start_byte > pos:
                b.lit(unescape_dq(ctx.src[pos:child.start_byte].decode("utf-8", "replace")))
            text = self.text(child, ctx)
            if text[:1].isspace():  # tree-sitter-bash puts the blanks before `$` into the `$` token
                b.lit(text[:len(text) - len(text.lstrip())])
            self.expand(child, ctx, b, quoted=True, unset_empty=unset_empty)
            pos = child.end_byte
        end = node.children[-1].start_byte if node.children and node.children[-1].type == '"' else node.end_byte
        if end > pos:
            b.lit(unescape_dq(ctx.src[pos:end].decode("utf-8", "replace")))

    def heredoc_text(self, node, ctx) -> str:
        """An unquoted here-document's text: expansions done, a backslash escaping only $ ` \\ and newline."""
        b, pos = Fields(), node.start_byte
        b.lit("")
        for child in node.named_children:
            if child.start_byte > pos:
                b.lit(unescape_heredoc(ctx.src[pos:child.start_byte].decode("utf-8", "replace")))
            if child.type == "heredoc_content":
                b.lit(unescape_heredoc(self.text(child, ctx)))
            else:
                self.expand(child, ctx, b, quoted=True)
            pos = child.end_byte
        if node.end_byte > pos:
            b.lit(unescape_heredoc(ctx.src[pos:node.end_byte].decode("utf-8", "replace")))
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

    def parameter(self, node, ctx, b: Fields, quoted: bool, unset_empty: bool) -> None:
        """Expand ${...}: lengths and bash's operators on a known value; indirection and unknowns kept as written."""
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
            b = Fields()
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
        try:
            if op in ("#", "##", "%", "%%"):
                pattern = operand()
                return None if pattern is None else remove_pattern(value, pattern, op)
            if op in ("/", "//", "/#", "/%"):
                slash = [i for i, n in enumerate(operands) if not n.is_named and n.type == "/"]
                pattern = operand(operands[:slash[0]] if slash else operands)
                repl = operand(operands[slash[0] + 1:]) if slash else ""
                if pattern is None or repl is None:
                    return None
                return substitute_pattern(value, pattern, repl, op, self.max_expanded)
        except Unevaluated as exc:
            self.note_node(node, ctx, raw[:60], f"{exc}: not evaluated, kept as written")
            return None
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
