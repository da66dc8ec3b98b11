"""How long `make test` takes, and where the time goes: the suite's wall time and its 15 slowest tests.

Why a bench and not a test: CI's budget (20 minutes quiet on 2 cores) is a speed goal, and speed goals are
measured, never asserted. This runs the README's test command itself (`make test`: the same workers,
grouping and flags), prints the wall time, the counts pytest reports and the 15 slowest tests, and with
--update-readme writes them between README.md's `<!-- suite:begin -->` and `<!-- suite:end -->` with the
machine's load, since a figure from a loaded machine is not comparable. It always exits 0.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- suite:begin -->", "<!-- suite:end -->"
DURATION = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(\S+)")
SUMMARY = re.compile(r"^=* ?(\d+ (?:passed|failed|skipped|deselected|xfailed|error).*) in [\d.]+s")


def run(make: str) -> tuple[float, str, int, float]:
    """The suite's wall time, its output, its exit code and the load average when it started."""
    load = os.getloadavg()[0]
    start = time.monotonic()
    proc = subprocess.run([make, "-s", "test"], cwd=ROOT, capture_output=True, text=True)
    return time.monotonic() - start, proc.stdout + proc.stderr, proc.returncode, load


def slowest(output: str, n: int = 15) -> list[tuple[float, str, str]]:
    rows = [(float(m[1]), m[2], m[3]) for m in map(DURATION.match, output.splitlines()) if m]
    return sorted(rows, reverse=True)[:n]


def table(wall: float, output: str, rc: int, load: float) -> str:
    # make test runs pytest twice (the parallel workers, then the serial tests): every closing line counts
    summary = " + ".join(m[1] for m in map(SUMMARY.match, output.splitlines()) if m) or "no summary"
    lines = [f"`make test`: **{wall / 60:.1f} min** wall, exit {rc} ({summary.strip('= ')}); "
             f"{os.cpu_count()} CPUs, load {load:.1f} at the start.", "",
             "| seconds | phase | slowest tests |", "|---:|---|---|"]
    lines += [f"| {s:.1f} | {phase} | `{nodeid}` |" for s, phase, nodeid in slowest(output)]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--update-readme", action="store_true", help="write the table into README.md")
    p.add_argument("--make", default="make", help="the make to run (default: make)")
    args = p.parse_args()
    wall, output, rc, load = run(args.make)
    text = table(wall, output, rc, load)
    print(text)
    if rc != 0:  # a suite that stopped early did not take the suite's time: say why, and keep the README's figure
        failed = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR", "E "))][-60:]
        print("\n".join(failed) or output[-3000:])
        print("make test failed: README.md not updated", file=sys.stderr)
        return 0
    if args.update_readme:
        readme = ROOT / "README.md"
        body = readme.read_text()
        if BEGIN in body and END in body:
            head, rest = body.split(BEGIN, 1)
            tmp = readme.with_suffix(".md.tmp")
            tmp.write_text(head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1])
            os.replace(tmp, readme)
        else:
            print(f"README.md has no {BEGIN} ... {END} section; not updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
