"""How many real launches `moeforge import` reads, and how many of those compile as imported.

    PYTHONPATH=. .venv/bin/python bench/import_corpus.py DIR [--platform h100] [--json OUT] [-v]

DIR holds launches nobody on this project wrote (for example Megatron-LM's own MoE functional-test
model_config.yaml files and its examples/**/*.sh with --num-experts, collected outside the repository).
Each file is imported into a fresh project (copied built-in platforms; `--platform` when the launch names
no GPU), then the imported recipe is compiled; `lint-config` reads it too. Outcomes per file: `refused`
(import exit 2, with its one line), `imported` (compile refused it: its first error), `compiled`; a
traceback anywhere is `crash`. Always exits 0: a measurement, not a test.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moeforge.compiler", *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def _first(text: str, word: str = "error") -> str:
    lines = [ln for ln in text.splitlines() if word in ln] or text.splitlines() or [""]
    return lines[0][:240]


def one(path: Path, platform: str, work: Path) -> dict:
    project = work / path.stem
    (project / "recipes" / "platforms").mkdir(parents=True)
    (project / "moeforge.toml").write_text("[moeforge]\nversion = 1\n")
    for p in (ROOT / "recipes" / "platforms").glob("*.yaml"):
        (project / "recipes" / "platforms" / p.name).write_text(p.read_text())
    out = {"file": str(path), "name": path.name}
    proc = _run("import", str(path.resolve()), cwd=project)
    if proc.returncode == 2 and "cannot tell the platform" in proc.stderr:
        proc = _run("import", str(path.resolve()), "--platform", platform, cwd=project)
    lint = _run("lint-config", str(path.resolve()), cwd=project)
    out["lint"] = {0: "clean", 1: "findings", 2: "unusable"}.get(lint.returncode, f"exit {lint.returncode}")
    out["lint_line"] = _first(lint.stderr) if lint.returncode == 2 else ""
    if "Traceback" in proc.stderr + lint.stderr:
        out.update(outcome="crash", why=_first(proc.stderr + lint.stderr, "Error"))
        return out
    if proc.returncode != 0:
        out.update(outcome="refused", why=_first(proc.stderr))
        return out
    out["notes"] = [ln for ln in proc.stdout.splitlines() if ln.startswith("note:")]
    out["not_imported"] = [ln for ln in proc.stdout.splitlines() if ln.startswith("not imported:")]
    rid = next((ln.split("moeforge compile ", 1)[1].split()[0] for ln in proc.stdout.splitlines()
                if ln.startswith("next: moeforge compile")), None)
    comp = _run("compile", rid, "--out", str(project / "build"), cwd=project)
    if "Traceback" in comp.stderr:
        out.update(outcome="crash", why=_first(comp.stderr, "Error"))
    elif comp.returncode != 0:
        out.update(outcome="imported", why=_first(comp.stderr + comp.stdout))
    else:
        out.update(outcome="compiled", why="")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--platform", default="h100", help="when the launch names no GPU (default h100)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per file")
    args = parser.parse_args(argv)
    files = sorted(p for p in args.dir.rglob("*") if p.is_file() and p.suffix in (".sh", ".yaml", ".yml", ".args"))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(files):
            results.append(one(path, args.platform, Path(tmp) / str(i)))
            if args.verbose:
                r = results[-1]
                print(f"{r['outcome']:9} lint={r['lint']:9} {path.relative_to(args.dir)}  {r['why']}", flush=True)
    counts = collections.Counter(r["outcome"] for r in results)
    imported = counts["imported"] + counts["compiled"]
    print(f"{len(results)} launches: {imported} import, {counts['compiled']} compile as imported, "
          f"{counts['refused']} refused at import, {counts['crash']} tracebacks; lint-config: "
          + ", ".join(f"{n} {k}" for k, n in sorted(collections.Counter(r["lint"] for r in results).items())))
    reasons = collections.Counter(r["why"].split(": ", 1)[-1][:120] for r in results if r["outcome"] != "compiled")
    for why, n in reasons.most_common(15):
        print(f"  {n:3}  {why}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
