"""plan-layout wall time per catalogue model, platform and GPU count (issue 15: < 10 s each).

    PYTHONPATH=. .venv/bin/python bench/plan_layout_bench.py [--quick] [--gpus 16,64,256] [--json FILE]

Each catalogue model (recipes/models/*.yaml; not tiny-moe: its cpu platform has no performance block) on each platform it
has a catalogue recipe for, at 16, 64 and 256 GPUs: one in-process `plan-layout` search (what the
CLI runs, after imports), with the candidates estimated (considered), those within memory (kept),
the pipeline compiles spent confirming, and PASS/FAIL against the target.  A benchmark, not a test:
it prints rows and exits 0 either way.  --quick: the h100 platform only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 10.0   # issue 15: "the whole catalogue model set plans in under 10 s each on this machine"


def combos(quick: bool) -> list[tuple[str, str]]:
    out = []
    for model in sorted(p.stem for p in (ROOT / "recipes" / "models").glob("*.yaml")):
        platforms = sorted({_platform(p) for p in (ROOT / "recipes" / model).glob("*.yaml")} - {None})
        out += [(model, p) for p in platforms if p != "cpu" and (not quick or p == "h100")]
    return out


def _platform(path: Path) -> str | None:
    import yaml

    return (yaml.safe_load(path.read_text()) or {}).get("platform")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="h100 only")
    ap.add_argument("--gpus", default="16,64,256", help="comma-separated GPU counts (default 16,64,256)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    from moeforge.compiler.planner import search

    counts = [int(g) for g in args.gpus.split(",")]
    rows = []
    print(f"plan-layout bench: {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}; target < {TARGET_S:g} s each")
    print(f"{'model':<20} {'platform':<12} {'gpus':>5} {'wall s':>7} {'considered':>10} {'kept':>6} "
          f"{'compiles':>8} {'ranked':>6}  verdict  best")
    for model, platform in combos(args.quick):
        for gpus in counts:
            t0 = time.perf_counter()
            try:
                s = search.setting(model, platform, gpus)
                r = search.search(s, top=10)
                wall = time.perf_counter() - t0
                best = (f"{r.ranked[0].cand.describe()} {r.ranked[0].step_s:.2f} s" if r.ranked else "none feasible")
                row = {"model": model, "platform": platform, "gpus": gpus, "wall_s": round(wall, 3),
                       "considered": r.considered, "kept": r.kept, "compiles": r.compiles, "ranked": len(r.ranked),
                       "best": best}
            except search.PlannerError as exc:
                wall = time.perf_counter() - t0
                row = {"model": model, "platform": platform, "gpus": gpus, "wall_s": round(wall, 3),
                       "considered": 0, "kept": 0, "compiles": 0, "ranked": 0, "best": f"error: {exc}"}
            rows.append(row)
            verdict = "PASS" if row["wall_s"] < TARGET_S else "FAIL"
            print(f"{model:<20} {platform:<12} {gpus:>5} {row['wall_s']:>7.2f} {row['considered']:>10} "
                  f"{row['kept']:>6} {row['compiles']:>8} {row['ranked']:>6}  {verdict:<7}  {row['best'][:60]}",
                  flush=True)
    worst = max(rows, key=lambda r: r["wall_s"])
    print(f"worst: {worst['model']} {worst['platform']} x{worst['gpus']} {worst['wall_s']:.2f} s; "
          f"{sum(r['wall_s'] < TARGET_S for r in rows)}/{len(rows)} under {TARGET_S:g} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
