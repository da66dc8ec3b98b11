"""Where the project's shared/reference/ notes are: found, never assumed at one machine's path.

Why: shared/ lies beside the checkout (CI lays a copy next to the clone; a worktree may sit deeper),
so it is searched upwards from the repository; $MOEFORGE_SHARED names it where it is elsewhere.
The repository must not depend on where it is checked out (tests/compiler/test_no_machine_paths.py).
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def reference(name: str) -> Path | None:
    """shared/reference/NAME, or None when no shared/ is found."""
    explicit = os.environ.get("MOEFORGE_SHARED")
    candidates = [Path(explicit)] if explicit else [d / "shared" for d in ROOT.parents]
    return next((c / "reference" / name for c in candidates if (c / "reference" / name).is_file()), None)
