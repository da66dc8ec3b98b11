"""Preflight: on every node, before the first step and before torch.distributed or NCCL start, compare
what is installed and set with what the plan was compiled for.

Why: the compiler judged the recipe against the platform's stated stack (platform.software, platform.gpu)
and cleared some field hazards only because of those versions (the plan's ``hazards``); a node with
another megatron-core, GPU or environment runs something nobody checked. A mismatch stops the rank with
one line per finding and exit 11 (errors.EXIT_PREFLIGHT) before any process group exists.
``--preflight warn|off`` on both entry points, or ``MOEFORGE_PREFLIGHT=warn|off`` for launch scripts
and `moeforge launch`, runs anyway (warn prints the findings; the report keeps them either way).
"""

from __future__ import annotations

import os
import sys

from ..errors import EXIT_BAD_PLAN, PreflightFailed, RuntimeFailure
from . import findings, probes

MODES = ("error", "warn", "off")
ENV = "MOEFORGE_PREFLIGHT"
RUN_ANYWAY = f"{ENV}=warn (or --preflight warn) runs anyway"


class BadSetting(RuntimeFailure):
    exit_code = EXIT_BAD_PLAN
    kind = "bad setting"


def mode(flag: str | None, environ=None) -> str:
    """The preflight mode: the entry point's --preflight, else MOEFORGE_PREFLIGHT, else error."""
    env = os.environ if environ is None else environ
    chosen = flag or env.get(ENV) or "error"
    if chosen not in MODES:
        raise BadSetting(f"{ENV}={chosen!r} is not one of {', '.join(MODES)}: unset it, or set it to warn or off")
    return chosen


def check(plan, environ=None) -> dict:
    """This node's facts and every finding against ``plan`` (nothing raised for a finding)."""
    env = os.environ if environ is None else environ
    platform = plan.raw.get("platform") or {}
    installed = probes.software()
    node_gpu = probes.gpu()
    found = [*findings.software(platform.get("software") or {}, installed),
             *findings.gpu(platform.get("gpu"), node_gpu),
             *findings.environment(plan.raw.get("env") or {}, env)]
    hazard_findings, unchecked = findings.hazards(plan.raw.get("hazards"), installed)
    return {"findings": [f.as_dict() for f in [*found, *hazard_findings]], "unchecked_hazards": unchecked,
            "node": {"software": installed, "gpu": node_gpu}}


def run(plan, flag: str | None, prog: str) -> dict:
    """Preflight ``plan`` in the mode chosen; raises PreflightFailed (exit 11) in mode error when
    anything differs, prints the findings as warnings in mode warn. The report's ``preflight`` section."""
    chosen = mode(flag)
    if chosen == "off":
        return {"mode": "off"}
    result = {"mode": chosen, **check(plan)}
    lines = [f["message"] for f in result["findings"]]
    if lines and chosen == "error":
        raise PreflightFailed("\n".join(f"{line} ({RUN_ANYWAY})" for line in lines))
    for line in lines:
        print(f"{prog}: preflight warning: {line}", file=sys.stderr, flush=True)
    return result


def add_argument(parser) -> None:
    """``--preflight error|warn|off`` on an entry point's parser (default: MOEFORGE_PREFLIGHT, else error)."""
    parser.add_argument("--preflight", choices=MODES, default=None,
                        help=f"compare this node with the plan's platform before training: error (default) stops "
                             f"on a difference (exit 11), warn prints it, off skips it; ${ENV} sets the default")
