"""What a Kubernetes cluster with the Kubeflow training-operator accepts as a PyTorchJob, as two checks.

1. The CRD's own OpenAPI schema (schemas/kubeflow/pytorchjob-crd.json: the training-operator's
   manifests/base/crds/kubeflow.org_pytorchjobs.yaml at a release, its source recorded in the file),
   as the API server applies it with strict field validation (kubectl's default): every type, every
   required field, int32/int64 ranges, quantities, and no field the schema does not know.
2. schemas/pytorchjob.json: what the CRD cannot say and the operator's webhook (same release) and
   Kubernetes' pod validation check: one Master, replica types, the "pytorch" container with an image,
   name formats, the enums.

`validator()` gives one object whose iter_errors yields both checks' errors (jsonschema errors, with
absolute_path). Regenerate the CRD file from a newer release (then review the diff and rerun the tests):

    python tests/launch/pytorchjob_schema.py CRD.yaml --tag vX.Y.Z --commit SHA > schemas/kubeflow/pytorchjob-crd.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "schemas" / "kubeflow" / "pytorchjob-crd.json"
OVERLAY_FILE = ROOT / "schemas" / "pytorchjob.json"
CRD_PATH = "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
REPOSITORY = "https://github.com/kubeflow/training-operator"
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def extract(crd_text: str, tag: str, commit: str) -> dict:
    """The stored form of a CRD file: its v1 openAPIV3Schema without the `description`s (most of the
    file's 600 kB), and where it came from (git's blob id of the file, so a copy can be checked)."""
    import yaml

    crd = yaml.safe_load(crd_text)
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    raw = crd_text.encode()
    return {
        "source": {
            "repository": REPOSITORY, "tag": tag, "commit": commit, "path": CRD_PATH,
            "url": f"https://raw.githubusercontent.com/kubeflow/training-operator/{tag}/{CRD_PATH}",
            "git_blob": hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest(),
            "kept": "spec.versions[name=v1].schema.openAPIV3Schema, every `description` removed; nothing else changed",
            "regenerate": "python tests/launch/pytorchjob_schema.py CRD.yaml --tag TAG --commit SHA",
        },
        "crd": {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": version["name"]},
        "openAPIV3Schema": _without_descriptions(version["schema"]["openAPIV3Schema"]),
    }


def _without_descriptions(node):
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def as_json_schema(node, at_root: bool = True) -> dict:
    """A Kubernetes structural schema as the API server applies it, in JSON Schema (draft 2020-12):
    an object with `properties` is closed (strict field validation: an unknown field is an error,
    unless x-kubernetes-preserve-unknown-fields), `format: int32|int64` bounds the integer, and the
    x-kubernetes-* keywords, `default` and CEL rules (x-kubernetes-validations) are dropped. The
    root's `metadata` stays open: the API server checks ObjectMeta itself (schemas/pytorchjob.json
    says how)."""
    out = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("default", "format"):
            continue
        if key == "properties":
            out[key] = {name: ({} if at_root and name == "metadata" else as_json_schema(sub, False))
                        for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = as_json_schema(value, False)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [as_json_schema(v, False) for v in value]
        else:
            out[key] = value
    if "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if node.get("format") in INT_RANGES and node.get("type") == "integer":
        out["minimum"], out["maximum"] = INT_RANGES[node["format"]]
    return out


@lru_cache(maxsize=1)
def stored() -> dict:
    return json.loads(CRD_FILE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def crd_validator():
    """The CRD's schema alone (check 1)."""
    import jsonschema

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              **as_json_schema(stored()["openAPIV3Schema"])}
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@lru_cache(maxsize=1)
def overlay_validator():
    """schemas/pytorchjob.json alone (check 2)."""
    import jsonschema

    schema = json.loads(OVERLAY_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


class Both:
    """Both checks as one validator: iter_errors yields the CRD's errors, then the overlay's."""

    def iter_errors(self, doc):
        yield from crd_validator().iter_errors(doc)
        yield from overlay_validator().iter_errors(doc)


def validator() -> Both:
    return Both()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Write schemas/kubeflow/pytorchjob-crd.json from the training-operator's "
                                            f"{CRD_PATH} (a file of the release named by --tag).")
    p.add_argument("crd", help=f"the release's {CRD_PATH}")
    p.add_argument("--tag", required=True, help="the release tag, e.g. v1.9.0")
    p.add_argument("--commit", required=True, help="the commit the tag names (git rev-parse TAG^{commit})")
    args = p.parse_args(argv)
    json.dump(extract(Path(args.crd).read_text(encoding="utf-8"), args.tag, args.commit), sys.stdout, indent=1,
              sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
