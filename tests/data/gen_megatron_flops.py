"""Write tests/data/megatron_flops.json: Megatron-LM's own FLOPs count for every catalogue recipe.

The step-time model (compiler/estimate/flops.py) counts training FLOPs the way Megatron-LM's
``num_floating_point_operations`` (megatron/training/training.py) does, so that its model FLOPs
and MFU are the numbers a Megatron-LM run logs as TFLOP/s/GPU.  The compiler never imports
megatron; this script records that function's answer once, per catalogue recipe, and
tests/compiler/test_estimate_steptime.py checks flops.py against it.  Run from the repository root:

    .venv/bin/python tests/data/gen_megatron_flops.py [--venv-root DIR]

It compiles every catalogue recipe with this checkout's compiler, turns each plan into its
Megatron-LM command line (compiler/targets/megatron_args.py), parses that with Megatron-LM 0.19.2's own
argument parser (.venv312) and calls num_floating_point_operations(args, global_batch_size).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "data" / "megatron_flops.json"
sys.path.insert(0, str(ROOT / "tests" / "data"))
from gen_layout_param_counts import recipes  # noqa: E402 - the catalogue, as the parameter fixture lists it

MEGATRON_SIDE = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
from megatron.training.arguments import parse_args
from megatron.training.training import num_floating_point_operations
out = {}
for name, argv, gbs in json.load(sys.stdin):
    sys.argv = ["pretrain_gpt.py", *argv]
    try:
        args = parse_args()
    except SystemExit:
        print(f"{name}: Megatron-LM's parser rejected {argv}", file=sys.stderr)
        raise
    if args.kv_channels is None:  # what validate_args derives (megatron/training/arguments.py)
        args.kv_channels = args.hidden_size // args.num_attention_heads
    out[name] = num_floating_point_operations(args, gbs)
print(json.dumps(out))
"""


def job(name: str, plan: dict) -> tuple[str, list[str], int]:
    """One case for MEGATRON_SIDE: the plan's Megatron-LM command line (compiler/targets/megatron_args.py) and GBS."""
    from moeforge.compiler.targets import megatron_args

    argv = [part for flag, values in megatron_args.arguments(plan)[0] for part in (flag, *values)]
    return name, argv, plan["training"]["global_batch_size"]


def megatron_count(jobs: list, python: Path = ROOT / ".venv312/bin/python") -> dict[str, float]:
    """Megatron-LM's num_floating_point_operations for each job, per global batch, run once by ``python``
    (.venv312's: megatron-core 0.19.2 ships megatron/training)."""
    # -P: a stray module in /tmp (a timeit.py) must not shadow the standard library's
    proc = subprocess.run([str(python), "-P", "-c", MEGATRON_SIDE],
                          input=json.dumps(jobs), capture_output=True, text=True, cwd="/tmp")
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    from moeforge.compiler import driver as pipeline
    from moeforge.compiler.targets import plan as planmod

    ap = argparse.ArgumentParser()
    ap.add_argument("--venv-root", default=str(ROOT))
    args = ap.parse_args()
    jobs, meta = [], {}
    for name in recipes():
        plan = planmod.build(pipeline.resolve(pipeline.load(name, [])))
        tr = plan["training"]
        jobs.append(job(name, plan))
        meta[name] = {"global_batch_size": tr["global_batch_size"], "seq_length": tr["seq_length"]}
    try:
        flops = megatron_count(jobs, Path(args.venv_root) / ".venv312/bin/python")
    except RuntimeError as e:
        sys.exit(str(e))
    out = {"generated_by": "tests/data/gen_megatron_flops.py",
           "function": "megatron.training.training.num_floating_point_operations (megatron-core 0.19.2 wheel)",
           "recipes": {name: {**meta[name], "flops_per_step": flops[name],
                              "flops_per_token": flops[name] / (meta[name]["global_batch_size"]
                                                                * meta[name]["seq_length"])}
                       for name in sorted(flops)}}
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(flops)} recipes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
