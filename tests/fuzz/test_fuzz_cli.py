"""The CLI (`moeforge.compiler.cli.main(argv)`, in a forked child) on random argv, overrides and inputs.

Property, for every command: the exit code is 0, 1 or 2, and neither stdout nor stderr contains
"Traceback" or "internal error" (moeforge's own words for a bug in itself).

Recipes come from the real catalogue (read-only: `compile` always gets --out in a tmp dir);
lint-config and migrate inputs are random files in a tmp dir.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, event, given, note
from hypothesis import strategies as st

import fuzzlib
from fuzzlib import RECIPE_IDS, fuzz_settings, overrides

formats = st.sampled_from([[], ["--format", "json"], ["--format", "github"], ["--format", "text"]])


def run_cli(argv) -> tuple[int, object]:
    outcome = fuzzlib.run(fuzzlib.cli, list(argv))
    note(f"argv {argv!r} -> {outcome.value!r} in {outcome.seconds:.2f}s\n{outcome.stdout[-2000:]}"
         f"{outcome.stderr[-2000:]}")
    return outcome


def known_cli_bug(outcome, argv) -> str | None:
    """Open, reported bugs (tests/fuzz/test_found_bugs.py) that a CLI outcome may show (none open)."""
    return None


def check_cli(outcome, argv) -> int | None:
    if outcome is None:  # a hang explained by an open bug (fuzzlib.run)
        return None
    bug = known_cli_bug(outcome, argv)
    if bug:
        event(f"known bug: {bug}")
        return None
    rc = fuzzlib.cli_is_clean(outcome)
    event(f"exit {rc}")
    return rc


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.5)
@given(cmd=st.sampled_from(["explain", "compile"]), rid=st.sampled_from(RECIPE_IDS), sets=overrides,
       fmt=formats, strict=st.booleans())
def test_recipe_commands_with_random_overrides(tmp_path_factory, cmd, rid, sets, fmt, strict):
    out = tmp_path_factory.mktemp("cli-build")
    argv = [cmd, rid] + [a for s in sets for a in ("--set", s)] + fmt + (["--strict"] if strict else [])
    if cmd == "compile":
        argv += ["--out", str(out)]
    outcome = run_cli(argv)
    rc = check_cli(outcome, argv)
    if rc is None:
        return
    if rc == 0 and cmd == "compile":
        [build] = [p for p in (out / rid).parent.iterdir() if not p.name.startswith(".")]
        assert sorted(p.name for p in build.iterdir()) == sorted(fuzzlib.OUTPUTS)
    if rc == 1 and fmt == ["--format", "json"]:
        diags = json.loads(outcome.stdout)
        assert diags and all(d["pos"] and d["pos"]["file"] for d in diags), outcome.stdout[-3000:]


junk_args = st.sampled_from(["--set", "--format", "json", "--strict", "--out", "-", "--", "--help", "-h", "x=1",
                             "recipes", "tiny-moe/cpu", "nope/none", "", "--html", "\x00", "é", "--set=a=1",
                             "recipes/tiny-moe/cpu.yaml", "recipes/platforms", "--unknown"]) | fuzzlib.texts


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.5)
@given(cmd=st.sampled_from(["check", "explain", "rules", "diff", "migrate", "lint-config", "", "nope", "-h",
                            "--version"]),
       args=st.lists(junk_args, max_size=5))
def test_random_argv(tmp_path_factory, cmd, args):
    """Junk argv: usage errors are exit 2, never a traceback. Never compiles into the repository."""
    assume("compile" not in args and cmd != "compile")
    if cmd == "migrate":  # never rewrite a file of the checkout: migrate only gets tmp paths
        sandbox = tmp_path_factory.mktemp("migrate")
        args = [str(sandbox / Path(a).name) if a not in ("-h", "--help") else a for a in args if "\x00" not in a]
    if cmd == "diff":
        args = [a for a in args if "\x00" not in a]
    argv = ([cmd] if cmd else []) + args
    outcome = run_cli(argv)
    check_cli(outcome, argv)


# ----------------------------------------------------------------------------- lint-config

def _lint_fields():
    from moeforge.compiler.knobs import table as K
    from moeforge.compiler.lint.config_lint import megatron_fields

    return sorted(set(K.BY_FIELD) | set(K.FACT_BY_FIELD)), sorted(megatron_fields()["all"])


KNOB_FIELDS, MEGATRON_FIELDS = _lint_fields()


@st.composite
def lint_value(draw, name: str):
    from moeforge.compiler.knobs import table as K

    k = K.BY_FIELD.get(name) or K.FACT_BY_FIELD.get(name)
    if k is not None and draw(st.integers(0, 2)) > 0:
        if k.kind == "bool":
            return draw(st.booleans())
        if k.kind in ("int", "opt_int", "version"):
            return draw(st.sampled_from([None, 0, 1, 2, 4, 8, 16, 3, 128, 61, -1]))
        if k.kind in ("enum", "set") and k.domain:
            items = [d for d in k.domain]
            if k.kind == "set":
                return draw(st.lists(st.sampled_from([d for d in items if d is not None]), max_size=3)
                            | st.none() | st.just("full") | st.just("attn,moe"))
            return draw(st.sampled_from(items))
        if k.kind == "float":
            return draw(st.sampled_from([None, 0.0, 1.0, 0.1, float("nan"), float("inf")]))
    return draw(fuzzlib.values)


gpu_values = st.none() | st.fixed_dictionaries(
    {}, optional={"name": st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA B200", "NVIDIA GB200", "A100", "",
                                           "Tesla V100"]) | fuzzlib.values,
                  "compute_capability": st.sampled_from(["9.0", "10.0", "8.0", "12.1", "9", "x", "²"])
                  | fuzzlib.values}) | fuzzlib.values
version_values = st.sampled_from(["0.16.1", "0.19.0", "0.17.0rc1", "2.9.0", "2.12.0", "2.6.0a0+git123", "1",
                                  "0.19", "99999999999999999999.0", "٠.١٩.٠", "0.1²", None, 0.16, 2])
versions_values = st.none() | st.dictionaries(
    st.sampled_from(["torch", "transformer_engine", "megatron_core"]) | fuzzlib.keys,
    version_values | fuzzlib.values, max_size=3) | fuzzlib.values


@st.composite
def lint_mapping(draw):
    names = draw(st.lists(st.sampled_from(KNOB_FIELDS) | st.sampled_from(MEGATRON_FIELDS) | fuzzlib.keys,
                          max_size=12, unique=True))
    data = {n: draw(lint_value(n)) for n in names}
    if draw(st.booleans()):
        data["gpu"] = draw(gpu_values)
    if draw(st.booleans()):
        data["versions"] = draw(versions_values)
    return data


def _serialise(data, fmt: str) -> tuple[str, bytes]:
    if fmt == "json":
        return "cfg.json", json.dumps(data, default=str).encode()
    return "cfg.yaml", yaml.safe_dump(data, allow_unicode=True).encode()


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=2.0)
@given(data=lint_mapping(), fmt=st.sampled_from(["yaml", "json"]), strict=st.booleans(),
       out=st.sampled_from(["text", "json"]))
def test_lint_config_random_mappings(tmp_path_factory, data, fmt, strict, out):
    name, raw = _serialise(data, fmt)
    path = tmp_path_factory.mktemp("lint") / name
    path.write_bytes(raw)
    argv = ["lint-config", str(path), "--format", out] + (["--strict"] if strict else [])
    note(raw.decode(errors="replace")[:3000])
    outcome = run_cli(argv)
    rc = check_cli(outcome, argv)
    if rc in (0, 1) and out == "json":
        findings = json.loads(outcome.stdout)
        assert isinstance(findings, list)
        assert (rc == 1) == any(f["severity"] == "error" for f in findings)


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.0)
@given(raw=st.binary(max_size=400) | fuzzlib.text_edit(
    (fuzzlib.REPO / "tests/lint/data/bridge_perf_configs.yaml").read_text()[:3000]).map(str.encode),
    suffix=st.sampled_from([".yaml", ".json", ".yml", ""]))
def test_lint_config_random_bytes(tmp_path_factory, raw, suffix):
    path = tmp_path_factory.mktemp("lint") / f"cfg{suffix}"
    path.write_bytes(raw)
    argv = ["lint-config", str(path)]
    rc = check_cli(run_cli(argv), argv)
    assert rc in (None, 0, 1, 2)


@fuzz_settings(weight=3.0)
@given(data=lint_mapping())
def test_lint_mapping_raises_only_unusable_input(data):
    """The library entry point: findings, or UnusableInput (exit 2 in the CLI), nothing else."""
    from moeforge.compiler.lint.config_lint import SEVERITY_ORDER, UnusableInput, lint_mapping as lint

    try:
        findings = lint(data)
    except UnusableInput as exc:
        assert str(exc)
        return
    for f in findings:  # info: LINT_LAUNCH_ONLY, launch arguments no rule reads
        assert f.severity in SEVERITY_ORDER and f.rule and isinstance(f.message, str)


# ----------------------------------------------------------------------------- migrate

@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.0)
@given(data=st.sampled_from(sorted(fuzzlib.RECIPE_IDS)).flatmap(
    lambda rid: st.lists(fuzzlib.mutation(fuzzlib.RECIPE_DATA[rid], fuzzlib.RECIPE_PATHS), max_size=3).map(
        lambda ops: fuzzlib.apply(fuzzlib.RECIPE_DATA[rid], ops))),
       v1=st.sampled_from([{}, {"moe": {"enable_deepep": True}}, {"moe": {"enable_deepep": False}},
                           {"moe": {"deepep_num_sms": 20, "hybridep_num_sms": 16}},
                           {"moe": {"deepep_num_sms": 20, "flex_backend": "deepep"}},
                           {"cuda_graph": {"scope": ["attn"]}}, {"moe": {"enable_deepep": True,
                                                                         "flex_backend": "hybridep"}}]))
def test_migrate_random_v1_documents(tmp_path_factory, data, v1):
    data = dict(data)
    data["schema"] = "moeforge/recipe/v1"
    for key, sub in v1.items():
        if isinstance(data.get(key), dict):
            data[key] = {**data[key], **sub}
        else:
            data[key] = dict(sub)
    path = tmp_path_factory.mktemp("migrate") / "r.yaml"
    path.write_text(fuzzlib.dump(data), encoding="utf-8")
    argv = ["migrate", str(path)]
    rc = check_cli(run_cli(argv), argv)
    if rc == 0:
        after = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert after["schema"] == "moeforge/recipe/v3"  # migrate brings it to the current version
        assert not list(path.parent.glob(".*.tmp")), "migrate left a temp file behind"
