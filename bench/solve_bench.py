"""Solver latency per recipe and lint-config throughput (a benchmark, not a timed test).

    PYTHONPATH=. .venv/bin/python bench/solve_bench.py [--repeat 20] [--lint-seconds 3] [RECIPE ...]

For every recipe under recipes/ (platforms/ and models/ excluded) or the ones named: the time of
load() (compose + migrate + schema validation) once, then resolve() (z3 solve, provenance,
warnings) repeated --repeat times: median and p95. A recipe that does not compile is timed until
its CompileError (status "errors: N"). Then lint-config throughput: the tuned Megatron-Bridge
configurations of tests/lint/data/bridge_perf_configs.yaml plus single-field variations of them,
linted from already-parsed mappings and from YAML text, in configurations per second.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from moeforge.compiler.commands import check  # noqa: E402
from moeforge.compiler.recipe.compose import RECIPES  # noqa: E402
from moeforge.compiler.diagnostics import CompileError  # noqa: E402
from moeforge.compiler.lint.config_lint import lint_mapping, lint_text  # noqa: E402
from moeforge.compiler.driver import load, resolve  # noqa: E402
from moeforge.compiler.rules import CATALOGUE, PREFERENCES, RULES  # noqa: E402

PERF = ROOT / "tests" / "lint" / "data" / "bridge_perf_configs.yaml"
VARIATIONS = [
    {"overlap_moe_expert_parallel_comm": True}, {"delay_wgrad_compute": True}, {"pipeline_model_parallel_size": 2},
    {"cuda_graph_impl": "transformer_engine"}, {"recompute_granularity": "full"}, {"fp16": True},
    {"moe_token_dispatcher_type": "allgather"}, {"tp_comm_overlap": True}, {"world_size": 100},
    {"moe_flex_dispatcher_backend": "deepep", "moe_token_dispatcher_type": "flex"},
]


def recipe_ids(root: Path = RECIPES) -> list[str]:
    return check.recipe_ids(root)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, round(q * (len(values) - 1))))
    return values[k]


def bench_recipes(ids: list[str], repeat: int) -> list[tuple]:
    rows = []
    for rid in ids:
        t0 = time.perf_counter()
        try:
            composed = load(rid)
        except CompileError as exc:
            rows.append((rid, (time.perf_counter() - t0) * 1e3, None, None, f"load errors: {len(exc.diagnostics)}"))
            continue
        load_ms = (time.perf_counter() - t0) * 1e3
        times, status = [], "ok"
        for _ in range(repeat):
            t = time.perf_counter()
            try:
                r = resolve(composed)
                status = f"ok ({len(r.diagnostics)} notes)"
            except CompileError as exc:
                status = f"errors: {len(exc.diagnostics)}"
            times.append((time.perf_counter() - t) * 1e3)
        rows.append((rid, load_ms, statistics.median(times), pct(times, 0.95), status))
    return rows


def lint_corpus() -> tuple[list[dict], list[str]]:
    rows = [r["config"] for r in yaml.safe_load(PERF.read_text())["rows"]]
    mappings = list(rows)
    for row in rows:
        for v in VARIATIONS:
            mappings.append({**row, **v})
    texts = [yaml.safe_dump(m, sort_keys=False) for m in mappings]
    return mappings, texts


def throughput(fn, items, seconds: float) -> tuple[float, int]:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for item in items:
            fn(item)
        n += len(items)
    return n / (time.perf_counter() - start), n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recipes", nargs="*", help="recipe ids (default: every recipe under recipes/)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--lint-seconds", type=float, default=3.0)
    args = ap.parse_args(argv)

    ids = args.recipes or recipe_ids()
    print(f"catalogue: {len(CATALOGUE)} rules ({len(RULES)} for recipes), {len(PREFERENCES)} preferences")
    print(f"\nsolve latency, {args.repeat} resolve() runs per recipe (ms)")
    width = max([len(i) for i in ids] + [6])
    print(f"{'recipe':<{width}}  {'load':>7}  {'median':>7}  {'p95':>7}  status")
    rows = bench_recipes(ids, args.repeat)
    for rid, load_ms, med, p95, status in rows:
        med_s = f"{med:7.1f}" if med is not None else "      -"
        p95_s = f"{p95:7.1f}" if p95 is not None else "      -"
        print(f"{rid:<{width}}  {load_ms:7.1f}  {med_s}  {p95_s}  {status}")
    solved = [r[2] for r in rows if r[2] is not None]
    if solved:
        print(f"{'all':<{width}}  {'':>7}  {statistics.median(solved):7.1f}  {max(r[3] for r in rows if r[3]):7.1f}"
              f"  ({len(solved)} recipes)")

    mappings, texts = lint_corpus()
    print(f"\nlint-config throughput ({len(mappings)} configurations: {len(mappings) // (len(VARIATIONS) + 1)} tuned "
          f"Megatron-Bridge rows x {len(VARIATIONS) + 1} variants)")
    rate, n = throughput(lint_mapping, mappings, args.lint_seconds)
    print(f"  parsed mappings : {rate:9.0f} configs/s  ({n} linted, {1e3 / rate:.2f} ms each)")
    rate, n = throughput(lint_text, texts, args.lint_seconds)
    print(f"  YAML text       : {rate:9.0f} configs/s  ({n} linted, {1e3 / rate:.2f} ms each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
