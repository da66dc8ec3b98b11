"""`moeforge plan-layout`: its options are its own (compiler/cli.py forwards everything after the
command here).  Exit codes as moeforge's: 0 an answer, 1 bad input or no feasible layout (one line
on stderr), 2 usage."""
from __future__ import annotations

import argparse
import json
import sys

from moeforge.compiler.diagnostics import CompileError, printable, render_all
from moeforge.compiler.diagnostics import command_main
from moeforge.compiler.driver import load
from moeforge.compiler.estimate import calibration
from moeforge.compiler.planner import emit, report, search


def parser() -> argparse.ArgumentParser:
    """The plan-layout flags, its own since compiler/cli.py forwards everything after the command name."""
    p = argparse.ArgumentParser(
        prog="moeforge plan-layout",
        description="Rank the layouts (TP, PP, VPP, CP, EP, ETP, MBS, dispatcher, overlap, recompute) a model can "
                    "run with on N GPUs of a platform: legal by the rule catalogue (the same rules as check), "
                    "within memory, fastest estimated step first.")
    p.add_argument("model", nargs="?", help="model name (a file in recipes/models/, e.g. qwen3-30b-a3b)")
    p.add_argument("--platform", help="platform name (a file in recipes/platforms/, e.g. h100)")
    p.add_argument("--gpus", type=int, help="number of GPUs (a whole number of nodes)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default 4096, or the model's max_position_embeddings if shorter)")
    p.add_argument("--gbs", type=int, default=None, help="global batch size in sequences (default 16 per GPU)")
    p.add_argument("--force-load-balancing", action="store_true",
                   help="plan for benchmark routing (moe.router.force_load_balancing), as Megatron-Bridge perf runs use; "
                        "default: learned routing, whose token imbalance the memory estimate bounds")
    p.add_argument("--top", type=int, default=10, help="how many confirmed layouts to list (default 10)")
    p.add_argument("--all", action="store_true", help="also list rejected candidates with their reasons")
    p.add_argument("--explain", nargs="?", type=int, const=1, default=None, metavar="RANK",
                   help="print the memory and time breakdown of the candidate at RANK (default 1, the winner)")
    p.add_argument("--emit", metavar="FILE", help="write the winner as a recipe to FILE (put it under recipes/ "
                                                  "to compile it: moeforge compile FILE)")
    p.add_argument("--force", action="store_true", help="with --emit: replace FILE even if plan-layout did not "
                                                         "write it")
    p.add_argument("--evaluate", metavar="RECIPE", help="estimate one given recipe instead of searching")
    p.add_argument("--calibration", metavar="FILE|none",
                   help="the calibration to estimate with (default: recipes/platforms/<platform>.calibration.yaml "
                        "when there is one; none: the fixed constants)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output: text (default) or json")
    return p


def main(argv) -> int:
    """Entry for `moeforge plan-layout`: a bad setting or calibration ends as a message with exit 2."""
    return command_main("moeforge plan-layout", parser(), _run, argv, (calibration.CalibrationError, search.PlannerError))


# what a search takes and --evaluate does not (the recipe states its model, platform, GPUs and batch): flag, dest
SEARCH_ONLY = (("MODEL", "model"), ("--platform", "platform"), ("--gpus", "gpus"), ("--seq", "seq"), ("--gbs", "gbs"),
               ("--top", "top"), ("--all", "all"), ("--emit", "emit"), ("--force", "force"),
               ("--force-load-balancing", "force_load_balancing"))


def _run(args) -> int:
    if args.evaluate:
        defaults = parser()
        given = [flag for flag, dest in SEARCH_ONLY if getattr(args, dest) != defaults.get_default(dest)]
        if given:
            raise search.PlannerError(f"--evaluate {args.evaluate} takes the model, platform, GPUs and batch from "
                                      f"the recipe, so {', '.join(given)} would be ignored: drop "
                                      f"{'it' if len(given) == 1 else 'them'}, or change the recipe")
        return _evaluate(args)
    missing = [n for n, v in (("MODEL", args.model), ("--platform", args.platform), ("--gpus", args.gpus)) if v is None]
    if missing:
        raise search.PlannerError(f"missing {', '.join(missing)}: moeforge plan-layout MODEL --platform P --gpus N "
                                  "(or --evaluate RECIPE)")
    if args.top < 1:
        raise search.PlannerError(f"--top must be at least 1, got {args.top}")
    if args.emit:
        emit.may_replace(args.emit, args.force)
    cal = calibration.for_platform(args.platform, args.calibration)
    with calibration.using(cal):
        return _search(args, cal)


def _search(args, cal) -> int:
    s = search.setting(args.model, args.platform, args.gpus, args.seq, args.gbs, args.force_load_balancing)
    result = search.search(s, top=args.top, keep_rejected=args.all, progress=True)
    if not result.considered:  # the all-DP layout always folds: only the batch can rule out every layout
        raise search.PlannerError(f"--gbs {s.gbs}: no layout of {s.gpus} GPUs has a DP x micro-batch that divides "
                                  f"it; use a multiple of {s.gpus} (or of the DP you mean to run)")
    if not result.ranked:
        why = (f"none of {result.considered} candidates fits in {s.capacity_gb:g} GB per GPU" if not result.kept else
               f"{result.kept} of {result.considered} candidates fit in memory, none of those tried passed the rules")
        if args.all:  # the reasons the message points to: the rejected layouts, the nearest to fitting first
            result.rejected.sort(key=lambda e: (e.mem is None, e.mem.total if e.mem else 0, e.cand.key()))
            _print(result, args.format, cal)
        raise search.PlannerError(f"no feasible layout for {s.model} on {s.gpus} x {s.platform} (seq {s.seq}, GBS "
                                  f"{s.gbs}): {why}; try more GPUs or a shorter --seq"
                                  + ("" if args.all else ", and --all for the reasons"))
    _print(result, args.format, cal)
    if args.explain is not None:
        if not 1 <= args.explain <= len(result.ranked):
            raise search.PlannerError(f"--explain {args.explain}: there are {len(result.ranked)} ranked layouts")
        text = report.explain(result.ranked[args.explain - 1], s.capacity_gb, f"rank {args.explain}")
        print("\n" + "\n".join(map(printable, text.split("\n"))),
              file=sys.stderr if args.format == "json" else sys.stdout)
    if args.emit:
        path = emit.write(args.emit, emit.recipe_text(result.ranked[0], s))
        print(printable(f"wrote {path}; {emit.next_step(path)}"), file=sys.stderr)
    return 0


def _evaluate(args) -> int:
    try:
        composed = load(args.evaluate)
        cal = calibration.for_platform(composed.data["platform"]["name"], args.calibration,
                                       composed.files.get("platform"))
        with calibration.using(cal):
            ev = search.evaluate_recipe(args.evaluate)
    except CompileError as exc:
        print(render_all(exc.diagnostics, "text"))
        return 1
    cap = (ev.plan["platform"].get("gpu") or {}).get("memory_gb")
    if args.format == "json":
        print(json.dumps({**report.record(ev, cap), "calibration": calibration.record(cal)}, indent=2))
    else:
        text = report.explain(ev, cap, args.evaluate) + "\n\n" + report.CALIBRATION_NOTE  # the recipe's path
        print("\n".join(map(printable, text.split("\n"))) + "\n" + calibration.note(cal))  # note(): escaped
    return 0


def _print(result: search.Result, fmt: str, cal) -> None:
    if fmt == "json":
        print(json.dumps({**json.loads(report.as_json(result)), "calibration": calibration.record(cal)}, indent=2))
    else:
        print("\n".join(map(printable, report.table(result).split("\n"))) + "\n" + calibration.note(cal))
