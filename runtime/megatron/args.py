"""The plan's megatron-lm.args, read for Megatron-LM's parser, and what must import before it runs.

Why: the args file is the plan's Megatron-LM front-end, written by the compiler with one shell word per
value; it is read exactly as the shell would (``shlex``, never line by line), ``${VAR}`` is expanded
from the rank's environment (an unset one is an error, never an empty path), and what the run needs
from this Python (megatron.training, a logger the plan asks for) is checked before anything is built.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from ..errors import BackendMissing, PlanError, stage
from ..plan import inputs

ARGS_FILE = "megatron-lm.args"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def megatron_lm_argv(plan, extra: list[str]) -> list[str]:
    """The plan's megatron-lm.args as an argv list (comments skipped, ${VAR} expanded) + extra."""
    path = plan.path.parent / ARGS_FILE
    if not path.is_file():
        raise PlanError(f"{path} not found: moeforge.runtime.megatron reads the megatron-lm.args that "
                        f"`moeforge compile` writes next to plan.json")
    with stage(f"reading {path}"):
        argv = read_args_file(path)
    return [expand(token, f"{path.name}") for token in argv] + list(extra)


def read_args_file(path: Path) -> list[str]:
    """The words of an args file exactly as the compiler wrote them: each value is one shell word
    (shlex.quote in templates/megatron-lm.args.j2), so the whole text is split at once, never line by
    line: a quoted value may hold characters str.splitlines() ends a line at (\v, \f, \x85, U+2028,
    ... which a YAML "\\v" or "\\L" puts into a path)."""
    text = inputs.read_text(path)
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise PlanError(f"{path}: {exc}: not as `moeforge compile` writes it (recompile the recipe, or "
                        f"quote the value with shell quoting)") from None


def require_megatron_training() -> None:
    """moeforge.runtime.megatron runs Megatron-LM's pretrain(): megatron.training must import in this Python
    (megatron-core wheels ship it from 0.17 on), checked before anything is built."""
    import importlib.metadata
    import importlib.util

    try:
        found = importlib.util.find_spec("megatron.training") is not None
    except (ImportError, ValueError):  # no megatron package at all
        found = False
    if found:
        return
    try:
        have = f"megatron-core {importlib.metadata.version('megatron-core')}, which has no megatron/training"
    except importlib.metadata.PackageNotFoundError:
        have = "no megatron-core"
    raise BackendMissing(f"moeforge.runtime.megatron runs Megatron-LM's pretrain() from megatron.training, which "
                         f"{sys.executable} cannot import ({have}; the megatron-core wheel ships it from 0.17): "
                         f"run it with a Python that has megatron-core >= 0.17 (make setup312 builds .venv312), "
                         f"or set runtime.entrypoint: moeforge")


# Logging backends Megatron-LM imports only when asked (neither is a moeforge dependency).
LOGGERS = {"--tensorboard-dir": ("torch.utils.tensorboard", "tensorboard", "logging.tensorboard"),
           "--wandb-project": ("wandb", "wandb", "logging.wandb")}


def check_loggers(argv: list[str]) -> None:
    """A logger the plan asks for must import here, before anything is built (not at step 1)."""
    import importlib

    for flag, (module, package, knob) in LOGGERS.items():
        if flag in argv:
            try:
                importlib.import_module(module)
            except ImportError:
                raise BackendMissing(f"{knob} is set but {module} does not import in this environment: "
                                     f"pip install {package}, or unset {knob}") from None


def expand(token: str, where: str) -> str:
    """``${VAR}`` from the environment; an unset variable is an error, never an empty path."""
    missing = [m for m in _VAR.findall(token) if m not in os.environ]
    if missing:
        raise PlanError(f"{where}: {token!r} uses ${{{missing[0]}}}, which is not set in this "
                        f"rank's environment (export it before launching)")
    return _VAR.sub(lambda m: os.environ[m.group(1)], token)
