"""A sample of the fuzz inputs through `python -m moeforge.compiler` as a real process, with a timeout.

The in-process tests call moeforge.compiler.cli.main(argv) in a forked child; this sample covers what
only a real process shows: the interpreter's own exit code and stderr (an exception escaping
main(), a crash while printing, a broken pipe), and a wall-clock bound per call.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, note
from hypothesis import strategies as st

import fuzzlib
from fuzzlib import RECIPE_IDS, fuzz_settings, overrides

TIMEOUT = 60  # seconds per process (a cold start is about one)


def run(argv: list[str], cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(fuzzlib.REPO)}
    try:
        proc = subprocess.run([sys.executable, "-m", "moeforge.compiler", *argv], cwd=cwd, env=env, capture_output=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"moeforge {argv!r} did not finish within {TIMEOUT} s")
    out = (proc.stdout + proc.stderr).decode("utf-8", errors="replace")
    note(f"moeforge {argv!r} -> {proc.returncode}\n{out[-2000:]}")
    assert proc.returncode in (0, 1, 2), f"exit code {proc.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out and "internal error" not in out, out[-4000:]
    return proc


@fuzz_settings(weight=0.25)
@given(cmd=st.sampled_from(["explain", "compile", "check"]), rid=st.sampled_from(RECIPE_IDS), sets=overrides,
       fmt=st.sampled_from(["text", "json", "github"]))
def test_cli_processes(tmp_path_factory, cmd, rid, sets, fmt):
    tmp = tmp_path_factory.mktemp("proc")
    if cmd == "check":
        argv = ["check", str(fuzzlib.RECIPES / f"{rid}.yaml"), "--format", fmt]
    else:
        argv = [cmd, rid, "--format", fmt] + [a for s in sets for a in ("--set", s)]
        if cmd == "compile":
            argv += ["--out", str(tmp / "build")]
    run(argv, tmp)


@fuzz_settings(weight=0.25)
@given(data=st.dictionaries(st.sampled_from(fuzzlib.knob_paths_flat()) | fuzzlib.keys, fuzzlib.values, max_size=8),
       strict=st.booleans())
def test_lint_config_processes(tmp_path_factory, data, strict):
    path = tmp_path_factory.mktemp("lint") / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    run(["lint-config", str(path)] + (["--strict"] if strict else []), path.parent)


def test_output_into_a_closed_pipe(tmp_path):
    """`moeforge rules | head -1`: ends quietly (no BrokenPipeError traceback)."""
    env = {**os.environ, "PYTHONPATH": str(fuzzlib.REPO)}
    proc = subprocess.run(f"'{sys.executable}' -m moeforge.compiler rules | head -1", shell=True, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
