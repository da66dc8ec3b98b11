"""Schema migrations: each a pure function from version N's mapping to version N+1's.

v1 -> v2 follows megatron-core's own renames: moe_enable_deepep became flex + backend,
moe_deepep_num_sms / moe_hybridep_num_sms were folded into moe_flex_dispatcher_num_sms,
and cuda_graph_scope became cuda_graph_modules.

v2 -> v3 is the recipe language for real training: new sections runtime, data, tokenizer,
checkpoint, schedule, logging and eval. What v2 already said moves there: training.data ->
data.kind, training.lr -> schedule.lr, optimizer.weight_decay / optimizer.clip_grad ->
schedule.weight_decay / schedule.clip_grad (a section left empty is removed).

The same function rewrites a plain dict (for compiling) and a ruamel round-trip map (for
`moeforge migrate`, comments kept, the `# yaml-language-server: $schema=` line updated).
"""
from __future__ import annotations

import copy
import io
import os
import re
import stat
from pathlib import Path

from moeforge.compiler.bounded import LIMITS, read_text
from moeforge.compiler.diagnostics import CompileError, Diagnostic, Position, error
from moeforge.compiler.recipe.document import Document

CURRENT = {"recipe": 3, "platform": 1, "model": 1, "sweep": 1}


class MigrationError(ValueError):
    pass


def _rename(mapping, old: str, new: str, value) -> None:
    """Replace key `old` by `new` at the same place (and with its comment, in ruamel maps)."""
    keys = list(mapping.keys())
    index = keys.index(old)
    comment = getattr(mapping, "ca", None) and mapping.ca.items.pop(old, None)
    del mapping[old]
    if new in mapping:
        raise MigrationError(f"both '{old}' and its new name '{new}' are set")
    if hasattr(mapping, "insert"):
        mapping.insert(index, new, value)
        if comment:
            mapping.ca.items[new] = comment
    else:
        items = list(mapping.items())
        items.insert(index, (new, value))
        mapping.clear()
        mapping.update(items)


def recipe_v1_to_v2(data):
    """Pure: returns a migrated copy; the input is left untouched."""
    out = copy.deepcopy(data)
    out["schema"] = "moeforge/recipe/v2"
    moe = out.get("moe")
    if isinstance(moe, dict):
        if "enable_deepep" in moe:
            enabled = moe["enable_deepep"]
            if enabled is True:
                if moe.get("flex_backend") not in (None, "deepep", "auto"):
                    raise MigrationError("enable_deepep: true conflicts with flex_backend: "
                                         f"{moe['flex_backend']} (megatron-core: 'Only one backend is "
                                         "supported for flex token dispatcher.')")
                _rename(moe, "enable_deepep", "dispatcher", "flex")
                if "flex_backend" in moe:
                    moe["flex_backend"] = "deepep"
                else:
                    keys = list(moe.keys())
                    _insert_after(moe, keys[keys.index("dispatcher")], "flex_backend", "deepep")
            else:
                del moe["enable_deepep"]
        sms = {k: moe[k] for k in ("deepep_num_sms", "hybridep_num_sms") if k in moe}
        if sms:
            backend = moe.get("flex_backend")
            chosen = sms.get(f"{backend}_num_sms") if backend in ("deepep", "hybridep") else None
            if chosen is None:
                distinct = set(sms.values())
                if len(distinct) > 1:
                    raise MigrationError("deepep_num_sms and hybridep_num_sms differ and moe.flex_backend does not "
                                         "say which applies; megatron-core folds both into moe_flex_dispatcher_num_sms")
                chosen = distinct.pop()
            first = next(iter(sms))
            _rename(moe, first, "flex_num_sms", chosen)
            for other in sms:
                if other != first:
                    del moe[other]
    graph = out.get("cuda_graph")
    if isinstance(graph, dict) and "scope" in graph:
        _rename(graph, "scope", "modules", graph["scope"])
    return out


def _insert_after(mapping, after: str, key: str, value) -> None:
    index = list(mapping.keys()).index(after) + 1
    if hasattr(mapping, "insert"):
        mapping.insert(index, key, value)
    else:
        items = list(mapping.items())
        items.insert(index, (key, value))
        mapping.clear()
        mapping.update(items)


# v2 -> v3: (old section, old key) -> (new section, new key), in the order the new sections appear
V3_MOVES = ((("training", "data"), ("data", "kind")),
            (("training", "lr"), ("schedule", "lr")),
            (("optimizer", "weight_decay"), ("schedule", "weight_decay")),
            (("optimizer", "clip_grad"), ("schedule", "clip_grad")))


def recipe_v2_to_v3(data):
    """Pure: returns a migrated copy; the input is left untouched."""
    out = copy.deepcopy(data)
    out["schema"] = "moeforge/recipe/v3"
    created: list[str] = []
    for (section, key), (new_section, new_key) in V3_MOVES:
        source = out.get(section)
        if not isinstance(source, dict) or key not in source:
            continue
        target = out.get(new_section)
        if target is None:
            target = type(out)()  # a ruamel map stays a ruamel map (comments, order)
            after = created[-1] if created else (section if section in out else None)
            if after:
                _insert_after(out, after, new_section, target)
            else:
                out[new_section] = target
            created.append(new_section)
        elif not isinstance(target, dict):
            raise MigrationError(f"'{new_section}' must be a mapping to receive {section}.{key}")
        if new_key in target:
            raise MigrationError(f"both '{section}.{key}' and its new place '{new_section}.{new_key}' are set")
        value, comment = _take(source, key)
        target[new_key] = value
        if comment and hasattr(target, "yaml_add_eol_comment"):
            target.yaml_add_eol_comment(comment[1], new_key, column=comment[0])
        if not source:
            _take(out, section)
    return out


def _take(mapping, key):
    """Remove `key`; (value, (column, end-of-line comment) or None). Comment lines that followed the key
    (they belong to what comes next) stay, attached to the key before it."""
    keys = list(mapping.keys())
    value = mapping[key]
    ca = getattr(mapping, "ca", None)
    entry = ca.items.pop(key, None) if ca is not None else None
    del mapping[key]
    token = entry[2] if entry and len(entry) > 2 else None
    if token is None:
        return value, None
    first, _, rest = token.value.partition("\n")
    previous = keys[keys.index(key) - 1] if keys.index(key) > 0 else None
    if rest.strip() and previous is not None:
        before = ca.items.setdefault(previous, [None, None, None, None])
        if before[2] is None:
            token.value = "\n" + rest
            before[2] = token
        else:
            before[2].value += rest
    comment = first.strip()
    return value, ((token.start_mark.column if token.start_mark else 0), comment) if comment else None


MIGRATIONS = {("recipe", 1): recipe_v1_to_v2, ("recipe", 2): recipe_v2_to_v3}
# A key that only moved (same value, new place), old path -> current path: what --set overrides written for an
# older recipe version still mean.
MOVED_KEYS = {old: new for old, new in V3_MOVES}

# where a key's source position is found after each migration (for diagnostics)
MOVED = {("recipe", 1): {("moe", "dispatcher"): ("moe", "enable_deepep"),
                         ("moe", "flex_backend"): ("moe", "enable_deepep"),
                         ("moe", "flex_num_sms"): ("moe", "deepep_num_sms"),
                         ("cuda_graph", "modules"): ("cuda_graph", "scope")},
         ("recipe", 2): {new: old for old, new in V3_MOVES}}


def declared_version(data) -> tuple[str, int] | None:
    """(kind, N) of `schema: moeforge/<kind>/v<N>`; None when absent or malformed, which migration leaves alone."""
    schema = data.get("schema") if isinstance(data, dict) else None
    match = re.fullmatch(r"moeforge/([a-z]+)/v([0-9]+)", schema, re.ASCII) if isinstance(schema, str) else None
    return (match.group(1), int(match.group(2))) if match else None


def upgrade(data, file: str = "<memory>"):
    """Apply every migration from the declared version up to the current one."""
    version = declared_version(data)
    if version is None:
        return data
    kind, n = version
    while (kind, n) in MIGRATIONS:
        try:
            data = MIGRATIONS[(kind, n)](data)
        except MigrationError as exc:
            raise CompileError([error("E_MIGRATION", f"cannot migrate {kind} v{n} -> v{n + 1}: {exc}",
                                      Position(file, 1, 1))]) from None
        n += 1
    return data


def upgrade_document(doc: Document) -> Document:
    """The document migrated to its kind's current schema, each moved key keeping the position it was written at."""
    version = declared_version(doc.data)
    if version is None or version[1] >= CURRENT.get(version[0], version[1]):
        return doc
    data = upgrade(doc.data, doc.file)
    positions = dict(doc.positions)
    kind, n = version
    while (kind, n) in MIGRATIONS:  # each step's moves, in order (a v1 key may move twice)
        for new, old in MOVED.get((kind, n), {}).items():
            for path, pos in list(positions.items()):
                if path[: len(old)] == old:
                    positions.setdefault(new + path[len(old):], pos)
        n += 1
    return Document(doc.file, data, positions, version[1])


def old_schema_notes(documents) -> list:
    """An advice note for each document written for an older schema version (it still compiles: the
    pipeline migrates it in memory), pointing at `moeforge migrate`."""
    out = []
    for doc in documents:
        version = declared_version(doc.data)
        if version is None:
            continue
        kind, n = version
        n = doc.migrated_from or n
        if n < CURRENT.get(kind, n):
            out.append(Diagnostic("advice", "SCHEMA_OLD_VERSION",
                                  f"written for moeforge/{kind}/v{n}; the current schema is v{CURRENT[kind]} "
                                  "(it compiles: moeforge migrates it in memory)", doc.pos(("schema",)),
                                  help=f"run `moeforge migrate {doc.file}` to rewrite it, comments kept"))
    return out


def migrate_file(path: Path, write: bool = True) -> bool:
    """Rewrite a document in place at the current schema version, comments kept; whether it changed
    (with write=False: whether it would, nothing written). A symbolic link stays a link: the file it
    points to is migrated. The file keeps its mode (and, run as root, its owner)."""
    from ruamel.yaml import YAML  # lazy: only `moeforge migrate` needs a round-trip parser

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a folded description
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    path = Path(os.path.realpath(path))
    text = read_text(path, LIMITS["recipe"])
    data = yaml.load(text)
    version = declared_version(data)
    if version is None or version[1] >= CURRENT.get(version[0], version[1]):
        return False
    new = upgrade(data, str(path))
    if not write:
        return True
    out = io.StringIO()
    yaml.dump(new, out)
    _replace(path, _schema_comment(out.getvalue(), version[0]))
    return True


def _replace(path: Path, text: str) -> None:
    """`path` (a real file) replaced by `text` whole or not at all, with the file's mode and owner; the
    temporary beside it is removed whatever goes wrong (a full disk, an interrupt)."""
    import tempfile  # lazy: only a migration writes a file

    st = os.stat(path)
    if st.st_nlink > 1:
        _rewrite_linked(path, text)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".migrate.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _rewrite_linked(path: Path, text: str) -> None:
    """A file with other hard links, rewritten in place: replacing it (os.replace) would give this name a new
    inode and leave every other link with the old version. The whole text is first written and synced beside it
    (a full disk fails there, the file untouched; the temporary is removed either way); an error while writing in
    place puts the old bytes back."""
    import tempfile  # lazy: only a migration writes a file

    data, old = text.encode("utf-8"), path.read_bytes()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".migrate.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        Path(tmp).unlink(missing_ok=True)
    try:
        with open(path, "r+b") as fh:
            fh.write(data)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with open(path, "r+b") as fh:
            fh.write(old)
            fh.truncate()
        raise


_SCHEMA_COMMENT = re.compile(r"^(# yaml-language-server: \$schema=\S*?)(recipe|platform|model|sweep)\.v[0-9]+\.json",
                             re.MULTILINE | re.ASCII)


def _schema_comment(text: str, kind: str) -> str:
    """The editor's `# yaml-language-server: $schema=...<kind>.vN.json` line names the current schema."""
    return _SCHEMA_COMMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}.v{CURRENT[m.group(2)]}.json"
                               if m.group(2) == kind else m.group(0), text, count=1)
