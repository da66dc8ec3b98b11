"""`moeforge results DIR`: the sweep's results table (schemas/results.v1.json), from the manifest
(build/sweeps/NAME/sweep.json), each point's runs (runs/<repeat>/status.json, report.json, the log) and
its plan.json: measured values beside the planner's estimate, with the ratio.

Measured, per point over its successful runs: the steady-state step time (each run's median after its
first warm-up steps, then the median over the runs; the spread is their range), tokens/s/GPU, model
TFLOP/s/GPU (Megatron-LM's FLOPs count of the plan, compiler/estimate/flops.py, over the measured step),
peak memory per rank (the largest over the runs, rank by rank) and GPU-hours (ranks x wall-clock hours of
every run, failed ones included: the time was spent). Written as results.json (validated against the
schema), results.csv, and printed as a table, CSV or JSON."""
from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

from moeforge.compiler import __version__
from moeforge.compiler.diagnostics import printable
from moeforge.compiler.estimate.calibration import CalibrationError
from moeforge.compiler.recipe.validate import validator
from moeforge.compiler.sweep import cost, estimates, inputs, plots, slurm, status
from moeforge.compiler.sweep.builds import MANIFEST, relative
from moeforge.compiler.sweep.report import num, short_names, printable_lines, table, value
from moeforge.compiler.files import write_file_atomically

SCHEMA = "results.v1.json"
GIB, MIB = 2 ** 30, 2 ** 20
SUMMARY_FIELDS = ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "overlap_moe_expert_parallel_comm",
                  "delay_wgrad_compute", "recompute_granularity", "expert_model_parallel_size",
                  "expert_tensor_parallel_size")


class ResultsError(Exception):
    """DIR is not a sweep's build directory, or --baseline names no usable point: one line, exit 2."""


def collect(top: Path, baseline: str | None = None) -> dict:
    """The results document of the sweep built in `top`; ResultsError, naming the file and the key, when a
    file there is not what moeforge writes (compiler/sweep/inputs.py)."""
    try:
        manifest = inputs.read(top / MANIFEST, MANIFEST, optional=True)
        if manifest is None:
            raise ResultsError(f"{top} has no {MANIFEST}: give a sweep's build directory (build/sweeps/NAME), made "
                               "by `moeforge sweep launch`")
        sweep = manifest["sweep"]
        logs = next((x.get("logs_dir") for x in reversed(manifest.get("launches", [])) if x.get("logs_dir")), None)
        points = [_point(entry, sweep, logs, top) for entry in manifest["points"]]
    except inputs.InputError as exc:
        raise ResultsError(str(exc)) from None
    doc = {"schema": "moeforge/results/v1", "moeforge_version": __version__, "directory": relative(top),
           "sweep": {k: sweep.get(k) for k in ("name", "file", "recipe", "description", "repeats", "warmup_steps",
                                                "swept", "set")},
           "baseline": baseline, "points": points}
    if baseline is not None:
        _relative(doc, baseline)
    _finite(doc)
    return doc


def _finite(doc: dict) -> None:
    """results.json never holds Infinity or NaN: finite inputs can still overflow (a forged plan's sizes)."""
    stack = [(doc, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            stack += [(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, f"{where}.{i}") for i, v in enumerate(value)]
        elif isinstance(value, float) and not math.isfinite(value):
            raise ResultsError(f"{doc['directory']}: {where} comes out as {value}: the plan.json and report.json "
                               "of that point hold numbers past any physical range; relaunch it")


def _point(entry: dict, sweep: dict, logs: str | None, top: Path) -> dict:
    out = {"id": entry["id"], "values": entry["values"], "verdict": entry["verdict"], "status": entry["verdict"],
           "duplicate_of": entry.get("duplicate_of"), "collapsed": entry.get("collapsed", []),
           "diagnostics": [{k: d.get(k) for k in ("severity", "code", "message", "pos", "help")}
                           for d in entry.get("diagnostics", [])],
           "build_dir": entry.get("build_dir"), "report": None, "runs": [], "measured": None,
           "estimate": entry.get("estimate"), "ratio": None, "realised": None, "versions": None, "gpu_hours": None,
           "relative": None, "error": None}
    if entry["verdict"] != "planned":
        return out
    build = inputs.inside(entry["build_dir"], top, top / MANIFEST)
    runs = status.runs(build, sweep["repeats"], entry.get("fingerprint"),
                       (lambda rec: slurm.log_path(logs, sweep["name"], rec)) if logs else None)
    reports = [(r, r.pop("_report")) for r in runs]
    out["runs"] = [r for r, _ in reports]
    out["status"] = status.point_status([r["status"] for r in out["runs"]], sweep["repeats"])
    out["error"] = next((r["error"] for r in out["runs"] if r["status"] != "ok" and r["error"]), None)
    plan = inputs.read(build / "plan.json", "plan.v1.json", optional=True)
    ok = [(r, rep) for r, rep in reports if r["status"] == "ok"]
    if ok:
        out["report"] = ok[0][0]["report"]
    try:
        _measure(out, plan, ok, sweep)
    except CalibrationError:
        raise
    except (ValueError, ArithmeticError) as exc:  # a plan its schema accepts and its arithmetic refuses
        raise ResultsError(f"{build / 'plan.json'}: {exc}: {inputs.HOW['plan.json']}") from None
    return out


def _measure(out: dict, plan: dict | None, ok: list, sweep: dict) -> None:
    if plan is not None:
        out["estimate"] = estimates.of_plan(plan, sweep["repeats"])
    seconds = [r["seconds"] for r in out["runs"] if r["seconds"] is not None]
    world = (plan or {}).get("layout", {}).get("world_size")
    if seconds and world:
        out["gpu_hours"] = sum(seconds) * world / 3600
    if ok and plan is not None:
        out["measured"] = measured([rep for _, rep in ok], plan, sweep["warmup_steps"])
        last = ok[-1][1]
        out["realised"] = realised(last)
        out["versions"] = last.get("versions")
        out["ratio"] = ratio(out["measured"], out["estimate"])


def measured(reports: list[dict], plan: dict, warmup: int) -> dict:
    """The point's measured values over its successful runs' reports."""
    medians, counted, notes = [], [], []
    for rep in reports:
        times = [s["time_s"] for s in sorted(rep.get("steps", []), key=lambda s: s.get("step", 0))
                 if isinstance(s.get("time_s"), (int, float))]
        steady = times[warmup:]
        if steady:
            medians.append(statistics.median(steady))
            counted += steady
        else:
            notes.append(f"a run logged {len(times)} timed step(s), not more than the {warmup} warm-up step(s)")
    world = reports[0].get("world_size") or plan["layout"]["world_size"]
    tokens = plan["training"]["global_batch_size"] * plan["training"]["seq_length"]
    median = statistics.median(medians) if medians else None
    per_rank = _per_rank([rep.get("peak_memory_bytes_per_rank") for rep in reports])
    peak = max(per_rank) if per_rank else max((rep.get("peak_memory_bytes_max") or 0 for rep in reports),
                                              default=None) or None
    flops = estimates.model_flops_per_step(plan)
    return {"step_time_s": {"median": median, "spread": (max(medians) - min(medians)) if len(medians) > 1 else None,
                            "runs": medians, "min": min(counted) if counted else None,
                            "max": max(counted) if counted else None, "steps_counted": len(counted),
                            "warmup_steps_skipped": warmup},
            "tokens_per_step": tokens,
            "tokens_per_s_per_gpu": tokens / median / world if median else None,
            "model_tflops_per_s_per_gpu": flops / median / world / 1e12 if median else None,
            "peak_memory_bytes_per_rank": per_rank or None, "peak_memory_bytes_max": peak,
            "memory_source": reports[0].get("peak_memory_source"), "world_size": world, "notes": notes}


def _per_rank(lists: list) -> list[int]:
    lists = [x for x in lists if isinstance(x, list) and x]
    if not lists:
        return []
    return [max(x[i] for x in lists if i < len(x)) for i in range(max(len(x) for x in lists))]


def realised(report: dict) -> dict:
    """What a run realised (entrypoint, device, layout, key fields), to compare with what was planned."""
    fields = report.get("realised") or {}
    layout = report.get("layout") or {}
    return {"entrypoint": report.get("entrypoint", "moeforge"), "device": report.get("device"),
            "world_size": report.get("world_size"), "schedule": report.get("schedule_taken"),
            "layout": {k: layout.get(k) for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp")},
            "fields": {k: (fields[k].get("realised") if isinstance(fields[k], dict) else fields[k])
                       for k in SUMMARY_FIELDS if k in fields}}


def ratio(m: dict, est: dict | None) -> dict:
    """measured / estimate for each value both have; the peak memory only against the allocator's peak (the
    model's `allocated`: what torch.cuda.max_memory_allocated sees), never against a CPU process's RSS."""
    est = est or {}

    def r(a, b):
        return a / b if a is not None and b else None

    cuda = str(m.get("memory_source") or "").startswith("torch.cuda")
    out = {"step_time": r(m["step_time_s"]["median"], est.get("step_time_s")),
           "tokens_per_s_per_gpu": r(m["tokens_per_s_per_gpu"], est.get("tokens_per_s_per_gpu")),
           "model_tflops_per_s_per_gpu": r(m["model_tflops_per_s_per_gpu"], est.get("model_tflops_per_s_per_gpu")),
           "peak_memory": r(m["peak_memory_bytes_max"], est.get("allocated_bytes")) if cuda else None, "notes": []}
    if est.get("missing"):
        out["notes"].append(est["missing"])
    if not cuda and m.get("memory_source"):
        out["notes"].append(f"peak memory is measured as {m['memory_source']}, not the allocator's peak the "
                            "model estimates: no ratio")
    return out


def _relative(doc: dict, baseline: str) -> None:
    by_id = {p["id"]: p for p in doc["points"]}
    if baseline not in by_id:
        import difflib  # lazy: only an unknown baseline needs it

        near = difflib.get_close_matches(baseline, list(by_id), n=1)
        raise ResultsError(f"--baseline {baseline}: no such point" + (f"; did you mean {near[0]}?" if near else
                                                                      f" (points: {', '.join(by_id)})"))
    base = by_id[baseline]["measured"]
    if base is None or base["step_time_s"]["median"] is None:
        raise ResultsError(f"--baseline {baseline}: the point has no measured step time ({by_id[baseline]['status']})")
    for p in doc["points"]:
        m = p["measured"]
        if m is None or m["step_time_s"]["median"] is None:
            continue
        p["relative"] = {
            "step_time": m["step_time_s"]["median"] / base["step_time_s"]["median"],
            "tokens_per_s_per_gpu": m["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"],
            "peak_memory": (m["peak_memory_bytes_max"] / base["peak_memory_bytes_max"]
                            if m["peak_memory_bytes_max"] and base["peak_memory_bytes_max"] else None)}


def check(doc: dict) -> None:
    """results.json must follow its own schema: anything else is a moeforge bug."""
    bad = sorted(validator(SCHEMA).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if bad:
        e = bad[0]
        raise AssertionError(f"moeforge built results its schema refuses at {'.'.join(map(str, e.absolute_path))}: "
                             f"{e.message}")


# ------------------------------------------------------------------------------------------- outputs
def to_json(doc: dict) -> str:
    """results.json's text: sorted keys, so the same runs give the same file."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


CSV_COLUMNS = ("id", "status", "duplicate_of", "step_time_median_s", "step_time_spread_s", "tokens_per_s_per_gpu",
               "model_tflops_per_s_per_gpu", "peak_memory_bytes_max", "memory_source", "gpu_hours",
               "est_step_time_s", "est_tokens_per_s_per_gpu", "est_model_tflops_per_s_per_gpu", "est_peak_memory_bytes",
               "est_allocated_bytes", "est_gpu_hours", "ratio_step_time", "ratio_tokens_per_s_per_gpu",
               "ratio_peak_memory", "rel_step_time", "rel_tokens_per_s_per_gpu", "rel_peak_memory", "build_dir",
               "report", "error")


def rows(doc: dict) -> list[dict]:
    """One flat row per point, the columns results.csv and the HTML table share."""
    out = []
    for p in doc["points"]:
        m, e = p["measured"] or {}, p["estimate"] or {}
        r, rel = p["ratio"] or {}, p["relative"] or {}
        step = m.get("step_time_s") or {}
        row = {**{f"value:{k}": json.dumps(v) for k, v in p["values"].items()},
               "id": p["id"], "status": p["status"], "duplicate_of": p["duplicate_of"],
               "step_time_median_s": step.get("median"), "step_time_spread_s": step.get("spread"),
               "tokens_per_s_per_gpu": m.get("tokens_per_s_per_gpu"),
               "model_tflops_per_s_per_gpu": m.get("model_tflops_per_s_per_gpu"),
               "peak_memory_bytes_max": m.get("peak_memory_bytes_max"), "memory_source": m.get("memory_source"),
               "gpu_hours": p["gpu_hours"], "est_step_time_s": e.get("step_time_s"),
               "est_tokens_per_s_per_gpu": e.get("tokens_per_s_per_gpu"),
               "est_model_tflops_per_s_per_gpu": e.get("model_tflops_per_s_per_gpu"),
               "est_peak_memory_bytes": e.get("peak_memory_bytes"), "est_allocated_bytes": e.get("allocated_bytes"),
               "est_gpu_hours": e.get("gpu_hours"), "ratio_step_time": r.get("step_time"),
               "ratio_tokens_per_s_per_gpu": r.get("tokens_per_s_per_gpu"), "ratio_peak_memory": r.get("peak_memory"),
               "rel_step_time": rel.get("step_time"), "rel_tokens_per_s_per_gpu": rel.get("tokens_per_s_per_gpu"),
               "rel_peak_memory": rel.get("peak_memory"), "build_dir": p["build_dir"], "report": p["report"],
               "error": p["error"]}
        out.append(row)
    return out


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what Excel, LibreOffice and Sheets evaluate (OWASP)


def cell(v) -> object:
    """A CSV cell a spreadsheet shows as text: a string that starts like a formula gets a leading apostrophe,
    as OWASP recommends for CSV injection (a number stays a number; '-1.5' is a number, '-1+1' is not), and
    its control characters are escaped as on a terminal (the CSV is printed too, and read in CI logs)."""
    if v is None:
        return ""
    if isinstance(v, str):
        v = printable(v)
    if isinstance(v, str) and v.startswith(FORMULA_START):
        try:
            float(v)
        except ValueError:
            return "'" + v
    return v


def to_csv(doc: dict) -> str:
    """results.csv: the swept values then the fixed columns, every cell escaped for a spreadsheet."""
    swept = [f"value:{k}" for k in doc["sweep"]["swept"]]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["id", *swept, *CSV_COLUMNS[1:]], extrasaction="ignore", lineterminator="\n")
    w.writerow({k: cell(k) for k in w.fieldnames})
    for row in rows(doc):
        w.writerow({k: cell(v) for k, v in row.items()})
    return buf.getvalue()


def to_text(doc: dict) -> str:
    """The terminal table `moeforge results` prints, measured beside estimated, relative to the baseline if any."""
    swept = doc["sweep"]["swept"]
    short = short_names(swept)
    base = doc["baseline"]
    headers = ["point", *[short[k] for k in swept], "status", "step ms (spread)", "tok/s/GPU", "est.", "TFLOP/s/GPU",
               "peak MiB (max rank)", "est. alloc MiB", "steady GPU-h", "start-up GPU-h"] + (["vs " + base] if base else [])
    body = []
    for p in doc["points"]:
        m, e, rel = p["measured"] or {}, p["estimate"] or {}, p["relative"] or {}
        step = m.get("step_time_s") or {}
        status_ = f"= {p['duplicate_of']}" if p["duplicate_of"] else p["status"]
        spread = f" (±{step['spread'] * 1e3 / 2:.1f})" if step.get("spread") is not None else ""
        tok = m.get("tokens_per_s_per_gpu")
        est_tok = e.get("tokens_per_s_per_gpu")
        ratio_ = (p["ratio"] or {}).get("tokens_per_s_per_gpu")
        cells = [p["id"], *[value(p["values"][k]) if k in p["values"] else "." for k in swept], status_,
                 (num(step["median"] * 1e3, ".1f") + spread) if step.get("median") else "-", num(tok, ".0f"),
                 num(est_tok, ".0f") + (f" (x{ratio_:.2f})" if ratio_ else ""),
                 num(m.get("model_tflops_per_s_per_gpu"), ".4f"),
                 num(m["peak_memory_bytes_max"] / MIB, ".0f") if m.get("peak_memory_bytes_max") else "-",
                 num(e["allocated_bytes"] / MIB, ".1f") if e.get("allocated_bytes") else "-",
                 num(cost.steady_gpu_hours(p), ".3g"), num(cost.startup_gpu_hours(p), ".3g")]  # the knob's cost apart
        if base:
            cells.append(f"step x{rel['step_time']:.2f}, tok/s x{rel['tokens_per_s_per_gpu']:.2f}" if rel else "-")
        body.append(cells)
    lines = [f"sweep {doc['sweep']['name']} ({doc['directory']}): {len(doc['points'])} point(s), "
             f"{doc['sweep']['repeats']} repeat(s), {doc['sweep']['warmup_steps']} warm-up step(s) skipped per run", "",
             table(headers, body)]
    sources = {p["measured"]["memory_source"] for p in doc["points"] if p["measured"]}
    lines += [f"peak memory: {s}" for s in sorted(x for x in sources if x)]
    notes = {n for p in doc["points"] for n in ((p["ratio"] or {}).get("notes") or [])}
    lines += [f"estimate: {n}" for n in sorted(notes)]
    used = {(p["estimate"] or {}).get("calibration") for p in doc["points"]} - {None}
    lines += [f"estimates: {c}" for c in sorted(used)]
    for p in doc["points"]:
        if p["status"] not in ("ok", "duplicate", "refused") and p["error"]:
            log = next((r["log"] for r in p["runs"] if r["status"] != "ok"), None)
            lines.append(f"{p['id']} {p['status']}: {p['error']}" + (f" (log: {log})" if log else ""))
    return printable_lines(lines)


def write_all(doc: dict, out: Path, plot: bool = True) -> tuple[list[Path], list[str]]:
    """results.json, results.csv and (with matplotlib) results.png, results.html, results.plot.json in out,
    each written atomically; (the files, notes for the user)."""
    check(doc)
    text = to_text(doc)
    files = {"results.json": to_json(doc), "results.csv": to_csv(doc)}
    notes, png = [], None
    if plot:
        try:
            data = plots.series(doc)
            fig = plots.figure(doc, data)
        except plots.NoPlotting as exc:
            notes.append(str(exc))
        else:
            png = plots.png(fig)
            files["results.html"] = plots.page(doc, fig, text)
            files["results.plot.json"] = json.dumps(data, indent=2) + "\n"
    written = []
    for name, body in files.items():
        write_file_atomically(out / name, body)
        written.append(out / name)
    if png is not None:
        write_file_atomically(out / "results.png", png)
        written.append(out / "results.png")
    return written, notes

