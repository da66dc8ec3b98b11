"""Bash's text operations on values, for compiler/launch_reader/shell_ops.py and shell_eval.py: glob pattern removal
and substitution (`${X#p}`, `${X/p/r}`), `[[ $A =~ RE ]]` under a work bound, quote removal and `$'...'` decoding.

Why apart: each is pure string work with its own budget (the glob and regex bounds below), read without the parser,
the words being built or the reader's lookup that shell_ops.py holds.
"""
from __future__ import annotations

import fnmatch
import re

# Glob work: a pattern removal or substitution tries each cut of the value, each an fnmatch over up to its length;
# past this many characters with a glob pattern the value is not evaluated (a note), as a literal pattern is
# (str.replace, linear). `A=${A//x/$A}` thirty times hung in the cubic loop before any size limit could see it.
GLOB_VALUE_MAX = 4096
# `[[ $A =~ RE ]]`: Python's backtracking matcher takes exponential time on a repetition of something that can match
# in more than one way (^(a+)+$, ^(a|aa)*$ on 40 `a`s and a `!`), and n**(k+1) on k variable repetitions; RE is
# evaluated only without a repetition or an alternation inside a repetition, without back-references, with at
# most REGEX_VARIABLE variable repetitions (REGEX_UNBOUNDED of them unbounded), on a value of at most
# REGEX_VALUE_MAX characters: at most a few million steps. Launch scripts match GPU names, versions and numbers.
REGEX_VALUE_MAX = 128
REGEX_VARIABLE = 3
REGEX_UNBOUNDED = 2


class Unevaluated(Exception):
    """Work past a budget: the expression is not evaluated (the caller keeps it as written and notes it)."""


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[\\")


def remove_pattern(value: str, pattern: str, op: str) -> str:
    """${X#p} ${X##p} ${X%p} ${X%%p}: the shortest / longest prefix / suffix matching the glob removed
    (Unevaluated: a glob over a value past GLOB_VALUE_MAX)."""
    if not _is_glob(pattern):
        if op.startswith("#"):
            return value[len(pattern):] if value.startswith(pattern) else value
        return value[:len(value) - len(pattern)] if value.endswith(pattern) else value
    if len(value) > GLOB_VALUE_MAX:
        raise Unevaluated(f"a glob over {len(value)} characters (more than {GLOB_VALUE_MAX})")
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


def substitute_pattern(value: str, pattern: str, repl: str, op: str, limit: int) -> str:
    """${X/p/r} (first), ${X//p/r} (all), ${X/#p/r} (prefix), ${X/%p/r} (suffix); the longest match of the glob.
    A literal pattern is str.replace (linear; its result's size is known before it is built: past `limit`
    characters, Unevaluated); a glob over a value past GLOB_VALUE_MAX characters is Unevaluated."""
    n = len(value)
    if not _is_glob(pattern) and pattern:
        if op == "/#":
            return repl + value[len(pattern):] if value.startswith(pattern) else value
        if op == "/%":
            return value[:n - len(pattern)] + repl if value.endswith(pattern) else value
        count = 1 if op == "/" else value.count(pattern)
        if n + count * (len(repl) - len(pattern)) > limit:
            raise Unevaluated(f"a substitution whose result is more than {limit} characters")
        return value.replace(pattern, repl, 1 if op == "/" else -1)
    if n > GLOB_VALUE_MAX:
        raise Unevaluated(f"a glob over {n} characters (more than {GLOB_VALUE_MAX})")
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
    out, i, done, size = [], 0, False, 0
    while i <= n:
        hit = None if done else next((j for j in range(n, i, -1) if fnmatch.fnmatchcase(value[i:j], pattern)), None)
        if hit is not None:
            out.append(repl)
            size += len(repl)
            if size > limit:
                raise Unevaluated(f"a substitution whose result is more than {limit} characters")
            i = hit
            done = op == "/"
            continue
        if i < n:
            out.append(value[i])
        i += 1
    return "".join(out)


def regex_search(pattern: str, value: str) -> bool | None:
    """`[[ value =~ pattern ]]` with Python's re, only where its work is bounded (REGEX_VALUE_MAX); None when the
    regex is not valid; Unevaluated when matching could take more than about n^2 steps."""
    import re._parser as sre  # lazy: only a script with =~ needs the regex's structure

    try:
        tree = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    if len(value) > REGEX_VALUE_MAX:
        raise Unevaluated(f"a regular expression over {len(value)} characters (more than {REGEX_VALUE_MAX})")
    unbounded = variable = 0
    stack = [(tree, False)]
    while stack:
        items, inside = stack.pop()
        for op, arg in items:
            if op is sre.GROUPREF or op is sre.GROUPREF_EXISTS:
                raise Unevaluated("a regular expression with a back-reference")
            if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)):
                lo, hi, sub = arg
                if inside:
                    raise Unevaluated("a regular expression with a repetition inside a repetition (its matching can "
                                      "take exponential time)")
                variable += lo != hi
                unbounded += hi == sre.MAXREPEAT
                stack.append((sub, hi > 1))
            elif op is sre.SUBPATTERN:
                stack.append((arg[-1], inside))
            elif op is sre.BRANCH:
                if inside:
                    raise Unevaluated("a regular expression with an alternation inside a repetition (its matching "
                                      "can take exponential time)")
                stack.extend((branch, inside) for branch in arg[1])
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                stack.append((arg[1], inside))
    if unbounded > REGEX_UNBOUNDED or variable > REGEX_VARIABLE:
        raise Unevaluated(f"a regular expression with {variable} repetitions (at most {REGEX_VARIABLE}, "
                          f"{REGEX_UNBOUNDED} unbounded, are evaluated)")
    try:
        return re.search(pattern, value) is not None
    except (re.error, RecursionError, OverflowError):
        return None


def unescape_word(text: str) -> str:
    """An unquoted word without its backslashes (`\\x` is x; a backslash-newline joins lines)."""
    return re.sub(r"\\(\r?\n|.)", lambda m: "" if m.group(1).strip("\r\n") == "" and "\n" in m.group(1)
                  else m.group(1), text, flags=re.S)


def unescape_dq(text: str) -> str:
    """Double-quoted text: a backslash escapes only $ ` " \\ and a newline (which it removes)."""
    return re.sub(r"\\(\r?\n|[$`\"\\])", lambda m: "" if "\n" in m.group(1) else m.group(1), text)


def unescape_heredoc(text: str) -> str:
    """Undo only the escapes bash honours in an unquoted here-document: before $, ` and backslash, and line joins."""
    return re.sub(r"\\(\r?\n|[$`\\])", lambda m: "" if "\n" in m.group(1) else m.group(1), text)


_ANSI_C = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
           "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def ansi_c(text: str) -> str:
    """$'...' as bash reads it: \\e (ESC), \\n, octal, \\xHH, \\uHHHH, \\UHHHHHHHH, \\cX; any other backslash stays."""
    def one(m: re.Match) -> str:
        code = m.group(1)
        if code in _ANSI_C:
            return _ANSI_C[code]
        if code[0] == "c" and len(code) == 2:
            return chr(ord(code[1].upper()) & 0x1f)
        if code[0] in "xuU":
            value = int(code[1:], 16)
        else:
            value = int(code, 8) & 0xff
        return "\ufffd" if 0xD800 <= value < 0xE000 else chr(value) if value < 0x110000 else m.group(0)
    return re.sub(r"\\([abeEfnrtv\\'\"?]|c.|[0-7]{1,3}|x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8})",
                  one, text, flags=re.S)
