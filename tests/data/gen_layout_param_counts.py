"""Write tests/data/layout_param_counts.json: megatron-core's own parameter counts per rank.

The compiler's analytic memory model (compiler/estimate/memory.py) never imports torch; its
parameter counts are checked (tests/compiler/test_estimate_memory.py) against what megatron-core
really builds for every catalogue recipe, recorded here once.  Run from the repository root:

    .venv/bin/python tests/data/gen_layout_param_counts.py [--venv-root DIR]

It compiles every catalogue recipe (and VARIANTS) into a temporary build root (this checkout's compiler), then
runs ``python -m moeforge.runtime.dryrun PLAN... --rank 0,-1 --local-spec`` (plus a middle pipeline stage
where PP > 2) in the virtual environment whose megatron-core release the plan targets (.venv:
0.16 for the CPU platform, .venv312: 0.19 for the GPU platforms) and keeps, per rank, the
coordinates, the decoder layers, the MTP layers and the parameter counts (total, dense,
expert, embedding).  --local-spec builds the same parameter shapes as the Transformer Engine
spec (runtime/model/local_spec.py) except MLA's down projections at TP > 1 (sharded, where TE replicates
them), so the test counts with te=False.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "layout_param_counts.json"
sys.path.insert(0, str(ROOT))
from moeforge.compiler.commands.check import recipe_ids  # noqa: E402


def recipes() -> list[str]:
    return recipe_ids(ROOT / "recipes")


# Pipeline splits no catalogue recipe uses, as `compile RECIPE --set ...`: memory.py's stage sizes and
# accounting against megatron-core's get_num_layers_to_build, every pipeline stage recorded.
VARIANTS = {
    "gpt-oss-120b/h100-bf16 last=6": ("gpt-oss-120b/h100-bf16", ["parallelism.last_stage_layers=6"]),
    "gpt-oss-120b/h100-bf16 first=last=6 vpp=3": (
        "gpt-oss-120b/h100-bf16", ["parallelism.first_stage_layers=6", "parallelism.last_stage_layers=6",
                                   "parallelism.vpp=3"]),
    "gpt-oss-120b/h100-bf16 pp=2 account_for": (
        "gpt-oss-120b/h100-bf16", ["parallelism.pp=2", "parallelism.account_for_embedding=true",
                                   "parallelism.account_for_loss=true"]),
    # model fields no catalogue model uses (found planning minimal model documents): a learned position table
    # beside the word embedding, MLA without its q/kv LoRA norms, Gated DeltaNet with LayerNorm
    "qwen3-30b-a3b/h100-bf16 learned_absolute": (
        "qwen3-30b-a3b/h100-bf16", ["model.architecture.position_embedding_type=learned_absolute"]),
    "deepseek-v3/h100-bf16 no qk_layernorm": ("deepseek-v3/h100-bf16", ["model.architecture.qk_layernorm=false"]),
    # MLA without a query LoRA (DeepSeek-V2-Lite): megatron-core 0.19 norms the query's input in linear_q_proj
    "deepseek-v3/h100-bf16 no q_lora_rank": ("deepseek-v3/h100-bf16", ["model.architecture.q_lora_rank=null"]),
    "qwen3-next-80b-a3b/h100-bf16 LayerNorm": (  # Gated DeltaNet's out_norm follows the model's norm
        "qwen3-next-80b-a3b/h100-bf16", ["model.architecture.normalization=LayerNorm"]),
    # a per-layer list (1: Gated DeltaNet, 0: softmax attention), split over two stages unlike every 4th layer
    "qwen3-next-80b-a3b/h100-bf16 pp=2 linear_attention_freq list": (
        "qwen3-next-80b-a3b/h100-bf16", ["parallelism.pp=2", "parallelism.ep=64",
                                         "model.architecture.linear_attention_freq="
                                         + str([1] * 24 + [1, 0] * 12).replace(" ", "")]),
}


def _entry(layout: dict, results: list[dict]) -> dict:
    return {"layout": layout,
            "ranks": [{"rank": r["rank"], "coordinates": r["coordinates"], "group_sizes": r["group_sizes"],
                       "model_chunks": r["model_chunks"], "decoder_layers": r["decoder_layers"],
                       "mtp_layers_on_rank": r["mtp_layers_on_rank"], "parameters": r["parameters"],
                       "parameters_per_chunk": r["parameters_per_chunk"]} for r in results]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv-root", default=str(ROOT))
    args = ap.parse_args()
    venvs = {"0.16": Path(args.venv_root) / ".venv/bin/python",
             "0.19": Path(args.venv_root) / ".venv312/bin/python"}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: dict = {"generated_by": "tests/data/gen_layout_param_counts.py", "recipes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        names = recipes()
        script = ("import sys\nfrom moeforge.compiler.cli import main\n"
                  "sys.exit(any(main(['compile', r, '--out', sys.argv[1]]) for r in sys.argv[2:]))\n")
        subprocess.run([sys.executable, "-c", script, tmp, *names], cwd=ROOT, env=env, check=True,
                       capture_output=True)
        plans = {name: (Path(tmp) / name / "plan.json", False) for name in names}
        for i, (name, (recipe, sets)) in enumerate(VARIANTS.items()):
            subprocess.run([sys.executable, "-m", "moeforge.compiler", "compile", recipe, "--out", f"{tmp}/v{i}",
                            *[a for s in sets for a in ("--set", s)]], cwd=ROOT, env=env, check=True,
                           capture_output=True)
            plans[name] = (Path(tmp) / f"v{i}" / recipe / "plan.json", True)
        for name, (plan_path, variant) in plans.items():
            plan = json.loads(plan_path.read_text())
            release = ".".join(plan["platform"]["software"]["megatron_core"].split(".")[:2])
            layout = plan["layout"]
            world, pp = layout["world_size"], layout["pp"]
            ranks = [0, world - 1] if world > 1 else [0]
            if variant:
                ranks = [stage * (world // pp) for stage in range(pp)]  # the first rank of every stage
            elif pp > 2:
                ranks.insert(1, (pp // 2) * (world // pp))  # first rank of a middle stage
            proc = subprocess.run([str(venvs[release]), "-m", "moeforge.runtime.dryrun", str(plan_path), "--rank",
                                   ",".join(map(str, ranks)), "--local-spec"], cwd=ROOT, env=env,
                                  capture_output=True, text=True)
            if proc.returncode:
                print(f"{name}: {proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            report = json.loads(proc.stdout)
            results = report["ranks"] if "ranks" in report else [report]
            out["megatron_core"] = out.get("megatron_core", {})
            out["megatron_core"][release] = results[0]["megatron_core"]
            if variant:
                recipe, sets = VARIANTS[name]
                out.setdefault("variants", {})[name] = {"recipe": recipe, "sets": sets, **_entry(layout, results)}
            else:
                out["recipes"][name] = _entry(layout, results)
            print(name, [r["parameters"]["total"] for r in results], flush=True)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
