"""Mutated recipes (and their platform / model documents) through the whole compiler, in process.

Start from the real catalogue: mutate values, types, keys and nesting, add and remove keys, swap
platforms and models, point extends: and references elsewhere, add random `--set` overrides,
edit the YAML text itself, or replace it by random bytes. For every input:

- the compiler either compiles it or raises CompileError, never anything else (no traceback);
- every diagnostic has a location (a file, or the `--set` override it came from);
- a successful compile renders deterministically, writes all eight outputs, a strictly valid
  plan.json, and shell scripts that pass `bash -n`;
- no example runs longer than fuzzlib.EXAMPLE_TIMEOUT (each runs in a forked child).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

import fuzzlib
from fuzzlib import (OUTPUTS, SHELL_OUTPUTS, RECIPE_IDS, apply, dump, fuzz_settings, known_bug,
                     mutation, overrides)

CASE = "fuzz/case"


def case_id(rid: str) -> str:
    """The mutated recipe sits next to its base, so that relative `extends:` still resolve."""
    return f"{rid.rsplit('/', 1)[0]}/fuzz-case"


def _write(root: Path, rel: str, text: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def check_outcome(outcome, root: Path, recipe=None, overrides_=(), case: str = CASE) -> None:
    if outcome is None:  # a hang explained by an open bug (fuzzlib.run)
        return
    build_parent = root.parent / "build" / case.rsplit("/", 1)[0]
    if build_parent.exists():  # failed or not: nothing temporary stays behind (the lock file may)
        stray = [p.name for p in build_parent.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")]
        assert not stray, f"temporary files left behind: {stray}"
    note(f"outcome: {outcome.status} in {outcome.seconds:.2f}s")
    event(f"outcome: {outcome.status}")
    if outcome.status == "compile_error":
        event("stage: " + ("schema/yaml" if outcome.diagnostics[0]["code"].startswith("E_") else "solver"))
    if known_bug(outcome, recipe, overrides_):
        note(f"known bug: {known_bug(outcome, recipe, overrides_)}")
        return
    if outcome.status == "crash":
        pytest.fail(f"not a CompileError: {outcome.error}\n{outcome.traceback}")
    if outcome.status == "compile_error":
        fuzzlib.diagnostics_are_located(outcome.diagnostics)
        return
    result = outcome.value
    assert result["deterministic"], "two renders of the same plan differ"
    target = Path(result["target"])
    assert sorted(p.name for p in target.iterdir()) == sorted(OUTPUTS)
    for name in OUTPUTS:
        assert (target / name).read_text(encoding="utf-8") == result["files"][name]
    plan = fuzzlib.strict_json(result["files"]["plan.json"])
    assert plan["recipe"]["id"] == case
    for name in SHELL_OUTPUTS:
        fuzzlib.bash_syntax_ok(target / name)
    assert result["explain"].strip()


base_ids = st.sampled_from(RECIPE_IDS)


@st.composite
def mutated_recipe(draw):
    rid = draw(base_ids)
    data = fuzzlib.RECIPE_DATA[rid]
    ops = draw(st.lists(mutation(data, fuzzlib.RECIPE_PATHS), min_size=0, max_size=3))
    return rid, apply(data, ops)


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=2.0)
@given(case=mutated_recipe(), sets=overrides, strict=st.booleans())
def test_mutated_recipes(fuzz_root, tmp_path_factory, case, sets, strict):
    rid, data = case
    note(f"base {rid}\n{dump(data)}\noverrides {sets}")
    case = case_id(rid)
    _write(fuzz_root, f"{case}.yaml", dump(data))
    out = fuzz_root.parent / "build"
    outcome = fuzzlib.run(fuzzlib.compile_in, str(fuzz_root), case, sets, str(out), strict)
    check_outcome(outcome, fuzz_root, data, sets, case)


@st.composite
def mutated_documents(draw):
    """A catalogue recipe on a mutated copy of its platform and/or model document."""
    rid = draw(base_ids)
    recipe = json.loads(json.dumps(fuzzlib.RECIPE_DATA[rid]))
    platform = fuzzlib.PLATFORM_DATA[draw(st.sampled_from(fuzzlib.PLATFORMS))]
    model = fuzzlib.MODEL_DATA[draw(st.sampled_from(fuzzlib.MODELS))]
    platform_knobs = [p for p in fuzzlib.PLATFORM_PATHS if fuzzlib.knob_domain(p)] or None
    platform = apply(platform, draw(st.lists(mutation(platform, fuzzlib.PLATFORM_PATHS, platform_knobs),
                                             max_size=3)))
    model = apply(model, draw(st.lists(mutation(model, fuzzlib.MODEL_PATHS, fuzzlib.knob_paths("model.")),
                                       max_size=3)))
    recipe["platform"], recipe["model"] = "fuzz-platform", "fuzz-model"
    return rid, recipe, platform, model


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.5)
@given(case=mutated_documents())
def test_mutated_platform_and_model(fuzz_root, case):
    rid, recipe, platform, model = case
    note(f"base {rid}\nplatform:\n{dump(platform)}\nmodel:\n{dump(model)}")
    _write(fuzz_root, "platforms/fuzz-platform.yaml", dump(platform))
    _write(fuzz_root, "models/fuzz-model.yaml", dump(model))
    case = case_id(rid)
    _write(fuzz_root, f"{case}.yaml", dump(recipe))
    outcome = fuzzlib.run(fuzzlib.compile_in, str(fuzz_root), case, [], str(fuzz_root.parent / "build"))
    check_outcome(outcome, fuzz_root, recipe, case=case)


@st.composite
def edited_text(draw):
    rid = draw(base_ids)
    text = fuzzlib.RECIPE_TEXT[rid]
    for _ in range(draw(st.integers(1, 3))):
        text = draw(fuzzlib.text_edit(text))
    return rid, text


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.0)
@given(case=edited_text())
def test_edited_yaml_text(fuzz_root, case):
    rid, text = case
    note(f"base {rid}\n{text}")
    case = case_id(rid)
    _write(fuzz_root, f"{case}.yaml", text)
    outcome = fuzzlib.run(fuzzlib.compile_in, str(fuzz_root), case, [], str(fuzz_root.parent / "build"))
    check_outcome(outcome, fuzz_root, case=case)


@pytest.mark.usefixtures("warm")
@fuzz_settings(weight=1.0)
@given(raw=st.binary(max_size=600), prefix=st.sampled_from([b"", b"schema: moeforge/recipe/v2\n",
                                                             b"platform: cpu\nmodel: tiny-moe\n"]))
def test_random_bytes_as_yaml(fuzz_root, raw, prefix):
    _write(fuzz_root, f"{CASE}.yaml", prefix + raw)
    outcome = fuzzlib.run(fuzzlib.compile_in, str(fuzz_root), CASE, [], str(fuzz_root.parent / "build"))
    check_outcome(outcome, fuzz_root)  # CASE: a random-bytes recipe never compiles, so no target check
    assert outcome is None or outcome.status != "ok" or prefix, "random bytes compiled into a build"


@fuzz_settings(weight=3.0)
@given(raw=st.binary(max_size=400) | st.text(fuzzlib.ALPHABET, max_size=400).map(str.encode)
       | fuzzlib.yaml_soup.map(str.encode))
def test_load_text_only_raises_located_compile_errors(raw):
    """moeforge.compiler.recipe.load.load_text on anything: a Document or a located CompileError (pure, in process)."""
    from moeforge.compiler.diagnostics import CompileError
    from moeforge.compiler.recipe.load import load_text

    try:
        doc = load_text(raw, "r.yaml")
    except CompileError as exc:
        for d in exc.diagnostics:
            assert d.pos is not None and d.pos.file == "r.yaml" and d.pos.line >= 1, d.render()
        return
    assert doc.file == "r.yaml"
    json.dumps(doc.data, allow_nan=True, default=repr)  # plain values only
    for path, pos in doc.positions.items():
        assert pos.file == "r.yaml" and pos.line >= 1


@fuzz_settings(weight=3.0)
@given(text=fuzzlib.override())
def test_parse_override_is_total(text):
    """Every --set string parses to (identifiers, a finite scalar or flat list) or is a located
    E_OVERRIDE / E_NOT_FINITE."""
    from moeforge.compiler.recipe.compose import parse_override
    from moeforge.compiler.diagnostics import CompileError

    try:
        parts, value = parse_override(text)
    except CompileError as exc:
        [d] = exc.diagnostics
        assert d.code in ("E_OVERRIDE", "E_NOT_FINITE") and d.pos.file == f"--set {text}", d.render()
        return
    assert parts and all(p.isidentifier() for p in parts)
    assert isinstance(value, (str, int, float, bool, list, type(None)))
    items = value if isinstance(value, list) else [value]
    assert not any(isinstance(v, (list, dict)) for v in items)
    assert all(math.isfinite(v) for v in items if isinstance(v, float)), "a non-finite number got through"
