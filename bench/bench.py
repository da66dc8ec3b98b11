"""moeforge benchmark: check / compile throughput, solver latency, lint-config throughput, CLI cold
start, and megatron-core's own TransformerConfig validation on the same configurations.

    PYTHONPATH=. .venv/bin/python bench/bench.py [--json FILE] [--repeat 20] [--cold-runs 5] [--quick]
                                                 [--update-readme]

A benchmark, not a test: it prints a table and PASS/FAIL against the targets, and exits 0 either
way (2 only when it cannot run at all). See bench/README.md for what each number means.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RECIPES = ROOT / "recipes"
PERF = ROOT / "tests" / "lint" / "data" / "bridge_perf_configs.yaml"
TINY = "recipes/tiny-moe/cpu.yaml"
PINNED = Path(__file__).resolve().parent / "tiny-moe-pinned.yaml"  # tiny-moe/cpu with every auto knob pinned
README = ROOT / "README.md"
README_BEGIN, README_END = "<!-- bench:begin -->", "<!-- bench:end -->"

TARGETS = {
    "catalogue_check_s": 1.0,        # whole catalogue checked in under 1 s wall (cold CLI)
    "cold_check_ms": 100.0,          # cold `moeforge check` of one recipe (fully pinned; with auto knobs) < 100 ms
    "cold_speedup": 40.0,            # cold check of one recipe >= 40x faster than cold megatron-core
    "solver_median_ms": 10.0,        # solver latency <= 10 ms median, for every recipe (the worst one's median)
    "matrix_s": 5.0,                 # `moeforge matrix` of the catalogue in under 5 s wall (cold CLI)
    "wide_recipe_s": 1.0,            # a 480 KB recipe of 40k top-level keys answered in under 1 s (cold CLI)
}
WIDE_KEYS = 40_000  # issue 42: composition was quadratic in the keys (1k keys 1.4 s, 4k keys 19 s, 40k: hours)


# ----------------------------------------------------------------------------- helpers

def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = max(0, min(len(values) - 1, round(q * (len(values) - 1))))
    return values[k]


def median(values):
    return statistics.median(values) if values else float("nan")


def machine() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {"nproc": cpus, "cpu_model": model, "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_1min": round(load, 2)}


def catalogue() -> list[str]:
    from moeforge.compiler.commands.check import recipe_ids

    return recipe_ids(RECIPES)


_CACHE = tempfile.mkdtemp(prefix="moeforge-bench-cache-")  # the cold runs' own validity and parse cache (removed at exit)


def run_cold(argv: list[str], runs: int, env_extra: dict | None = None, timeout: float = 300,
             cwd: Path = ROOT) -> dict:
    """Wall time of a fresh interpreter running argv (median, min, max over `runs`), after one run that is
    not counted: what a pre-commit hook or an editor sees from its second run on (bytecode compiled,
    schema acceptances and parsed YAML in the cache, files in the OS cache)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOEFORGE_CACHE_DIR": _CACHE, **(env_extra or {})}
    times, rc, tail = [], None, ""
    for i in range(runs + 1):
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        if i:
            times.append(time.perf_counter() - start)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-400:]
    return {"median_s": median(times), "min_s": min(times), "max_s": max(times), "runs": runs, "rc": rc,
            "tail": tail}


def compile_bytecode() -> None:
    """Write the compiler's bytecode (even under PYTHONDONTWRITEBYTECODE, which would otherwise make every
    cold run compile every module again, a cost no installed moeforge pays)."""
    import compileall

    compileall.compile_dir(str(ROOT / "compiler"), quiet=1)


def quiet(fn, *args, **kw):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        return fn(*args, **kw)


# ----------------------------------------------------------------------------- moeforge

def bench_check(ids: list[str], runs: int, cold_runs: int) -> dict:
    from moeforge.compiler.commands.check import check_paths

    quiet(check_paths, [str(RECIPES)], False, "json")  # warm: imports, schema validators
    warm = []
    for _ in range(runs):
        start = time.perf_counter()
        rc = quiet(check_paths, [str(RECIPES)], False, "json")
        warm.append(time.perf_counter() - start)
    cold = run_cold([sys.executable, "-m", "moeforge.compiler", "check", "recipes"], cold_runs)
    n = len(ids)
    return {"recipes": n, "rc": rc,
            "warm_median_s": median(warm), "warm_recipes_per_s": n / median(warm),
            "cold_median_s": cold["median_s"], "cold_min_s": cold["min_s"], "cold_recipes_per_s": n / cold["median_s"],
            "cold_rc": cold["rc"]}


def bench_matrix(cold_runs: int) -> dict:
    """Cold `moeforge matrix` of the catalogue (every recipe on every platform), wall."""
    cold = run_cold([sys.executable, "-m", "moeforge.compiler", "matrix"], max(1, min(cold_runs, 3)))
    return {**cold, "cells": len(catalogue()) * len(list((RECIPES / "platforms").glob("*.yaml")))}


def bench_compile(ids: list[str], runs: int) -> dict:
    """`moeforge compile` of every recipe in this process (the command's own write_build), rounds timed."""
    from types import SimpleNamespace

    from moeforge.compiler.commands.compile import write_build
    from moeforge.compiler.diagnostics import CompileError

    out = Path(tempfile.mkdtemp(prefix="moeforge-bench-"))
    try:
        walls, ok, failed = [], 0, []
        for i in range(runs + 1):  # the first round warms up and is not counted
            start = time.perf_counter()
            ok, failed = 0, []
            for rid in ids:
                try:
                    write_build(SimpleNamespace(recipe=rid, overrides=[], strict=False, out=str(out)))
                    ok += 1
                except CompileError:
                    failed.append(rid)
            if i:
                walls.append(time.perf_counter() - start)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    wall = median(walls)
    return {"recipes": len(ids), "compiled": ok, "refused": failed, "median_s": wall,
            "recipes_per_s": len(ids) / wall}


def bench_solver(ids: list[str], repeat: int) -> dict:
    from moeforge.compiler import driver
    from moeforge.compiler.diagnostics import CompileError

    rows, every = {}, []
    for rid in ids:
        times, status = [], "ok"
        for _ in range(repeat + 1):
            start = time.perf_counter()
            try:
                driver.compile(rid, plan=False)
                status = "ok"
            except CompileError as exc:
                status = f"refused ({len(exc.diagnostics)} errors)"
            times.append((time.perf_counter() - start) * 1e3)
        times = times[1:]  # the first run of each recipe warms caches
        every += times
        rows[rid] = {"median_ms": median(times), "p95_ms": pct(times, 0.95), "status": status}
    medians = [r["median_ms"] for r in rows.values()]
    return {"repeat": repeat, "per_recipe": rows, "overall_median_ms": median(every),
            "overall_p95_ms": pct(every, 0.95), "worst_median_ms": max(medians), "worst_recipe":
            max(rows, key=lambda k: rows[k]["median_ms"])}


def plan_configs(ids: list[str]) -> list[dict]:
    """One plan per recipe that compiles: {id, transformer_config, platform} (lint and megatron input)."""
    from moeforge.compiler import driver
    from moeforge.compiler.diagnostics import CompileError

    out = []
    for rid in ids:
        try:
            plan = driver.compile(rid).plan
        except CompileError:
            continue
        out.append({"id": rid, "transformer_config": plan["transformer_config"], "platform": plan["platform"],
                    "layout": plan["layout"], "training": plan["training"], "ddp": plan["ddp_config"]})
    return out


def lint_mapping_from_plan(p: dict) -> dict:
    """A flat Megatron mapping (what lint-config reads) from a compiled plan."""
    from moeforge.compiler.lint.config_lint import known_names

    known = known_names()
    tc = {k: v for k, v in p["transformer_config"].items() if k in known and k not in ("params_dtype",
                                                                                          "pipeline_dtype")}
    plat = p["platform"]
    sw = plat["software"]
    tc.update({k: v for k, v in p["ddp"].items() if k in known})
    tc.update(world_size=p["layout"]["world_size"], micro_batch_size=p["training"]["micro_batch_size"],
              global_batch_size=p["training"]["global_batch_size"], seq_length=p["training"]["seq_length"],
              gpu=(None if not plat.get("gpu") else {"name": plat["gpu"]["name"],
                                                       "compute_capability": plat["gpu"]["compute_capability"]}),
              versions={"torch": sw["torch"], "transformer_engine": sw.get("transformer_engine"),
                        "megatron_core": sw["megatron_core"]})
    return tc


def bench_lint(plans: list[dict], seconds: float) -> dict:
    import yaml

    from moeforge.compiler.lint.config_lint import UnusableInput, lint_mapping

    corpus, sources = [], {}
    if PERF.exists():
        rows = [r["config"] for r in yaml.safe_load(PERF.read_text())["rows"]]
        corpus += rows
        sources["bridge_perf_configs"] = len(rows)
    from_plans = [lint_mapping_from_plan(p) for p in plans]
    corpus += from_plans
    sources["catalogue_plans"] = len(from_plans)
    usable = []
    for cfg in corpus:
        try:
            lint_mapping(cfg)
            usable.append(cfg)
        except UnusableInput:
            pass
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or n == 0:
        for cfg in usable:
            lint_mapping(cfg)
        n += len(usable)
    elapsed = time.perf_counter() - start
    return {"configs": len(usable), "unusable": len(corpus) - len(usable), "sources": sources, "linted": n,
            "configs_per_s": n / elapsed, "ms_per_config": 1e3 * elapsed / n}


# ----------------------------------------------------------------------------- megatron-core

MEGATRON_WORKER = textwrap.dedent(r'''
    import dataclasses, json, statistics, sys, time, warnings
    t0 = time.perf_counter()
    import torch
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    import_s = time.perf_counter() - t0
    DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

    def kwargs_for(tc):
        cls = MLATransformerConfig if tc.get("multi_latent_attention") else TransformerConfig
        known = {f.name for f in dataclasses.fields(cls)}
        kw, dropped = {}, []
        for k, v in tc.items():
            if k in ("params_dtype", "pipeline_dtype", "autocast_dtype") and isinstance(v, str):
                v = DTYPES[v]
            if k == "activation_func" and isinstance(v, str):
                import torch.nn.functional as F
                v = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu}.get(v, F.gelu)
            if k in known:
                kw[k] = v
            else:
                dropped.append(k)
        return cls, kw, dropped

    try:
        import transformer_engine  # noqa: F401
        HAVE_TE = True
    except Exception:
        HAVE_TE = False

    def validate(tc):
        cls, kw, dropped = kwargs_for(tc)
        if not HAVE_TE and kw.get("moe_permute_fusion"):
            # without Transformer Engine, __post_init__ stops at its first line (fused_permute import):
            # validate the rest of the configuration instead of timing that ImportError
            kw["moe_permute_fusion"] = False
            dropped = dropped + ["moe_permute_fusion (no TE here)"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                cls(**kw)
                return "accepted", dropped
            except Exception as exc:  # megatron-core rejects it (or lacks TE): still timed
                return f"{type(exc).__name__}: {str(exc)[:120]}", dropped

    mode, path = sys.argv[1], sys.argv[2]
    configs = json.load(open(path))
    if mode == "cold":  # import + one validation, the way a launcher would find out
        verdict, _ = validate(configs[0]["transformer_config"])
        print(json.dumps({"import_s": import_s, "verdict": verdict, "total_s": time.perf_counter() - t0}))
    else:
        out = {}
        for c in configs:
            validate(c["transformer_config"])  # warm-up
            times = []
            for _ in range(int(sys.argv[3])):
                s = time.perf_counter()
                verdict, dropped = validate(c["transformer_config"])
                times.append((time.perf_counter() - s) * 1e3)
            out[c["id"]] = {"median_ms": statistics.median(times), "verdict": verdict, "dropped": dropped}
        print(json.dumps({"import_s": import_s, "per_config": out, "have_te": HAVE_TE}))
''')


def bench_megatron(plans: list[dict], cold_runs: int, repeat: int) -> dict:
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                            "print(bool(u.find_spec('megatron.core') and u.find_spec('torch')))"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        return {"available": False}
    tmp = Path(tempfile.mkdtemp(prefix="moeforge-bench-mcore-"))
    try:
        (tmp / "worker.py").write_text(MEGATRON_WORKER)
        tiny = [p for p in plans if p["id"] == "tiny-moe/cpu"] or plans[:1]
        (tmp / "tiny.json").write_text(json.dumps(tiny))
        (tmp / "all.json").write_text(json.dumps(plans))
        cold_times, cold_info = [], {}
        for _ in range(cold_runs):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, str(tmp / "worker.py"), "cold", str(tmp / "tiny.json")],
                                  capture_output=True, text=True, timeout=600, cwd=tmp)
            cold_times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                return {"available": False, "error": proc.stderr[-600:]}
            cold_info = json.loads(proc.stdout.strip().splitlines()[-1])
        proc = subprocess.run([sys.executable, str(tmp / "worker.py"), "warm", str(tmp / "all.json"), str(repeat)],
                              capture_output=True, text=True, timeout=600, cwd=tmp)
        warm = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"per_config": {}}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per = warm["per_config"]
    return {"available": True, "config": tiny[0]["id"], "cold_median_s": median(cold_times),
            "cold_min_s": min(cold_times), "cold_import_s": cold_info.get("import_s"),
            "cold_verdict": cold_info.get("verdict"),
            "warm_median_ms": median([v["median_ms"] for v in per.values()]),
            "warm_per_config": per,
            "accepted": sum(1 for v in per.values() if v["verdict"] == "accepted"), "configs": len(per),
            "have_te": warm.get("have_te")}


def bench_moeforge_cold_one(cold_runs: int) -> dict:
    """Cold `moeforge check` of tiny-moe/cpu (auto knobs: the solver runs, moeforge.compiler.solver.finite without z3)."""
    return run_cold([sys.executable, "-m", "moeforge.compiler", "check", TINY], cold_runs)


def bench_moeforge_cold_pinned(cold_runs: int) -> dict:
    """Cold `moeforge check` of tiny-moe/cpu with every auto knob pinned (bench/tiny-moe-pinned.yaml), in a
    temporary copy of the project (nothing is left to solve: z3 is never imported)."""
    tmp = Path(tempfile.mkdtemp(prefix="moeforge-bench-pinned-"))
    try:
        shutil.copytree(RECIPES, tmp / "recipes")
        shutil.copy(PINNED, tmp / "recipes" / "tiny-moe" / "pinned.yaml")
        return run_cold([sys.executable, "-m", "moeforge.compiler", "check", "recipes/tiny-moe/pinned.yaml"], cold_runs,
                        cwd=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_wide_recipe(cold_runs: int) -> dict:
    """Cold `moeforge check` of tiny-moe/cpu plus WIDE_KEYS unknown top-level keys (a 480 KB recipe), in a
    temporary copy of the project: refused (exit 1) with the first unknown keys and one line for the rest."""
    tmp = Path(tempfile.mkdtemp(prefix="moeforge-bench-wide-"))
    try:
        shutil.copytree(RECIPES, tmp / "recipes")
        text = (ROOT / TINY).read_text() + "".join(f"k{i:05d}: {i}\n" for i in range(WIDE_KEYS))
        (tmp / "recipes" / "tiny-moe" / "wide.yaml").write_text(text)
        out = run_cold([sys.executable, "-m", "moeforge.compiler", "check", "recipes/tiny-moe/wide.yaml"], cold_runs, cwd=tmp)
        return {**out, "keys": WIDE_KEYS, "kib": len(text) // 1024}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_moeforge_warm_one(repeat: int) -> float:
    from moeforge.compiler.commands.check import check_paths

    quiet(check_paths, [str(ROOT / TINY)], False, "json")
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        quiet(check_paths, [str(ROOT / TINY)], False, "json")
        times.append((time.perf_counter() - start) * 1e3)
    return median(times)


# ----------------------------------------------------------------------------- report

def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(r: dict) -> str:
    m = r["machine"]
    head = [f"moeforge bench  ({m['nproc']} CPUs: {m['cpu_model']}; Python {m['python']}; "
            f"load avg {m['loadavg_1min']}; {m['platform']})", ""]
    c, k, s, lint = r["check"], r["compile"], r["solver"], r["lint"]
    one, mc = r["cold_one"], r["megatron"]
    rows = [
        ("check catalogue, cold CLI (wall)", f"{c['cold_median_s']:.3f} s",
         f"{c['recipes']} recipes, {c['cold_recipes_per_s']:.1f} recipes/s (min {c['cold_min_s']:.3f} s)"),
        ("check catalogue, in process (warm)", f"{c['warm_median_s']:.3f} s",
         f"{c['warm_recipes_per_s']:.1f} recipes/s"),
        ("compile catalogue, in process (warm)", f"{k['median_s']:.3f} s",
         f"{k['recipes_per_s']:.1f} recipes/s ({k['compiled']} compiled, {len(k['refused'])} refused)"),
        ("solver latency driver.compile(plan=False), median", f"{s['overall_median_ms']:.1f} ms",
         f"p95 {s['overall_p95_ms']:.1f} ms; {s['repeat']} runs x {len(s['per_recipe'])} recipes"),
        ("solver latency, worst recipe's median", f"{s['worst_median_ms']:.1f} ms", s["worst_recipe"]),
        ("lint-config throughput", f"{lint['configs_per_s']:.0f} cfg/s",
         f"{lint['ms_per_config']:.2f} ms each; {lint['configs']} configs {lint['sources']}"),
        ("cold CLI: check " + TINY, f"{one['median_s']:.3f} s", f"median of {one['runs']} (min {one['min_s']:.3f} s)"),
        ("cold CLI: check of it fully pinned", f"{r['cold_pinned']['median_s']:.3f} s",
         f"median of {r['cold_pinned']['runs']} (min {r['cold_pinned']['min_s']:.3f} s; no auto knob: no z3)"),
        ("warm check of one recipe (in process)", f"{r['warm_one_ms']:.1f} ms", ""),
        ("matrix of the catalogue, cold CLI (wall)", f"{r['matrix']['median_s']:.3f} s",
         f"{r['matrix']['cells']} cells, median of {r['matrix']['runs']} (min {r['matrix']['min_s']:.3f} s)"),
        (f"check of a {r['wide']['keys']:,}-key recipe, cold CLI", f"{r['wide']['median_s']:.3f} s",
         f"{r['wide']['kib']} KiB, exit {r['wide']['rc']} (refused), median of {r['wide']['runs']}"),
    ]
    if mc.get("available"):
        rows += [
            ("megatron-core cold: import + TransformerConfig", f"{mc['cold_median_s']:.3f} s",
             f"import alone {mc['cold_import_s']:.3f} s; {mc['config']}: {mc['cold_verdict']}"),
            ("megatron-core warm TransformerConfig(), median", f"{mc['warm_median_ms']:.2f} ms",
             f"{mc['configs']} catalogue plans, {mc['accepted']} accepted"
             + ("" if mc.get("have_te") else " (moe_permute_fusion off: no TE here)")),
            ("ratio cold moeforge check / cold megatron", f"{r['ratio']:.3f}",
             f"megatron-core takes {1 / r['ratio']:.1f}x as long"),
        ]
    else:
        rows.append(("megatron-core", "n/a", f"not installed {mc.get('error', '')[:60]}"))
    w = max(len(label) for label, _, _ in rows)
    lines = head + [f"{'measure':<{w}}  {'value':>12}  detail", "-" * (w + 60)]
    lines += [f"{label:<{w}}  {value:>12}  {detail}" for label, value, detail in rows]
    lines += ["", "targets"]
    lines += [f"  {t['verdict']}  {t['name']}: {t['measured']} (target {t['target']})" for t in r["targets"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="moeforge benchmark (prints a table; always exits 0)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--repeat", type=int, default=20, help="solver runs per recipe (default 20)")
    ap.add_argument("--cold-runs", type=int, default=5, help="runs of each cold subprocess (default 5)")
    ap.add_argument("--lint-seconds", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    ap.add_argument("--matrix-only", action="store_true", help="only time `moeforge matrix` of the catalogue")
    ap.add_argument("--wide-only", action="store_true", help=f"only time `moeforge check` of a {WIDE_KEYS}-key recipe")
    ap.add_argument("--update-readme", action="store_true",
                    help=f"rewrite README.md's performance table (between {README_BEGIN} and {README_END}) "
                         "from this run's numbers")
    args = ap.parse_args(argv)
    try:
        return _main(args)
    finally:
        shutil.rmtree(_CACHE, ignore_errors=True)


def _one_line(what: str, m: dict, target: str) -> str:
    """--matrix-only's and --wide-only's answer: one cold CLI measure against its target."""
    return (f"{what}, cold CLI: median {m['median_s']:.3f} s, min {m['min_s']:.3f} s, max {m['max_s']:.3f} s over "
            f"{m['runs']} runs (rc {m['rc']}; target < {TARGETS[target]} s; load avg {machine()['loadavg_1min']})")


def _main(args) -> int:
    if args.matrix_only:
        m = bench_matrix(args.cold_runs)
        print(_one_line(f"moeforge matrix (catalogue, {m['cells']} cells)", m, "matrix_s"))
        return 0
    if args.wide_only:
        w = bench_wide_recipe(args.cold_runs)
        print(_one_line(f"moeforge check of a {w['keys']}-key recipe ({w['kib']} KiB)", w, "wide_recipe_s"))
        return 0
    if args.quick:
        args.repeat, args.cold_runs, args.lint_seconds = 3, 2, 0.5

    started = time.perf_counter()
    ids = catalogue()
    if not ids:
        print("no recipes under recipes/", file=sys.stderr)
        return 2
    r: dict = {"machine": machine(), "catalogue": ids}
    compile_bytecode()
    r["cold_one"] = bench_moeforge_cold_one(args.cold_runs)
    r["cold_pinned"] = bench_moeforge_cold_pinned(args.cold_runs)
    r["check"] = bench_check(ids, max(3, args.repeat // 4), args.cold_runs)
    r["compile"] = bench_compile(ids, max(2, args.repeat // 10))
    r["solver"] = bench_solver(ids, args.repeat)
    plans = plan_configs(ids)
    r["lint"] = bench_lint(plans, args.lint_seconds)
    r["warm_one_ms"] = bench_moeforge_warm_one(max(5, args.repeat))
    r["matrix"] = bench_matrix(args.cold_runs)
    r["wide"] = bench_wide_recipe(args.cold_runs)
    r["megatron"] = bench_megatron(plans, args.cold_runs, max(5, args.repeat))
    mc = r["megatron"]
    r["ratio"] = r["cold_one"]["median_s"] / mc["cold_median_s"] if mc.get("available") else None
    targets = [
        {"name": "whole catalogue checked in under 1 s wall (cold `moeforge check recipes`)",
         "measured": f"{r['check']['cold_median_s']:.3f} s", "target": f"< {TARGETS['catalogue_check_s']} s",
         "verdict": verdict(r["check"]["cold_median_s"] < TARGETS["catalogue_check_s"])},
        {"name": "cold `moeforge check` of one fully pinned recipe in under 100 ms",
         "measured": f"{1e3 * r['cold_pinned']['median_s']:.0f} ms", "target": f"< {TARGETS['cold_check_ms']:.0f} ms",
         "verdict": verdict(1e3 * r["cold_pinned"]["median_s"] < TARGETS["cold_check_ms"])},
        {"name": "cold `moeforge check` of one recipe with auto knobs (tiny-moe/cpu) in under 100 ms",
         "measured": f"{1e3 * r['cold_one']['median_s']:.0f} ms", "target": f"< {TARGETS['cold_check_ms']:.0f} ms",
         "verdict": verdict(1e3 * r["cold_one"]["median_s"] < TARGETS["cold_check_ms"])},
        {"name": "cold check of one recipe >= 40x faster than cold megatron-core import + validation",
         "measured": f"{1 / r['ratio']:.1f}x" if r["ratio"] else "n/a", "target": f">= {TARGETS['cold_speedup']:.0f}x",
         "verdict": verdict(bool(r["ratio"]) and 1 / r["ratio"] >= TARGETS["cold_speedup"]) if r["ratio"] else "SKIP"},
        {"name": "solver latency <= 10 ms median per recipe (worst recipe's median)",
         "measured": f"{r['solver']['worst_median_ms']:.1f} ms ({r['solver']['worst_recipe']})",
         "target": f"<= {TARGETS['solver_median_ms']} ms",
         "verdict": verdict(r["solver"]["worst_median_ms"] <= TARGETS["solver_median_ms"])},
        {"name": "matrix of the catalogue in under 5 s wall (cold `moeforge matrix`)",
         "measured": f"{r['matrix']['median_s']:.3f} s", "target": f"< {TARGETS['matrix_s']} s",
         "verdict": verdict(r["matrix"]["median_s"] < TARGETS["matrix_s"])},
        {"name": f"a recipe of {WIDE_KEYS} top-level keys answered in under 1 s wall (cold `moeforge check`)",
         "measured": f"{r['wide']['median_s']:.3f} s", "target": f"< {TARGETS['wide_recipe_s']} s",
         "verdict": verdict(r["wide"]["median_s"] < TARGETS["wide_recipe_s"] and r["wide"]["rc"] == 1)},
    ]
    r["targets"] = targets
    r["bench_seconds"] = time.perf_counter() - started
    print(report(r))
    print(f"\n(bench took {r['bench_seconds']:.0f} s)")
    print("\nsolver latency per recipe (ms): median / p95 / status")
    width = max(len(i) for i in ids)
    for rid, row in r["solver"]["per_recipe"].items():
        print(f"  {rid:<{width}}  {row['median_ms']:7.1f}  {row['p95_ms']:7.1f}  {row['status']}")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2, default=str) + "\n")
        print(f"\nresults written to {args.json}")
    if args.update_readme:
        print(update_readme(r))
    return 0


def readme_table(r: dict) -> str:
    """README.md's performance section body, from one run's numbers (nothing in it is typed by hand)."""
    m, c, k, s, lint = r["machine"], r["check"], r["compile"], r["solver"], r["lint"]
    one, pinned, mat, mc = r["cold_one"], r["cold_pinned"], r["matrix"], r["megatron"]
    target = {t["name"]: f"{t['target']}: {'met' if t['verdict'] == 'PASS' else t['verdict'].lower()}"
              for t in r["targets"]}
    by = {key: next(v for n, v in target.items() if key in n) for key in
          ("whole catalogue", "fully pinned", "auto knobs", "40x", "solver", "matrix", "top-level keys")}
    versions = []
    for pkg in ("torch", "megatron-core"):
        try:
            from importlib.metadata import version
            versions.append(f"{pkg} {version(pkg)}")
        except Exception:
            pass
    rows = [
        ("cold `moeforge check recipes` (the catalogue, %d recipes), wall" % c["recipes"],
         f"{c['cold_median_s']:.2f} s ({c['cold_recipes_per_s']:.0f} recipes/s)", by["whole catalogue"]),
        ("check / compile of the catalogue in process", f"{c['warm_recipes_per_s']:.0f} / {k['recipes_per_s']:.0f} "
         "recipes/s", ""),
        ("cold `moeforge check` of tiny-moe/cpu fully pinned (no z3)", f"{1e3 * pinned['median_s']:.0f} ms",
         by["fully pinned"]),
        ("cold `moeforge check recipes/tiny-moe/cpu.yaml` (auto knobs)", f"{1e3 * one['median_s']:.0f} ms",
         by["auto knobs"]),
        ("solver latency, `driver.compile(plan=False)`, median over recipes (p95)",
         f"{s['overall_median_ms']:.1f} ms ({s['overall_p95_ms']:.1f} ms)", ""),
        ("solver latency, the worst recipe's median", f"{s['worst_median_ms']:.1f} ms ({s['worst_recipe']})",
         by["solver"]),
        ("lint-config throughput", f"{lint['configs_per_s']:,.0f} configs/s ({lint['ms_per_config']:.2f} ms each)", ""),
        ("cold `moeforge matrix` of the catalogue (%d cells), wall" % mat["cells"], f"{mat['median_s']:.1f} s",
         by["matrix"]),
        (f"cold `moeforge check` of a {r['wide']['kib']} KiB recipe of {r['wide']['keys']:,} top-level keys "
         "(refused: 20 unknown keys and one line for the rest)", f"{r['wide']['median_s']:.2f} s",
         by["top-level keys"]),
    ]
    if mc.get("available"):
        rows += [("cold megatron-core import + TransformerConfig validation of tiny-moe/cpu",
                  f"{mc['cold_median_s']:.2f} s (import {mc['cold_import_s']:.2f} s)", ""),
                 ("ratio to the cold check of tiny-moe/cpu", f"megatron-core takes {1 / r['ratio']:.0f}x as long",
                  by["40x"])]
    else:
        rows.append(("cold megatron-core import + validation", "n/a (megatron-core not installed)", by["40x"]))
    lines = [f"Measured by `make bench` (`bench/bench.py --update-readme` wrote this table; every number from one "
             f"run) on {m['nproc']} CPUs ({m['cpu_model']}), Python {m['python']}"
             + (", " + ", ".join(versions) if versions else "") + f", load average {m['loadavg_1min']} "
             "(numbers from a busy machine are not comparable). Cold figures are medians of fresh "
             "interpreters after one uncounted run (bytecode compiled, the validity and parse caches warm).", "",
             "| measure | value | target |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {t} |" for a, b, t in rows]
    return "\n".join(lines)


def update_readme(r: dict, path: Path = README) -> str:
    text = path.read_text()
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        return f"README not updated: {path} has no {README_BEGIN} ... {README_END} markers"
    path.write_text(text[:begin + len(README_BEGIN)] + "\n" + readme_table(r) + "\n" + text[end:])
    return f"README updated: {path.relative_to(ROOT)} (performance table)"


if __name__ == "__main__":
    sys.exit(main())
