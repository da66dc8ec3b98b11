"""Issue 46 (items 4, 6, 7) and issue 48 (item 1) for calibration documents, as every estimating command
reads them: `.nan`/`.inf` (which pass a schema's `minimum`), an efficiency of 0 (a ZeroDivisionError in five
commands), a `platform:` carrying ESC, BEL and a newline, are one located line and exit 1 in `explain`,
`plan-layout`, `diagnose`, `sweep check` and `results`; a weak calibration (written with --accept-weak, or
with a value outside its physical range) is used, and each of them says "calibration: weak (...)".
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeforge.compiler import driver

RECIPE = "qwen3-30b-a3b/h100-bf16-ep16-alltoall-overlap"
SHA = "0" * 64
HEAD = f"schema: moeforge/calibration/v1\nruns: [{{name: a, sha256: '{SHA}', kind: report}}]\n"


def doc(body: str, platform: str = "h100") -> str:
    return HEAD + f"platform: {platform}\n" + body


BAD = {
    "a NaN constant": (doc("time: {constants: {a2a_efficiency: {value: .nan}}}\n"),
                       "time.constants.a2a_efficiency.value: nan is not a finite number"),
    "an infinite constant": (doc("time: {constants: {host_step_s: {value: .inf}}}\n"),
                             "time.constants.host_step_s.value: inf is not a finite number"),
    "an infinite stderr": (doc("time: {constants: {a2a_efficiency: {value: 0.5, stderr: .inf}}}\n"),
                           "time.constants.a2a_efficiency.stderr: inf is not a finite number"),
    "a NaN assumption": (doc("assumed: {hbm_gbps: .nan}\n"), "assumed.hbm_gbps: nan is not a finite number"),
    "a NaN error": (doc("time: {constants: {a2a_efficiency: {value: 0.5}}, error_after: {median: .nan}}\n"),
                    "time.error_after.median: nan"),
    "a zero efficiency": (doc("time: {constants: {a2a_efficiency: {value: 0}}}\n"),
                          "time.constants.a2a_efficiency.value: 0 is outside [0.0001, 1]"),
    "a zero fraction": (doc("time: {constants: {achievable_fraction: {value: 0.0}}}\n"),
                        "time.constants.achievable_fraction.value: 0 is outside"),
    "an assumed peak of 1e300": (doc("assumed: {bf16_dense_tflops: 1.0e+300}\n"),
                                 "assumed.bf16_dense_tflops: 1e+300 is outside [1e-06, 100000]"),
    "a NaN activation scale": (doc("memory: {constants: {activation_scale: {value: .nan}}}\n"),
                               "memory.constants.activation_scale.value: nan"),
}
# ESC ] 0 ; (retitle the terminal) BEL, then a line that GitHub Actions would read as a workflow command
HOSTILE_PLATFORM = '"h100\\e]0;owned\\a\\n::error file=a.yaml,line=1::forged"'


@pytest.fixture(scope="module")
def h100_run(tmp_path_factory) -> Path:
    """A run's build directory on h100 (plan.json and the report moeforge.runtime.train writes)."""
    d = tmp_path_factory.mktemp("h100run")
    (d / "plan.json").write_text(json.dumps(driver.compile(RECIPE, []).plan))
    (d / "report.json").write_text(json.dumps({
        "status": "ok", "plan": str(d / "plan.json"), "steps": [{"step": 1, "time_s": 40.0}],
        "steady_state": {"window": [1, 1], "steps": 1, "median_s": 40.0, "mean_s": 40.0}}))
    return d


def commands(cal: Path, run: Path) -> dict[str, list[str]]:
    return {"explain": ["explain", RECIPE, "--calibration", str(cal)],
            "plan-layout": ["plan-layout", "--evaluate", RECIPE, "--calibration", str(cal)],
            "diagnose": ["diagnose", str(run), "--calibration", str(cal)]}


def assert_clean(out: str) -> None:
    assert "\x1b" not in out and "\x07" not in out, out
    assert not any(line.lstrip().startswith("::") for line in out.splitlines()), out
    assert "Traceback" not in out and "internal error" not in out and "ZeroDivisionError" not in out
    assert " nan" not in out.lower().replace("nan is not", "") and "inf s" not in out, out


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("command", ["explain", "plan-layout", "diagnose"])
def test_a_non_finite_or_impossible_constant_is_one_located_line(sandbox, moeforge_cli, tmp_path, h100_run, case,
                                                                  command):
    text, words = BAD[case]
    cal = tmp_path / "h100.calibration.yaml"
    cal.write_text(text)
    proc = moeforge_cli(sandbox, *commands(cal, h100_run)[command], timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"{cal}: {words}" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert_clean(out)


@pytest.mark.parametrize("command", ["explain", "plan-layout", "diagnose"])
def test_a_platform_with_terminal_escapes_is_not_echoed_raw(sandbox, moeforge_cli, tmp_path, h100_run, command):
    cal = tmp_path / "h100.calibration.yaml"
    cal.write_text(doc("time: {constants: {a2a_efficiency: {value: 0.5}}}\n", HOSTILE_PLATFORM))
    proc = moeforge_cli(sandbox, *commands(cal, h100_run)[command], timeout=120)
    assert proc.returncode == 1 and f"{cal}: platform: " in proc.stderr, proc.stdout + proc.stderr
    assert_clean(proc.stdout + proc.stderr)


WEAK = {"marked weak": ("weak: ['leave-one-out median error 38% > 25%']\n"
                        "time: {constants: {a2a_efficiency: {value: 0.5}}}\n",
                        "calibration: weak (leave-one-out median error 38% > 25%)"),
        "outside its physical range": ("time: {constants: {achievable_fraction: {value: 0.005}}}\n",
                                       "calibration: weak (achievable_fraction 0.005 outside its physical range "
                                       "[0.01, 1])")}


@pytest.mark.parametrize("case", list(WEAK))
@pytest.mark.parametrize("command", ["explain", "plan-layout", "diagnose"])
def test_a_weak_calibration_is_named_weak_where_it_is_used(sandbox, moeforge_cli, tmp_path, h100_run, case, command):
    body, words = WEAK[case]
    cal = tmp_path / "h100.calibration.yaml"
    cal.write_text(doc(body))
    proc = moeforge_cli(sandbox, *commands(cal, h100_run)[command], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert words in proc.stdout, proc.stdout


CPU_ASSUMED = "assumed: {bf16_dense_tflops: 0.17, hbm_gbps: 10.6, nvlink_gbps: 10.6, internode_gbps: 10.6}\n"


def test_sweep_check_names_a_weak_calibration_and_refuses_a_broken_one(fresh_sandbox, moeforge_cli):
    cal = fresh_sandbox / "recipes" / "platforms" / "cpu.calibration.yaml"
    cal.write_text(doc(CPU_ASSUMED + "weak: ['the step-time estimate is as uncertain as itself']\n"
                       "time: {constants: {achievable_fraction: {value: 0.5}, a2a_efficiency: {value: 0.5}, "
                       "collective_efficiency: {value: 0.5}}}\n", "cpu"))
    sweep = "recipes/sweeps/tiny-overlap.yaml"
    proc = moeforge_cli(fresh_sandbox, "sweep", "check", sweep, timeout=300)
    assert "estimates: calibration: weak (the step-time estimate is as uncertain as itself)" in proc.stdout, \
        proc.stdout + proc.stderr
    cal.write_text(doc(CPU_ASSUMED + "time: {constants: {a2a_efficiency: {value: 0}}}\n", "cpu"))
    proc = moeforge_cli(fresh_sandbox, "sweep", "check", sweep, timeout=300)
    assert proc.returncode == 1 and "cpu.calibration.yaml: time.constants.a2a_efficiency.value: 0 is outside" \
        in proc.stderr, proc.stdout + proc.stderr
