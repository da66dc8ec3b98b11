"""A launch script read as bash would run it, without running anything: for `moeforge import` and `lint-config`.

Why its own module: real launch scripts keep their flags in variables and arrays, build values with `${X:-d}` and
`$((PP*2))`, split `"--tokenizer-type NullTokenizer"` array elements on spaces when expanded unquoted, and hand the
command to `srun bash -c "$CMD"`. The grammar is tree-sitter-bash's (a maintained parser; imported lazily, so
the cold `check` path never loads it); this module evaluates what it can: assignments (`export`, `local`,
`declare -a`, `+=`, array elements), parameter expansion (defaults, alternatives, lengths, substrings, prefix /
suffix removal, substitution), arithmetic, quoting and word splitting, `if` / `case` / `&&` / `||` on tests whose
operands are known, `for` loops over known words, functions, `source` of a file beside the script, and commands
inside `bash -c` / `sh -c` / `eval` strings. What it cannot know (command substitution, a variable the script
never sets, a test of the file system, a `while` loop) is a note naming the construct and its line, never a
guess: an unset variable is kept as `${NAME}` in a command (the launch resolves it), read as unset where the
script gives it a default or tests it, and the script is read as run without arguments.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from moeforge.compiler.bounded import LIMITS, Unreadable, read_text
from moeforge.compiler.launch_reader import shell_eval as E

# commands that run another command from a string
STRING_RUNNERS = ("bash", "sh", "zsh", "dash")
MAX_DEPTH = 8         # nested `source` / `bash -c` / function calls
MAX_LOOP = 256        # iterations of a `for` loop over known words
MAX_EXPANDED = E.MAX_EXPANDED  # characters one variable, one array or one command's words may hold
# Statements run in one read, calls and loops included: a launch runs hundreds; `f(){ f;f;f;f;f;f;f;f;f;f; }; f`
# runs 10**8 within MAX_DEPTH, and exhausted memory (Python aborted) before this budget
MAX_STEPS = 100_000
# Levels of syntax one text may nest (`$(` in `$(`, `${X:-${Y:-...}}`, blocks in blocks): each costs the evaluator a
# few Python frames; 200 nested `$(` reached RecursionError. Launch scripts nest under 20.
MAX_NESTING = 100


class TooLarge(ValueError):
    """A variable, an array or a command past MAX_EXPANDED characters, or a script past MAX_STEPS statements or
    MAX_NESTING levels: not a launch anyone runs (one located line: import and lint-config report it, exit 2)."""
QUIET = {"echo", "printf", "mkdir", "cd", "set", "shopt", "trap", "ulimit", "umask", "sleep", "wait", "true", ":",
         "rm", "cp", "mv", "ln", "touch", "chmod", "cat", "tee", "date", "hostname", "nvidia-smi", "pwd", "pip",
         "module", "ml", "conda", "nvidia-smi", "git", "ls", "env", "printenv", "exec", "return", "shift"}


@dataclass
class Command:
    """A simple command as bash runs it: its words after expansion, the assignments in front of it, where."""
    words: list[str]
    env: dict[str, str]
    line: int
    where: str


@dataclass
class Script:
    """What reading a script found: its commands, the variables and arrays it leaves, and what it could not
    evaluate (one note per construct and line)."""
    commands: list[Command] = field(default_factory=list)
    vars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _Exit(Exception):
    """`exit`: the script stops here."""


def read_script(text: str, path: str | Path | None = None, env: dict | None = None) -> Script:
    """Evaluate a script's text (``path``: where it lives, for `source` of a file beside it and for `$0`)."""
    reader = _Reader(Path(path) if path else None, env or {})
    try:
        reader.run_text(text, reader.name, 0, 0)
    except _Exit:
        pass
    out = reader.state
    out.notes = list(dict.fromkeys(out.notes + reader.unset_notes()))
    return out


class _Reader(E.Words):
    def __init__(self, path: Path | None, env: dict):
        self.path = path
        self.name = path.name if path else "script"
        self.state = Script(vars=dict(env))
        self.functions: dict[str, tuple] = {}
        self.positional: list[str] = []
        self.depth = 0
        self.steps = 0
        super().__init__()

    # ------------------------------------------------------------------ texts and statements

    def run_text(self, text: str, where: str, line0: int, depth: int) -> None:
        """Run a script's (or an eval / bash -c string's) statements; past MAX_DEPTH nesting a note, not a recursion."""
        if depth > MAX_DEPTH:
            self.note(line0, where, f"nesting deeper than {MAX_DEPTH} levels: not read")
            return
        src = text.encode("utf-8", "surrogatepass")
        tree = E.parser().parse(src)
        ctx = E.Ctx(src, where, line0)
        deep = _deepest(tree.root_node, MAX_NESTING)
        if deep is not None:
            raise TooLarge(f"{where}:{ctx.line(deep)}: constructs nested more than {MAX_NESTING} levels deep (`$(` "
                           "inside `$(`, `${X:-${Y:-...}}`): not a launch moeforge can read; flatten it")
        self.depth = depth
        for node in tree.root_node.named_children:
            self.statement(node, ctx)

    def statement(self, node, ctx) -> bool | None:
        """Run one statement; its exit status when known (True: success), None when not."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise TooLarge(f"{ctx.where}:{ctx.line(node)}: the script runs more than {MAX_STEPS} statements (a "
                           "function that calls itself, or loops): not a launch moeforge can read")
        t = node.type
        if t in ("comment", "heredoc_body"):
            return True
        if t == "ERROR":
            self.note_node(node, ctx, "bash that tree-sitter-bash cannot parse", "read as far as it goes")
            for child in node.named_children:
                self.statement(child, ctx)
            return None
        if t == "variable_assignment":
            self.assign(node, ctx)
            return True
        if t == "variable_assignments":
            for child in node.named_children:
                self.assign(child, ctx)
            return True
        if t == "declaration_command":
            return self.declaration(node, ctx)
        if t == "unset_command":
            for child in node.named_children:
                name = self.text(child, ctx)
                self.state.vars.pop(name, None)
                self.state.arrays.pop(name, None)
            return True
        if t == "command":
            return self.command(node, ctx)
        if t == "redirected_statement":
            body = node.child_by_field_name("body")
            status = self.statement(body, ctx) if body is not None else True
            self.heredoc_script(node, body, ctx)
            return status
        if t == "pipeline":
            status = None
            for child in node.named_children:
                status = self.statement(child, ctx)
            return status
        if t == "negated_command":
            status = self.statement(node.named_children[-1], ctx)
            return None if status is None else not status
        if t == "list":
            return self.and_or(node, ctx)
        if t in ("compound_statement", "do_group"):
            return self.block(node.named_children, ctx)
        if t == "subshell":
            saved = (dict(self.state.vars), {k: list(v) for k, v in self.state.arrays.items()})
            status = self.block(node.named_children, ctx)
            self.state.vars, self.state.arrays = saved
            return status
        if t == "test_command":
            return self.test(node, ctx)
        if t == "if_statement":
            return self.if_statement(node, ctx)
        if t == "case_statement":
            return self.case(node, ctx)
        if t == "for_statement":
            return self.for_loop(node, ctx)
        if t in ("while_statement", "c_style_for_statement"):
            return self.loop(node, ctx)
        if t == "function_definition":
            name = node.child_by_field_name("name")
            self.functions[self.text(name, ctx)] = (node.child_by_field_name("body"), ctx)
            return True
        self.note_node(node, ctx, f"a {t.replace('_', ' ')}", "not evaluated")
        return None

    def block(self, nodes, ctx) -> bool | None:
        """Run statements in order; the status is the last one's, as bash's is."""
        status = True
        for child in nodes:
            status = self.statement(child, ctx)
        return status

    def and_or(self, node, ctx) -> bool | None:
        """`a && b`, `a || b`: b runs when a's status says so; a command's status is success unless it is a
        test; an unknown status leaves b unread (named)."""
        pairs = []  # tree-sitter-bash nests `a && b && c` to the left: ((a && b) && c), read here as one chain
        while node.type == "list" and len(node.children) >= 3:
            pairs[:0] = list(zip(node.children[1::2], node.children[2::2]))
            node = node.children[0]
        status = self.statement(node, ctx)
        for op, right in pairs:
            if status is None:
                if self.matters(right):
                    self.note_node(right, ctx, f"`{self.text(right, ctx)[:60]}` after `{op.type}` of an unknown "
                                   "status", "not run")
                return None
            if (op.type == "&&") == bool(status):
                status = self.statement(right, ctx)
        return status

    def if_statement(self, node, ctx) -> bool | None:
        """Run the branch whose condition is known true; an unknown condition reads no branch, noted if one matters."""
        branches = [_cond_body(node)] + [_cond_body(c) for c in node.named_children if c.type == "elif_clause"]
        branches += [(None, c.named_children) for c in node.named_children if c.type == "else_clause"]
        for i, (conds, body) in enumerate(branches):
            status = True if conds is None else self.condition(conds, ctx)
            if status is None:
                if any(self.matters(n) for _, b in branches[i:] for n in b):
                    self.note_node(conds[0], ctx, f"if {self.text(conds[0], ctx)[:60]}",
                                   "its condition cannot be known without running it: no branch read")
                return None
            if status:
                return self.block(body, ctx)
        return True

    def condition(self, conds, ctx) -> bool | None:
        """An if/elif condition's status: its commands run in order, the last one's status (None: unknown)."""
        status = True
        for c in conds:
            status = self.statement(c, ctx) if c.type != "test_command" else self.test(c, ctx)
        return status

    def case(self, node, ctx) -> bool | None:
        """Run the first item whose pattern matches the known word (fnmatch, as bash); an unknown word reads no item."""
        value = self.word(node.child_by_field_name("value"), ctx)
        for item in (c for c in node.named_children if c.type == "case_item"):
            patterns = [c for i, c in enumerate(item.children) if item.field_name_for_child(i) == "value"]
            body = [c for c in item.named_children if c not in patterns]
            pats = [self.word(p, ctx) for p in patterns]
            if value is None or any(p is None for p in pats):
                if any(self.matters(n) for n in body):
                    self.note_node(node, ctx, f"case {self.text(node.child_by_field_name('value'), ctx)}",
                                   "its word cannot be known without running it: no branch read")
                return None
            if any(fnmatch.fnmatchcase(value, p) for p in pats):
                return self.block(body, ctx)
        return True

    def for_loop(self, node, ctx) -> bool | None:
        """Run the body once per known word (without `in`: the positional ones); unknown or past MAX_LOOP: not run."""
        var = self.text(node.child_by_field_name("variable"), ctx)
        values = [c for i, c in enumerate(node.children) if node.field_name_for_child(i) == "value"]
        words = self.positional if not values else self.words_of(values, ctx, keep_unknown=False)
        body = node.child_by_field_name("body")
        if words is None or len(words) > MAX_LOOP:
            if self.matters(body):
                self.note_node(node, ctx, f"for {var} in ...", "its words cannot be known without running it: "
                               "not run")
            return None
        status = True
        for w in words:
            self.state.vars[var] = w
            status = self.statement(body, ctx)
        return status

    def loop(self, node, ctx) -> bool | None:
        """A while/until loop is never run (its exit cannot be known); one whose test is false is never entered."""
        cond = node.child_by_field_name("condition")
        if node.type == "while_statement" and cond is not None:
            status = self.condition([cond], ctx)
            if status is False:
                return True  # never entered (`while [[ $# -gt 0 ]]` of a script run without arguments)
        if self.matters(node.child_by_field_name("body")):
            self.note_node(node, ctx, f"a {node.type.split('_')[0]} loop", "not run")
        return None

    def matters(self, node) -> bool:
        """Whether skipping a statement can change what is read: it assigns or runs a command that is not
        one of the QUIET ones."""
        if node is None:
            return False
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type in ("variable_assignment", "unset_command", "declaration_command"):
                return True
            if n.type == "command":
                name = n.child_by_field_name("name")
                if name is None or name.text.decode("utf-8", "replace") not in QUIET | {"exit"}:
                    return True
            stack.extend(n.named_children)
        return False

    def heredoc_script(self, node, body, ctx) -> None:
        """`sbatch <<EOF ... EOF` (or bash, sh, srun): the here-document is a script that runs; its text is
        expanded first unless the delimiter is quoted."""
        if body is None or body.type != "command" or not self.state.commands:
            return
        name = body.child_by_field_name("name")
        if name is None or Path(self.text(name, ctx)).name not in ("sbatch", "srun", *STRING_RUNNERS):
            return
        for redirect in (c for c in node.named_children if c.type == "heredoc_redirect"):
            start = next((c for c in redirect.named_children if c.type == "heredoc_start"), None)
            doc = next((c for c in redirect.named_children if c.type == "heredoc_body"), None)
            if doc is None:
                continue
            literal = start is not None and self.text(start, ctx)[:1] in "'\"" and self.text(start, ctx) != ""
            text = self.text(doc, ctx) if literal else self.heredoc_text(doc, ctx)
            self.run_text(text, ctx.where, ctx.line(doc) - 1, self.depth + 1)

    # ------------------------------------------------------------------ assignments

    def declaration(self, node, ctx) -> bool:
        """export/local/declare: assign what has a value; a bare declare/local name starts empty, as in bash."""
        keyword = node.children[0].type
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child, ctx)
            elif child.type == "variable_name" and keyword in ("declare", "local", "typeset"):
                self.state.vars.setdefault(self.text(child, ctx), "")
        return True

    def assign(self, node, ctx) -> None:
        """Record a scalar, array or element assignment (+= appends); unknown parts are kept as written."""
        name_node = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        append = any(c.type == "+=" for c in node.children)
        index = None
        if name_node.type == "subscript":
            index = self.word(name_node.child_by_field_name("index"), ctx)
            name_node = name_node.child_by_field_name("name")
        name = self.text(name_node, ctx)
        if name not in self.state.vars and name not in self.state.arrays and value is not None \
                and re.search(rf"\$\{{?{re.escape(name)}\b", self.text(value, ctx)):
            self.state.vars[name] = ""  # X="$X more": the script's own accumulator, empty before its first use
        if value is not None and value.type == "array":
            words = self.words_of(value.named_children, ctx, keep_unknown=True)
            old = self.state.arrays.get(name, []) if append else []
            self.state.arrays[name] = _bounded(old + words, name, node, ctx)
            self.state.vars.pop(name, None)
            return
        text = _bounded("" if value is None else self.scalar(value, ctx), name, node, ctx)
        if index is not None or name in self.state.arrays:
            arr = self.state.arrays.setdefault(name, [])
            i = E.to_int(index) if index is not None else 0
            if i is None:
                self.note_node(node, ctx, f"{name}[{index}]=", "an index that is not a number: not set")
                return
            if i + 1 - len(arr) > MAX_EXPANDED:
                raise TooLarge(f"{ctx.where}:{ctx.line(node)}: {name}[{i}]: an array of more than {MAX_EXPANDED} "
                               "elements is not a launch moeforge can read")
            arr.extend([""] * (i + 1 - len(arr)))
            arr[i] = (arr[i] if append else "") + text
            _bounded(arr, name, node, ctx)
            return
        self.state.vars[name] = _bounded((self.state.vars.get(name, "") if append else "") + text, name, node, ctx)

    # ------------------------------------------------------------------ commands

    def command(self, node, ctx) -> bool | None:
        """Record the command and follow what changes reading: source, exit, shift, eval, functions, bash -c."""
        env = {}
        for child in node.named_children:
            if child.type == "variable_assignment":
                env[self.text(child.child_by_field_name("name"), ctx)] = self.scalar(
                    child.child_by_field_name("value"), ctx) if child.child_by_field_name("value") else ""
        parts = [c for i, c in enumerate(node.children) if node.field_name_for_child(i) in ("name", "argument")]
        words = _bounded(self.words_of(parts, ctx, keep_unknown=True), "a command", node, ctx)
        if not words:
            self.state.vars.update(env)
            return True
        line = ctx.line(node)
        self.state.commands.append(Command(words, env, line, ctx.where))
        head = words[0]
        if head in ("source", "."):
            return self.source(words[1:], node, ctx)
        if head == "exit":
            raise _Exit
        if head == "shift":
            self.positional = self.positional[E.to_int(words[1]) or 1 if len(words) > 1 else 1:]
            return True
        if head in ("true", ":"):
            return True
        if head == "false":
            return False
        if head == "test" or head == "[":
            return E.test_words(words[1:-1] if head == "[" else words[1:])
        if head == "eval":
            self.run_text(" ".join(words[1:]), f"{ctx.where}:{line} (eval)", 0, self.depth + 1)
            return None
        if head in self.functions:
            return self.call(head, words[1:], line, ctx)
        inner = _string_command(words)
        if inner is not None:
            self.run_text(inner, f"{ctx.where}:{line} (bash -c)", 0, self.depth + 1)
        return None if head not in QUIET else True

    def call(self, name: str, args: list[str], line: int, ctx) -> bool | None:
        """Run a script function's body with its arguments as $1...; past MAX_DEPTH calls a note, not a recursion."""
        body, where = self.functions[name]
        if self.depth >= MAX_DEPTH:
            self.note(line, ctx.where, f"{name}: calls nested deeper than {MAX_DEPTH} levels: not run")
            return None
        saved, self.positional = self.positional, args
        self.depth += 1
        try:
            return self.statement(body, where)
        finally:
            self.depth -= 1
            self.positional = saved

    def source(self, args: list[str], node, ctx) -> bool | None:
        """Read a sourced file found beside the script, bounded as it is; one not found leaves its values unknown."""
        if not args:
            return None
        target = args[0]
        candidates = [Path(target)]
        if self.path is not None:
            candidates.append(self.path.parent / target)
            candidates.append(self.path.parent / Path(target).name)
        found = next((p for p in candidates if "${" not in str(p) and "$(" not in str(p) and p.is_file()), None)
        if found is None:
            self.note_node(node, ctx, f"source {target}", "no such file beside the script: what it sets is unknown")
            return None
        try:
            text = read_text(found, LIMITS["launch"])
        except Unreadable as exc:
            self.note_node(node, ctx, f"source {target}", f"cannot read it ({exc})")
            return None
        saved = self.path
        self.path = found
        try:
            self.run_text(text, found.name, 0, self.depth + 1)
        finally:
            self.path = saved
        return True


def _bounded(value, what: str, node, ctx):
    """`value` (a string or a list of words), or TooLarge past MAX_EXPANDED characters."""
    size = len(value) if isinstance(value, str) else sum(len(w) + 1 for w in value)
    if size > MAX_EXPANDED:
        raise TooLarge(f"{ctx.where}:{ctx.line(node)}: {what} expands to more than {MAX_EXPANDED} characters (a "
                       "script that grows a variable or an array in a loop is not a launch moeforge can read)")
    return value


def _deepest(root, limit: int):
    """The first node more than `limit` levels below `root`, else None (iterative: the check that keeps the
    recursive evaluator within Python's stack cannot itself recurse)."""
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return node
        # a chain `a && b && ...` nests to the left without nesting anything: and_or reads it as one level
        stack.extend((child, depth + (not (child.type == node.type == "list"))) for child in node.children)
    return None


def _cond_body(node) -> tuple[list, list]:
    """(condition statements, body statements) of an `if` or `elif`: what comes before and after `then`."""
    conds, body, then = [], [], False
    for child in node.children:
        if child.type == "then":
            then = True
        elif child.is_named and child.type not in ("elif_clause", "else_clause", "comment"):
            (body if then else conds).append(child)
    return conds, body


def _string_command(words: list[str]) -> str | None:
    """The script of `bash -c STRING` anywhere in a command (`srun ... bash -c "$CMD"`, `env X=1 sh -c ...`)."""
    for i, w in enumerate(words[:-1]):
        if Path(w).name in STRING_RUNNERS:
            rest = words[i + 1:]
            for j, opt in enumerate(rest[:-1]):
                if not opt.startswith("-"):
                    break
                if "c" in opt[1:] and not opt.startswith("--"):
                    return rest[j + 1]
    return None
