"""Write tests/data/theoretical_memory.json: Megatron-LM's own memory estimate for every catalogue recipe.

Megatron-LM ships an analytic estimator, megatron/training/theoretical_memory_usage.py
(report_theoretical_memory: compute_weight_and_optimizer_memory + compute_activation_memory or
compute_activation_memory_without_sp).  tests/compiler/test_memory_vs_megatron.py compares the
compiler's model (compiler/estimate/memory.py) with it, from this fixture, in the 3.11 venv.
Run from the repository root under the 3.12 venv (megatron-core 0.19.2 ships megatron/training):

    .venv312/bin/python tests/data/gen_theoretical_memory.py [--build-root tests/golden]

Each build directory (default: the goldens, which are the compiler's output for every catalogue
recipe, kept current by tests/golden) holds megatron-lm.args and plan.json.  The flags are parsed
and validated with Megatron-LM's own parse_args/validate_args, the way the fidelity judge does
(tests/fidelity/megatron_lm_judge.py: same environment, same emulated GPU facts), then the
estimator's functions are called on the resulting args.  Numbers are bytes.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "theoretical_memory.json"
sys.path.insert(0, str(ROOT / "tests" / "fidelity"))
MIB = 1024 * 1024  # theoretical_memory_usage.NUM_BYTES_IN_MEGABYTE


def megatron_args(build_dir: Path, plan: dict):
    """Megatron-LM's parsed and validated args for a build directory's megatron-lm.args."""
    import megatron_lm_judge as judge
    from megatron.training.arguments import parse_args, validate_args

    judge.gpu_facts(plan)
    saved_env, saved_argv = dict(os.environ), sys.argv
    os.environ.update({k: str(v["value"]) for k, v in plan.get("env", {}).items()})
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(plan["layout"]["world_size"]))
    sys.argv = ["pretrain_gpt.py", *judge.read_args(build_dir / "megatron-lm.args")]
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            args = parse_args(ignore_unknown_args=False)
            validate_args(args)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
    return args


def theoretical(args, num_microbatches: int) -> dict:
    """What report_theoretical_memory computes, term by term, in bytes."""
    import megatron.training.theoretical_memory_usage as tmu

    with redirect_stdout(io.StringIO()):
        weights_and_optimizer = tmu.compute_weight_and_optimizer_memory(args)
        with_sp = tmu.compute_activation_memory(args, num_microbatches=num_microbatches)
        without_sp = tmu.compute_activation_memory_without_sp(args, num_microbatches=num_microbatches)
        report = tmu.report_theoretical_memory(args, num_microbatches=num_microbatches)
    chosen = "with_sp" if args.sequence_parallel and args.recompute_granularity == "selective" else "without_sp"
    return {"weight_and_optimizer_bytes": weights_and_optimizer,
            "activation_bytes": with_sp if chosen == "with_sp" else without_sp,
            "activation_function": f"compute_activation_memory{'' if chosen == 'with_sp' else '_without_sp'}",
            "activation_with_sp_bytes": with_sp, "activation_without_sp_bytes": without_sp,
            "report_mib": list(report) if report else None,
            "args": {"padded_vocab_size": args.padded_vocab_size, "data_parallel_size": args.data_parallel_size,
                     "world_size": args.world_size, "num_query_groups": args.num_query_groups,
                     "kv_channels": args.kv_channels,
                     "accumulate_allreduce_grads_in_fp32": args.accumulate_allreduce_grads_in_fp32}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-root", default=str(ROOT / "tests" / "golden"))
    opts = ap.parse_args()
    root = Path(opts.build_root)
    out = {"generated_by": "tests/data/gen_theoretical_memory.py",
           "source": "megatron/training/theoretical_memory_usage.py (megatron-core 0.19.2 wheel)",
           "recipes": {}}
    for plan_path in sorted(root.rglob("plan.json")):
        build_dir, name = plan_path.parent, str(plan_path.parent.relative_to(root))
        plan = json.loads(plan_path.read_text())
        try:
            args = megatron_args(build_dir, plan)
            entry = theoretical(args, plan["training"]["num_microbatches"])
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded: the test says why
            entry = {"error": f"{type(exc).__name__}: {exc}"}
        out["recipes"][name] = entry
        print(name, {k: v for k, v in entry.items() if k.endswith("bytes") or k == "error"}, file=sys.stderr)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(out['recipes'])} recipes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
