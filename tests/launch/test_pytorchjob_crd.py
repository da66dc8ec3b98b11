"""The PyTorchJob CRD schema kept as data (schemas/kubeflow/pytorchjob-crd.json) and the check built on it.

The schema is the training-operator's own, at a stated release, with its source; applied as the API
server applies it (strict field validation), it accepts what moeforge emits and refuses a manifest
with a field of the wrong type or a field it does not know. Every catalogue recipe's pytorchjob.yaml
is checked against it in tests/golden/test_golden.py.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml


@pytest.fixture(scope="module")
def emitted(rendering):
    """A two-node GPU PyTorchJob as the template writes it (Master and Worker, limits, volumes, env)."""
    ctx = rendering.full_context()
    ctx["k8s"]["image"] = "nvcr.io/nvidia/pytorch:25.01-py3"
    return yaml.safe_load(rendering.render("pytorchjob.yaml", ctx))


def crd_errors(pytorchjob_schema, doc) -> list[tuple[str, str]]:
    return sorted(("/".join(map(str, e.absolute_path)), e.message) for e in pytorchjob_schema.crd_validator().iter_errors(doc))


def test_the_stored_schema_says_where_it_comes_from(pytorchjob_schema):
    stored = pytorchjob_schema.stored()
    source = stored["source"]
    assert source["repository"] == "https://github.com/kubeflow/training-operator"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", source["tag"]) and re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert re.fullmatch(r"[0-9a-f]{40}", source["git_blob"])
    assert source["url"] == (f"https://raw.githubusercontent.com/kubeflow/training-operator/{source['tag']}/"
                             "manifests/base/crds/kubeflow.org_pytorchjobs.yaml")
    assert stored["crd"] == {"group": "kubeflow.org", "kind": "PyTorchJob", "version": "v1"}
    assert '"description"' not in json.dumps(stored["openAPIV3Schema"])  # only descriptions were dropped
    spec = stored["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["pytorchReplicaSpecs"] and "nprocPerNode" in spec["properties"]


def test_the_crd_schema_accepts_what_the_template_writes(pytorchjob_schema, emitted):
    assert crd_errors(pytorchjob_schema, emitted) == []
    assert [(p, m) for p, m in ((("/".join(map(str, e.absolute_path))), e.message)
                                for e in pytorchjob_schema.validator().iter_errors(emitted))] == []


def _worker(doc):
    return doc["spec"]["pytorchReplicaSpecs"]["Worker"]


def _container(doc):
    return _worker(doc)["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("mutate, where", [
    (lambda d: _worker(d).update(replicas="1"), "spec/pytorchReplicaSpecs/Worker/replicas"),
    (lambda d: _worker(d).update(replicas=2**31), "spec/pytorchReplicaSpecs/Worker/replicas"),  # int32
    (lambda d: d["spec"].update(nprocPerNode=8), "spec/nprocPerNode"),
    (lambda d: d["spec"]["runPolicy"].update(backoffLimit=True), "spec/runPolicy/backoffLimit"),
    (lambda d: _container(d)["ports"][0].update(containerPort="29500"),
     "spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/ports/0/containerPort"),
    (lambda d: _container(d).update(env={"NCCL_DEBUG": "WARN"}), "spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/env"),
    (lambda d: _container(d)["resources"]["limits"].update({"nvidia.com/gpu": "eight"}),
     "spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/limits/nvidia.com/gpu"),
    (lambda d: _container(d)["volumeMounts"][0].pop("mountPath"),
     "spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/volumeMounts/0"),
    (lambda d: d["spec"]["runPolicy"].update(cleanupPolicy="All"), "spec/runPolicy"),  # unknown: a misspelling
])  # fmt: skip
def test_the_crd_schema_refuses_a_wrong_type_or_an_unknown_field(pytorchjob_schema, emitted, mutate, where):
    doc = copy.deepcopy(emitted)
    mutate(doc)
    assert where in {path for path, _ in crd_errors(pytorchjob_schema, doc)}, crd_errors(pytorchjob_schema, doc)


def test_a_wrong_type_in_a_compiled_manifest_fails(pytorchjob_schema):
    """The catalogue's own output (a golden file), one value turned into a string: the check fails."""
    from pathlib import Path

    job = Path(__file__).resolve().parents[1] / "golden" / "qwen3-30b-a3b" / "h100-bf16" / "pytorchjob.yaml"
    doc = yaml.safe_load(job.read_text())
    assert crd_errors(pytorchjob_schema, doc) == []
    doc["spec"]["runPolicy"]["backoffLimit"] = str(doc["spec"]["runPolicy"]["backoffLimit"])
    assert [p for p, _ in crd_errors(pytorchjob_schema, doc)] == ["spec/runPolicy/backoffLimit"]
