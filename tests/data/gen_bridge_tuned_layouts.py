"""Write tests/data/bridge_tuned_layouts.json: the tuned Megatron-Bridge MoE layouts, parsed once.

Source: shared/reference/bridge-perf-configs-subset.md (Megatron-Bridge perf recipes under
src/megatron/bridge/perf_recipes, snapshot 2026-08-22), one row per tuned configuration.  CI has
no shared/, so the planner's validation test (tests/planner/test_validation.py) reads this
fixture.  Run from the repository root:

    .venv/bin/python tests/data/gen_bridge_tuned_layouts.py [SOURCE.md]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "bridge_tuned_layouts.json"
sys.path.insert(0, str(ROOT / "tests"))
from shared_reference import reference  # noqa: E402

SOURCE = reference("bridge-perf-configs-subset.md")
PLATFORMS = {"h100": "h100", "b200": "b200", "gb200": "gb200-nvl72"}   # the row's gpu -> recipes/platforms/
# The pipeline split each tuned row runs with, which the table does not list: Megatron-Bridge's
# set_deepseek_v3_pipeline_model_parallel_layout (DeepSeek-V3: 61 layers + MTP do not split evenly)
# by (PP, VP), the explicit layout of its Qwen3-Next GB300 recipe (which GB200 inherits:
# perf_recipes/qwen/gb300/qwen3_moe.py), and its qwen3_moe recipes' account_for_embedding/
# loss_in_pipeline_split (Qwen3-235B: 94 + 2 = 96).  "even" elsewhere; the catalogue recipes carry the
# same values.
PIPELINE_SPLITS = {("deepseek_v3", 16, None): "Et*4|(t*4|)*14tmL", ("deepseek_v3", 4, 4): "Et*4|(t*4|)*14tmL",
                   ("deepseek_v3", 8, 4): "Et|(tt|)*30mL", ("qwen3_next_80b_a3b", 2, 4): "Et*4|(t*7|)*5t*8|tmL"}


def _int(text: str) -> int | None:
    return None if text in ("None", "-", "dflt") else int(text)


def _bool(text: str) -> bool:
    return text == "True"   # False, '-' (not set) and 'dflt(None)' (model default: off) are off


def row(cells: dict) -> dict:
    flex = cells["disp"] == "flex"
    granularity = None if cells["recomp"] == "None" else cells["recomp"]
    modules = [] if granularity is None else cells["rmods"].strip("[]").split(",")
    return {"model": cells["model"].replace("_", "-"), "platform": PLATFORMS[cells["gpu"]], "gpu": cells["gpu"],
            "ngpu": int(cells["ngpu"]), "tp": int(cells["TP"]), "pp": int(cells["PP"]), "cp": int(cells["CP"]),
            "vpp": _int(cells["VP"]), "ep": int(cells["EP"]), "etp": int(cells["ETP"]), "sp": _bool(cells["SP"]),
            "mbs": int(cells["MBS"]), "gbs": int(cells["GBS"]), "seq": int(cells["seq"]),
            "dispatcher": cells["disp"], "flex_backend": cells["backend"] if flex else None,
            "ep_overlap": _bool(cells["ep_ovl"]), "delay_wgrad": _bool(cells["dwg"]),
            "recompute": granularity, "recompute_modules": modules, "force_load_balancing": _bool(cells["flb"]),
            "pipeline_split": _split(cells)}


def _split(cells: dict) -> str:
    pp, vp = int(cells["PP"]), _int(cells["VP"])
    if (cells["model"], pp, vp) in PIPELINE_SPLITS:
        return PIPELINE_SPLITS[(cells["model"], pp, vp)]
    return "account" if cells["model"] == "qwen3_235b_a22b" and pp > 1 else "even"


def parse(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return sorted((row(r) for r in rows), key=lambda r: (r["model"], r["gpu"], r["ngpu"]))


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else SOURCE
    if source is None:
        print("no shared/reference/bridge-perf-configs-subset.md found: give its path (or set MOEFORGE_SHARED)")
        return 2
    rows = parse(source.read_text())
    OUT.write_text(json.dumps({"source": "shared/reference/bridge-perf-configs-subset.md (Megatron-Bridge perf "
                                         "recipes, snapshot 2026-08-22)", "rows": rows}, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
