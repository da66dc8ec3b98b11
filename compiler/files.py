"""Writing a file whole or not at all: a reader never sees half of it, and a failed write leaves the old one.

Why at the bottom of the layers: the build, the planner's and the import's documents, sweeps, calibrations and
the schemas a project's editors read are all written this way.
"""
from __future__ import annotations

import os
from pathlib import Path


def write_file_atomically(path: Path, text: str | bytes) -> None:
    """A file written whole or not at all (text as UTF-8, or bytes as they are)."""
    import tempfile  # lazy: a warm check writes nothing (tests/compiler/test_cold_start.py WARM)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
