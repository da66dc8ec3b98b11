"""Helpers for tests/hostile: hostile strings, recording shims, running generated scripts."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TINY = (REPO / "recipes" / "tiny-moe" / "cpu.yaml").read_text(encoding="utf-8")
OUTPUTS = ("plan.json", "torchrun.sh", "launch.sbatch", "pytorchjob.yaml", "env.sh", "megatron-lm.args",
           "bridge.overrides", "EXPLAIN.md")
SHELL_OUTPUTS = ("torchrun.sh", "launch.sbatch", "env.sh")
MARK = "pwned"  # every payload creates a file whose name starts with this


def payloads(marker_dir: Path) -> list[str]:
    """Strings that run `touch <marker_dir>/pwned-N` if a shell ever evaluates them."""
    m = f"{marker_dir}/{MARK}"
    return [
        f"$(touch {m}-1)",
        f"`touch {m}-2`",
        f"x; touch {m}-3",
        f"x' ; touch {m}-4 ; '",
        f'x" ; touch {m}-5 ; "',
        f"x\ntouch {m}-6",
        f"x && touch {m}-7 #",
        f"${{IFS}}touch${{IFS}}{m}-8",
        f"x | touch {m}-9",
        f"x\r\ntouch {m}-10\n#SBATCH --wrap='touch {m}-11'",
        f"--wrap=touch {m}-12",
        "x\\",
        "*",
        "$HOME ~ ${PATH} %s {} \"'\" \\n \\\\",
    ]


def pwned(*dirs: Path) -> list[Path]:
    found = []
    for d in dirs:
        if d.exists():
            found += [p for p in d.rglob(f"{MARK}*")]
    return found


RECORDER = r"""#!/bin/bash
out="$SHIM_OUT/${0##*/}"
mkdir -p "$out"
printf '%s\0' "$@" > "$out/argv"
pwd > "$out/cwd"
env -0 > "$out/env"
exit "${SHIM_RC:-0}"
"""
SCONTROL = r"""#!/bin/bash
if [[ $1 == show && $2 == hostnames ]]; then printf 'node-a\nnode-b\n'; exit 0; fi
exit 1
"""


def shims(tmp: Path) -> tuple[Path, Path]:
    """A PATH directory with recording fakes of python3, srun, torchrun, sbatch and scontrol."""
    bin_dir, out = tmp / "shim-bin", tmp / "shim-out"
    bin_dir.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    for name in ("python3", "python", "srun", "torchrun", "sbatch"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    return bin_dir, out


def recorded(out: Path, program: str) -> dict:
    d = out / program
    if not d.is_dir():
        return {}
    env = {}
    for item in (d / "env").read_bytes().split(b"\0"):
        if item:
            name, _, value = item.decode(errors="replace").partition("=")
            env[name] = value
    return {"argv": [a.decode() for a in (d / "argv").read_bytes().split(b"\0")[:-1]],
            "cwd": (d / "cwd").read_text().rstrip("\n"), "env": env}


def run_script(script: Path, bin_dir: Path, cwd: Path, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(cwd),
           "SHIM_OUT": str(bin_dir.parent / "shim-out"), "LC_ALL": "C.UTF-8"}
    env.update(extra_env or {})
    return subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def bash_n(path: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"bash -n {path}: {proc.stderr}"


def recipe_with(extra: dict, base: str = TINY) -> str:
    data = yaml.safe_load(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def sbatch_lines(script: str) -> list[str]:
    """The #SBATCH lines sbatch reads (it stops at the first command)."""
    out = []
    for line in script.split("\n"):
        if line.startswith("#SBATCH"):
            out.append(line)
        elif line.strip() and not line.startswith("#"):
            break
    return out


def non_comment_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip() and not line.lstrip().startswith("#")]


def tree(path: Path) -> dict[str, bytes]:
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def compile_here(root: Path, rid: str, overrides=(), strict: bool = False) -> dict[str, str]:
    """`moeforge compile RID` for the sandbox checkout `root`, in this process (cli.cmd_compile's
    steps: load, resolve, plan, render, write build/<rid>/ atomically). CompileError propagates."""
    from moeforge.compiler.targets import emit
    from moeforge.compiler.driver import load, resolve
    from moeforge.compiler.targets.plan import build

    resolved = resolve(load(rid, list(overrides), root / "recipes"), strict)
    plan = build(resolved)
    build_dir = f"build/{resolved.composed.recipe_id}"
    files = emit.render(plan, resolved.composed.data, build_dir)
    emit.write_atomically(root / build_dir, files)
    return files
