"""No absolute path of a machine in the repository: it must work wherever it is checked out.

Why: tests and generators that named the build machine's directories (its work tree, its shared
notes, its git mirrors) skipped or broke everywhere else, silently. Home and work directories
are what such paths start with; the shared notes are found by tests/shared_reference.py.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# an absolute path into a home or work directory, not part of a longer word, URL or ${VAR}/ path; the made-up
# users of documentation examples (/home/me/proj in the README's sample output) are no machine's
MACHINE_PATH = re.compile(r"(?<![\w.~$}/-])/(?:work/|root/|Users/|home/(?!(?:me|user|you)/))")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def machine_paths(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if MACHINE_PATH.search(line)]


def test_the_pattern_finds_what_it_should():
    work, home, root = ("/" + d for d in ("work", "home", "root"))  # spelled apart: this file is tracked too
    line = f'x = Path("{work}/shared/reference/a.md")'
    assert machine_paths(line + "\n") == [(1, line)]
    assert machine_paths(f"see {home}/alice/src\n") == [(1, f"see {home}/alice/src")]
    assert machine_paths(f"{root}/.cache\n") == [(1, f"{root}/.cache")]
    assert not machine_paths("--set launch.logs_dir=/scratch/logs; ${HOME}/work/x; https://a.b/work/x; a/home/b\n")
    assert not machine_paths(f"wrote {home}/me/proj/recipes/x.yaml\n")  # a documentation example's user


def test_no_tracked_file_names_a_machine_path():
    hits = []
    for path in tracked_files():
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        hits += [f"{path.relative_to(ROOT)}:{n}: {line}" for n, line in machine_paths(data.decode("utf-8", "replace"))]
    assert not hits, "absolute machine paths (find the file relative to the repository instead):\n" + "\n".join(hits)
