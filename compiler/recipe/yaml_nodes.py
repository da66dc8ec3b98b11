"""The YAML half of moeforge.compiler.recipe.load: PyYAML's node graph turned into plain values and positions.

Imported only when a document is not in the parse cache (moeforge.compiler.recipe.load): importing PyYAML and
compiling its reader's expressions is a fifth of a cold check, and an unchanged recipe does not
need them. What a recipe may not contain is refused here (see moeforge.compiler.recipe.load).
"""
from __future__ import annotations

import math
import re

import yaml

from moeforge.compiler.diagnostics import CompileError, Position, error
from moeforge.compiler.recipe.document import INT_MAX, INT_MIN, KEY, MAX_DEPTH, MAX_NODES, Document, out_of_range

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null")}


class YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader (YAML 1.1) plus YAML 1.2's exponent floats: `lr: 3e-4` is a number, as
    people write it (YAML 1.1 wants a dot: 3.0e-4). Recipes, --set values and lint-config share it."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))
_Loader = YamlLoader
_construct = yaml.constructor.SafeConstructor()


def parse(text: str, file: str) -> Document:
    """The document in `text` (already decoded and size-checked by moeforge.compiler.recipe.load.load_text)."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Position(file, mark.line + 1, mark.column + 1) if mark else Position(file, 1, 1)
        tab = _indent_tab(text, mark.line if mark else 0, "tab" in str(exc.problem))
        if tab is not None:
            raise CompileError([error("E_YAML_TAB", "a tab character in the indentation: YAML indents with "
                                      "spaces only", Position(file, tab[0] + 1, tab[1] + 1),
                                      help="replace the tab with spaces (set your editor to insert spaces "
                                           "in YAML files)")]) from None
        if "nesting depth" in str(exc.problem):  # libyaml's own limit (PyYAML >= 6.0.4), far past ours
            raise CompileError([_too_deep(pos)]) from None
        raise CompileError([error("E_YAML_SYNTAX", f"{exc.problem or exc.context}", pos)]) from None
    except yaml.YAMLError as exc:  # e.g. reader errors on control characters
        raise CompileError([error("E_YAML_SYNTAX", str(exc).splitlines()[0], Position(file, 1, 1))]) from None
    if node is None:
        return Document(file, {}, {(): Position(file, 1, 1)})
    builder = _Builder(file)
    data = builder.build(node, (), 0)
    if builder.errors:
        raise CompileError(builder.errors)
    return Document(file, data, builder.positions)


def _too_deep(pos: Position):
    return error("E_YAML_TOO_DEEP", f"nesting deeper than {MAX_DEPTH} levels", pos, help="flatten the document")


def _indent_tab(text: str, line: int, scan: bool) -> tuple[int, int] | None:
    """(line, column), 0-based, of a tab in the leading whitespace of the error's line (with scan: of any
    line up to it, the first), where a YAML scanner error is really about a tab; else None."""
    lines = text.splitlines()
    for n in (range(line + 1) if scan else [line]):
        if n >= len(lines):
            break
        stripped = lines[n].lstrip(" \t")
        lead = lines[n][: len(lines[n]) - len(stripped)]
        if "\t" in lead:
            return n, lead.index("\t")
    return None


class _Builder:
    def __init__(self, file: str):
        self.file = file
        self.positions: dict = {}
        self.errors: list = []
        self.count = 0
        self.open: set = set()  # the nodes being built (an alias to one of them is recursive)

    def _pos(self, node) -> Position:
        return Position(self.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def build(self, node, path: tuple, depth: int):
        """A node as plain values, each path's position kept; refuses alias bombs, recursive aliases, deep nesting."""
        self.count += 1
        if self.count > MAX_NODES:
            self._fail("E_YAML_TOO_MANY_NODES",
                       f"more than {MAX_NODES} values after expanding aliases (an alias bomb?)",
                       node, "remove the anchors/aliases that multiply the document")
        if id(node) in self.open:
            self._fail("E_YAML_RECURSIVE_ALIAS", "an alias refers to a value that contains it (a recursive alias)",
                       node, "replace the alias with the values it should stand for")
        if depth > MAX_DEPTH:
            self.errors.append(_too_deep(self._pos(node)))
            return None  # nothing deeper is read: the error is the answer
        self.positions.setdefault(path, self._pos(node))
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            self.open.add(id(node))
            try:
                if isinstance(node, yaml.MappingNode):
                    return self._mapping(node, path, depth)
                if node.tag != _CORE + "seq":
                    self._bad_tag(node)
                return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
            finally:
                self.open.discard(id(node))
        if node.tag not in _SCALAR_TAGS:
            self._bad_tag(node)
            return None
        try:
            value = _construct.construct_object(node, deep=True)
        except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError) as exc:
            if node.tag == _CORE + "int" and "digits" in str(exc):  # past Python's int/str conversion limit
                self.errors.append(out_of_range(node.value, self._pos(node)))
                return None
            self.errors.append(error("E_YAML_VALUE", f"{node.value[:40]!r} is not a valid {node.tag.rsplit(':', 1)[-1]}"
                                     f" ({type(exc).__name__})", self._pos(node)))
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.errors.append(error("E_NOT_FINITE", f"{node.value} is not a finite number", self._pos(node),
                                     help="recipes hold finite numbers only (no .nan or .inf)"))
        elif isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
            self.errors.append(out_of_range(node.value, self._pos(node)))
        return value

    def _mapping(self, node, path, depth):
        if node.tag != _CORE + "map":
            self._bad_tag(node)
        out: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == _CORE + "merge":
                self._fail("E_YAML_MERGE_KEY", "merge keys (<<) are not supported", key_node,
                           "use extends: to share values between recipes")
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _CORE + "str":
                self.errors.append(error("E_YAML_KEY", "mapping keys must be plain strings",
                                         self._pos(key_node)))
                continue
            key = key_node.value
            if key in out:
                self.errors.append(error("E_YAML_DUPLICATE_KEY", f"duplicate key '{key}'",
                                         self._pos(key_node),
                                         help="each key may appear once in a mapping"))
                continue
            self.positions[path + (key, KEY)] = self._pos(key_node)
            out[key] = self.build(value_node, path + (key,), depth + 1)
        return out

    def _bad_tag(self, node):
        self._fail("E_YAML_TAG", f"tag '{node.tag}' is not allowed", node,
                   "recipes use plain YAML values only (strings, numbers, booleans, null, lists, maps)")

    def _fail(self, code, message, node, help_):
        self.errors.append(error(code, message, self._pos(node), help=help_))
        raise CompileError(self.errors)
