"""The words bash itself hands pretrain_gpt.py when it runs a launch script: the judge of moeforge's shell reader.

Why: compiler/launch_reader/shell.py evaluates a script without running it; what it must reproduce is what bash
does when it does run it. Here bash runs the script for real, with stand-ins for the launchers on PATH:
`torchrun`, `python`, `python3` and `uv` record the words after a pretrain_*.py (and run nothing else); `srun`
drops its own options and runs its command; `sbatch` runs the batch script it is given (a file or its standard
input, a here-document). Nothing of Megatron is needed, so the .venv suite and the .venv312 judges both use it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_RECORD = r'''#!/bin/bash
# stand-in launcher: record the words after the entry point, once
for ((i = 1; i <= $#; i++)); do
  case "${!i}" in
    *pretrain_gpt.py|*pretrain_mamba.py|*pretrain_hybrid.py)
      python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${@:i+1}" >> "$MOEFORGE_CAPTURE"
      exit 0 ;;
  esac
done
exit 0
'''
_SRUN = r'''#!/bin/bash
# stand-in srun: its own options (--x=y, -x) dropped, the command run
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done
exec "$@"
'''
_SBATCH = r'''#!/bin/bash
# stand-in sbatch: the batch script (a file argument, else standard input) run by bash
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done
if [[ $# -gt 0 ]]; then exec bash "$@"; else exec bash -s; fi
'''


def bash_words(script: Path, timeout: int = 60) -> list[list[str]]:
    """Every word list bash hands an entry point while running ``script`` (in the order they ran)."""
    with tempfile.TemporaryDirectory(prefix="moeforge-bash-") as tmp:
        stubs = Path(tmp) / "bin"
        stubs.mkdir()
        for name, text in (("torchrun", _RECORD), ("python", _RECORD), ("uv", _RECORD), ("srun", _SRUN),
                           ("sbatch", _SBATCH)):
            path = stubs / name
            path.write_text(text.replace("python3 -c", f"{sys.executable} -c"))
            path.chmod(0o755)
        capture = Path(tmp) / "capture.jsonl"
        capture.touch()
        env = {"PATH": f"{stubs}:/usr/bin:/bin", "MOEFORGE_CAPTURE": str(capture), "HOME": tmp}
        subprocess.run(["bash", str(Path(script).resolve())], cwd=tmp, env=env, timeout=timeout,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
        return [json.loads(line) for line in capture.read_text().splitlines() if line.strip()]


if __name__ == "__main__":  # pragma: no cover - a look at one script by hand
    for words in bash_words(Path(sys.argv[1])):
        print(" ".join(words))
    os._exit(0)
