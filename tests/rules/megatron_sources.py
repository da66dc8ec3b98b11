"""The Megatron sources the source-literal tests read: released wheels, never a developer's git mirror.

Why: the catalogue's Megatron texts must be checked in CI, which has the installed packages and
the Makefile's cache of pinned wheels, and nothing else:
- megatron-core 0.16.1: the wheel installed in this interpreter (.venv; it has no megatron/training);
- megatron-core 0.17.0 and 0.18.0: the wheels `make megatron-wheels` downloads into .cache/ (sha256
  checked against megatron-wheels.sha256 beside this file);
- megatron-core 0.19.2 (megatron/core and megatron/training) and megatron-bridge 0.6.2: installed in
  .venv312 ($MOEFORGE_VENV312 where it was built elsewhere).
A git mirror of Megatron-LM or Megatron-Bridge is read only where $MOEFORGE_MEGATRON_LM_GIT /
$MOEFORGE_BRIDGE_GIT name one, for the few files no wheel carries (OUTSIDE_WHEELS in the test).
"""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path(os.environ.get("MOEFORGE_MEGATRON_WHEELS", ROOT / ".cache" / "megatron-wheels"))
CHECKSUMS = Path(__file__).resolve().parent / "megatron-wheels.sha256"
VENV312 = Path(os.environ.get("MOEFORGE_VENV312", ROOT / ".venv312"))
MAKE_TARGET = "make megatron-wheels"


def pinned_wheels() -> dict[str, str]:
    """version -> wheel file name, as megatron-wheels.sha256 pins them."""
    out = {}
    for line in CHECKSUMS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name = line.split()[1]
            out[name.split("-")[1]] = name
    return out


class Source:
    """One release's files: ``text(path)`` is the file's text, or None where this release has none."""

    def __init__(self, name: str, read):
        self.name, self._read = name, read

    def text(self, path: str) -> str | None:
        return self._read(path)


def _directory(root: Path):
    def read(path: str) -> str | None:
        p = root / path
        return p.read_text(encoding="utf-8") if p.is_file() else None
    return read


def _wheel(path: Path):
    names = set(zipfile.ZipFile(path).namelist())

    def read(member: str) -> str | None:
        if member not in names:
            return None
        with zipfile.ZipFile(path) as z:
            return z.read(member).decode("utf-8")
    return read


def _git(git_dir: Path, rev: str):
    def read(path: str) -> str | None:
        proc = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{rev}:{path}"], capture_output=True,
                              text=True)
        return proc.stdout if proc.returncode == 0 else None
    return read


def _site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python3.*/site-packages"))
    return found[0] if found else None


def missing() -> list[str]:
    """What is absent for the wheel sources, each with how to get it (empty: everything is there)."""
    out = []
    for version, name in pinned_wheels().items():
        if not (WHEELS / name).is_file():
            out.append(f"megatron-core {version} wheel {WHEELS / name} ({MAKE_TARGET})")
    site = _site_packages(VENV312)
    if site is None or not (site / "megatron" / "training" / "arguments.py").is_file():
        out.append(f"{VENV312} with megatron-core 0.19.2 and megatron-bridge 0.6.2 (make setup312)")
    try:
        importlib.metadata.distribution("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        out.append("megatron-core 0.16.1 in this interpreter (make setup)")
    return out


def megatron_core() -> list[Source]:
    """megatron-core 0.16.1 (this interpreter), 0.17.0 and 0.18.0 (cached wheels), 0.19.2 (.venv312)."""
    installed = importlib.metadata.distribution("megatron-core")
    out = [Source(f"megatron-core {installed.version} (installed)", _directory(Path(installed.locate_file(""))))]
    out += [Source(f"megatron-core {version} (wheel)", _wheel(WHEELS / name))
            for version, name in sorted(pinned_wheels().items())]
    site = _site_packages(VENV312)
    out.append(Source(f"megatron-core 0.19.2 ({VENV312.name})", _directory(site)))
    return out


def megatron_bridge() -> Source:
    """megatron-bridge 0.6.2 as installed in .venv312; paths as in its repository (src/megatron/bridge/...)."""
    site = _site_packages(VENV312)

    def read(path: str) -> str | None:
        return _directory(site)(path.removeprefix("src/")) if path.startswith("src/") else None
    return Source(f"megatron-bridge 0.6.2 ({VENV312.name})", read)


def git_mirrors(mlm_tags: tuple[str, ...]) -> list[Source]:
    """Git mirrors named by $MOEFORGE_MEGATRON_LM_GIT (these tags) / $MOEFORGE_BRIDGE_GIT (HEAD); none unset."""
    out = []
    mlm, bridge = os.environ.get("MOEFORGE_MEGATRON_LM_GIT"), os.environ.get("MOEFORGE_BRIDGE_GIT")
    if mlm:
        out += [Source(f"Megatron-LM {tag} (git)", _git(Path(mlm), tag)) for tag in mlm_tags]
    if bridge:
        out.append(Source("Megatron-Bridge HEAD (git)", _git(Path(bridge), "HEAD")))
    return out
