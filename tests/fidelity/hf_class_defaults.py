"""compiler/data/hf_class_defaults.json: the defaults of the transformers configuration classes moeforge's Hugging
Face import reads (compiler/importer/hf/families.py), for keys a config.json leaves out, as transformers itself
fills them in. Generated under .venv312 (transformers):

    .venv312/bin/python tests/fidelity/hf_class_defaults.py          # rewrite the file
    .venv312/bin/python tests/fidelity/hf_class_defaults.py --check  # exit 1 when it differs

tests/fidelity/test_hf_import_judged.py checks it through hf_judge.py, which calls defaults() in the same process.
Kept: the keys a model's own class adds (not PretrainedConfig's), without the per-layer lists its __post_init__
derives from other keys (their length is the layer count) and without keys no model document reads."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "compiler" / "data" / "hf_class_defaults.json"
sys.path.insert(0, str(ROOT))
from moeforge.compiler.importer.hf import families as F  # noqa: E402  (imports nothing else of moeforge)

PER_LAYER = {"layer_types", "moe_layers", "no_rope_layers", "mlp_layer_types"}


def defaults() -> dict:
    import transformers

    base = set(transformers.PretrainedConfig().to_dict())
    out = {}
    for fam in F.FAMILIES:
        cfg = getattr(transformers, fam.config_class)()
        out[fam.config_class] = {k: v for k, v in sorted(cfg.to_dict().items())
                                 if k not in base and k not in PER_LAYER and k not in F.NOT_ARCHITECTURE}
    return {"transformers": transformers.__version__, "classes": out}


def text() -> str:
    return json.dumps(defaults(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    new = text()
    if "--check" in sys.argv:
        sys.exit(0 if OUT.read_text() == new else 1)
    OUT.write_text(new)
    print(f"wrote {OUT}")
