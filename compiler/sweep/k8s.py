"""`sweep launch --target k8s`: one Kubeflow PyTorchJob per point (each point's own pytorchjob.yaml, named
<sweep>-<point> and labelled moeforge.dev/sweep and moeforge.dev/point), gathered in pytorchjobs.yaml and
applied with kubectl. The pods write report.json into the point's build directory (shared storage), where
`moeforge results` reads it; `kubectl get pytorchjobs -l moeforge.dev/sweep=NAME` follows them."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from moeforge.compiler import project
from moeforge.compiler.files import write_file_atomically
from moeforge.compiler.sweep import status

FILE = "pytorchjobs.yaml"


class K8sError(Exception):
    """kubectl missing or refusing: one line for the user."""


def gather(top: Path, builds: list[tuple[str, Path]]) -> Path:
    """pytorchjobs.yaml: the points' PyTorchJobs as one multi-document file."""
    docs = [(build / "pytorchjob.yaml").read_text(encoding="utf-8") for _, build in builds]
    path = top / FILE
    write_file_atomically(path, "---\n".join(docs))
    return path


def apply(path: Path, builds: list[tuple[str, Path, str]], env: dict) -> str:
    """kubectl apply -f pytorchjobs.yaml; each point's run 1 is recorded as submitted (state running)."""
    kubectl = shutil.which("kubectl", path=env.get("PATH"))
    if kubectl is None:
        raise K8sError(f"kubectl not found on PATH: apply {path} yourself (kubectl apply -f {path})")
    proc = subprocess.run([kubectl, "apply", "-f", str(path)], cwd=project.root(), env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise K8sError(f"kubectl apply -f {path} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    for point, build, fingerprint in builds:
        (build / "report.json").unlink(missing_ok=True)
        status.write(status.run_dir(build, 1) / "status.json",
                     {"point": point, "repeat": 1, "fingerprint": fingerprint[:16], "state": "running",
                      "target": "k8s", "started": time.time()})
    return proc.stdout
