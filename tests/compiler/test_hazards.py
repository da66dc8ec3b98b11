"""Field hazards (moeforge.compiler.rules.hazards): each meets its field report and not its fixed neighbour, the
solver never resolves an auto knob into one, a pinned match warns (an error under --strict or `hazards: error`),
and the plan lists what only the platform's versions clear."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.driver import compile as compile_recipe
from moeforge.compiler.knobs import table as K
from moeforge.compiler.recipe.validate import validator
from moeforge.compiler.rules import hazards as H
from moeforge.compiler.rules.expr import evaluate
from moeforge.compiler.solver.solve import solve
from moeforge.compiler.solver.values import Pin

IDS = [h.id for h in H.HAZARDS]
OVERRIDES = ["model.mtp_num_layers=1", "training.calculate_per_token_loss=true", "moe.overlap.ep_comm=false"]


def test_catalogue_is_at_least_fifteen_field_reports_with_links():
    assert len(H.HAZARDS) >= 15
    for h in H.HAZARDS:
        assert h.symptom in H.SYMPTOMS and h.fix and h.fix_text
        assert any(e.url.startswith("https://github.com/") for e in h.evidence), h.id
        assert {e.kind for e in h.evidence} <= set(H.EVIDENCE_KINDS)
        assert all(e.url.startswith(("https://github.com/", "megatron/core/")) and " " not in e.url
                   for e in h.evidence), h.id
        assert all(f in K.BY_FIELD or f in K.FACT_BY_FIELD for f in h.fields), h.id  # read values that exist
        assert all(f in K.BY_FIELD for f in h.fix), h.id                             # fixes are knobs


@pytest.mark.parametrize("hid", IDS)
def test_condition_meets_the_reported_configuration(hid):
    h = H.BY_ID[hid]
    assert h.matches(h.reported) is True
    assert h.versions(h.reported_software)[0] == "applies"


@pytest.mark.parametrize("hid", IDS)
def test_fixed_neighbour_is_clear(hid):
    """The same knobs with the fixed release are cleared; the report with the fix's knob values does not meet it."""
    h = H.BY_ID[hid]
    if h.fixed_in:
        fixed = {**h.reported_software, **dict(h.fixed_in)}
        assert h.versions(fixed) == ("cleared", ())
        assert h.matches(h.reported) is True  # the knobs alone still meet it: only the version clears it
    assert h.matches({**h.reported, **h.fix}) is False


def test_unstated_version_may_apply_naming_the_fact():
    h = H.BY_ID["DEEPEP_INTERNODE_NVSHMEM_3_5_19"]
    assert h.versions({"megatron_core": "0.19.2"}) == ("may apply", ("nvshmem",))
    assert h.versions({"nvshmem": "3.5.19"})[0] == "applies"
    assert h.versions({"nvshmem": "3.4.5"})[0] == "cleared"


@pytest.mark.parametrize("spec,version,holds", [(">=3.5.19", "3.5.19", True), (">=3.5.19,<3.6", "3.6.0", False),
                                                ("<0.18.0", "0.18.0rc1", False), ("==25.09", "25.09", True)])
def test_version_specs(spec, version, holds):
    assert H.spec_holds(spec, version) is holds


def test_container_version_comes_from_the_image_tag():
    assert H.platform_versions({"container_image": "nvcr.io/nvidia/nemo:25.11", "software": {"torch": "2.9.0"}}) \
        == {"torch": "2.9.0", "container": "25.11"}
    assert "container" not in H.platform_versions({"container_image": "my/image:latest"})


@pytest.mark.parametrize("hid", IDS)
def test_solver_never_resolves_an_auto_knob_into_a_hazard(hid):
    """Given the field report's pins with one knob left auto, the solver picks a value that avoids the hazard
    (where some value of that knob can)."""
    h = H.BY_ID[hid]
    autos = [f for f in sorted(h.fields) if f in K.BY_FIELD and K.BY_FIELD[f].auto]
    avoided = 0
    for knob in autos:
        pins = {f: Pin(v) for f, v in h.reported.items() if f != knob}
        for f in h.fields - pins.keys() - {knob}:
            pins[f] = Pin((K.BY_FIELD.get(f) or K.FACT_BY_FIELD[f]).default)
        fixed = {f: p.value for f, p in pins.items()}
        solution = solve(pins, {knob}, [H.as_rule(h)], [], [], explain_errors=False)
        if solution.ok:
            assert evaluate(h.when, {**fixed, **solution.values}) is False, (knob, solution.values)
            avoided += 1
        else:  # no value of this knob avoids it: only the pins can (reported as a warning, below)
            domain = K.BY_FIELD[knob].domain or (False, True)
            assert all(evaluate(h.when, {**fixed, knob: v}) is not False for v in domain)
    assert avoided or not autos


def test_pinned_match_warns_with_symptom_evidence_and_fix():
    compiled = compile_recipe("tiny-moe/cpu", OVERRIDES, plan=False)  # cpu: megatron-core 0.16.1
    (d,) = [d for d in compiled.diagnostics if d.code == "HAZARD_MTP_PER_TOKEN_LOSS_UNDERWEIGHTED"]
    assert d.severity == "warning" and "(wrong-result)" in d.message
    assert "github.com/NVIDIA/Megatron-LM/pull/3159" in d.source and "0.17.0" in d.help
    assert ("training.calculate_per_token_loss", False) in d.fixes
    assert str(d.pos).startswith("--set training.calculate_per_token_loss")


@pytest.mark.parametrize("how", ["strict", "recipe"])
def test_pinned_match_is_an_error_under_strict_or_hazards_error(how):
    kwargs = {"strict": True} if how == "strict" else {}
    overrides = OVERRIDES + (["hazards=error"] if how == "recipe" else [])
    with pytest.raises(CompileError) as e:
        compile_recipe("tiny-moe/cpu", overrides, plan=False, **kwargs)
    assert any(d.code == "HAZARD_MTP_PER_TOKEN_LOSS_UNDERWEIGHTED" and d.is_error for d in e.value.diagnostics)


def test_fixed_release_clears_it_and_the_plan_says_which_versions_would_not():
    compiled = compile_recipe("tiny-moe/cpu", OVERRIDES + ["platform.software.megatron_core=0.19.2"], strict=True)
    assert not [d for d in compiled.diagnostics if d.code.startswith("HAZARD_")]
    entries = compiled.plan["hazards"]
    assert {"id": "MTP_PER_TOKEN_LOSS_UNDERWEIGHTED", "symptom": "wrong-result",
            "applies_when": {"megatron_core": "<0.17.0"}}.items() <= entries[0].items()
    assert not list(validator("plan.v1.json").iter_errors(json.loads(json.dumps(compiled.plan))))


def test_a_plan_that_meets_no_hazard_has_no_hazards_key():
    assert "hazards" not in compile_recipe("tiny-moe/cpu").plan


def test_recipe_schema_has_the_hazards_key():
    schema = json.loads((Path(__file__).parents[2] / "schemas" / "recipe.v3.json").read_text())
    assert schema["properties"]["hazards"]["enum"] == ["warn", "error"]


def _cli(capsys, *argv) -> tuple[int, str]:
    from moeforge.compiler.cli import main

    rc = main(["hazards", *argv])
    return rc, capsys.readouterr().out


def test_hazards_command_lists_the_catalogue(capsys):
    rc, out = _cli(capsys)
    assert rc == 0 and out.startswith(f"{len(H.HAZARDS)} field hazards")
    assert all(h.id in out for h in H.HAZARDS) and "https://github.com/NVIDIA/Megatron-LM/issues/2272" in out
    rc, out = _cli(capsys, "--format", "json")
    assert {e["id"] for e in json.loads(out)["hazards"]} == set(IDS)


def test_hazards_command_for_a_recipe_applies_upgrade_and_may_apply(capsys):
    rc, out = _cli(capsys, "tiny-moe/cpu", "--format", "json", *sum((["--set", o] for o in OVERRIDES), []))
    doc = json.loads(out)
    assert rc == 0 and [e["id"] for e in doc["applies"]] == ["MTP_PER_TOKEN_LOSS_UNDERWEIGHTED"]
    assert [e["fixed_in"] for e in doc["upgrade clears"]] == [{"megatron_core": "0.17.0"}]
    rc, out = _cli(capsys, "qwen3-next-80b-a3b/b200-bf16")  # DeepEP across nodes; b200 states no NVSHMEM
    assert "may apply" in out and "state platform.software.nvshmem to decide" in out
    rc, out = _cli(capsys, "deepseek-v3/h100-bf16")  # EP x TP: cleared by megatron-core 0.19.2 alone
    assert "cleared by the platform's versions" in out and "EXPERT_GRAD_NORM_UNDERCOUNT_EP_TP" in out


def test_hazards_command_on_a_missing_recipe_exits_1(capsys):
    rc, out = _cli(capsys, "nope/none")
    assert rc == 1 and "E_RECIPE_NOT_FOUND" in out


def test_readme_counts_the_hazards():
    import re

    text = (Path(__file__).parents[2] / "README.md").read_text()
    assert int(re.search(r"`moeforge hazards \[RECIPE\][^:]*: (\d+) field hazards", text).group(1)) == len(H.HAZARDS)


def test_explain_lists_hazards_cleared_by_versions(capsys):
    from moeforge.compiler.cli import main

    assert main(["explain", "deepseek-v3/h100-bf16"]) == 0
    out = capsys.readouterr().out
    assert "cleared only by the platform's versions" in out
    assert "EXPERT_GRAD_NORM_UNDERCOUNT_EP_TP (wrong-result): applies when megatron_core <0.19.0" in out


AUTO_DISPATCH = ["moe.dispatcher=auto", "moe.flex_backend=auto", "cuda_graph.impl=auto", "cuda_graph.modules=auto"]


@pytest.mark.parametrize("nvshmem,dispatcher,warned,in_plan", [
    (None, "flex", True, False),        # not stated: DeepEP stays open to the auto knob, reported as "may apply"
    ("3.5.19", "alltoall", False, False),  # affected: the solver steers the auto dispatcher away from it
    ("3.4.5", "flex", False, True),     # cleared by the version alone: the plan lists it for the preflight
])
def test_the_platforms_versions_decide(nvshmem, dispatcher, warned, in_plan):
    """Qwen3-30B-A3B's EP16 across two H100 nodes with the dispatcher left auto: the seeds prefer DeepEP there."""
    extra = [f"platform.software.nvshmem={nvshmem}"] if nvshmem else []
    compiled = compile_recipe("qwen3-30b-a3b/h100-bf16", AUTO_DISPATCH + extra)
    assert compiled.resolved.env["moe_token_dispatcher_type"] == dispatcher
    codes = [d for d in compiled.diagnostics if d.code == "HAZARD_DEEPEP_INTERNODE_NVSHMEM_3_5_19"]
    assert bool(codes) is warned
    if warned:
        assert codes[0].severity == "warning" and "may apply" in codes[0].message and "nvshmem" in codes[0].message
    assert ("DEEPEP_INTERNODE_NVSHMEM_3_5_19" in [e["id"] for e in compiled.plan.get("hazards", [])]) is in_plan


def test_check_in_ci_fails_when_the_recipe_says_hazards_error(tmp_path, capsys):
    """A project whose recipe pins MTP with per-token loss on megatron-core 0.16.1 (the cpu platform)."""
    from moeforge.compiler.cli import main

    root = Path(__file__).parents[2] / "recipes"
    (tmp_path / "recipes" / "models").mkdir(parents=True)
    (tmp_path / "recipes" / "tiny-moe").mkdir()
    model = (root / "models" / "tiny-moe.yaml").read_text()
    (tmp_path / "recipes" / "models" / "tiny-moe.yaml").write_text(
        model.replace("mtp_num_layers: null", "mtp_num_layers: 1"))
    recipe = (root / "tiny-moe" / "cpu.yaml").read_text().replace("ep_comm: true", "ep_comm: false")
    recipe = recipe.replace("training:\n", "training:\n  calculate_per_token_loss: true\n", 1)
    path = tmp_path / "recipes" / "tiny-moe" / "cpu.yaml"
    for mode, rc in (("warn", 0), ("error", 1)):
        path.write_text(recipe + f"hazards: {mode}\n")
        assert main(["--root", str(tmp_path), "check"]) == rc
        out = capsys.readouterr().out
        assert f"{'error' if rc else 'warning'}[HAZARD_MTP_PER_TOKEN_LOSS_UNDERWEIGHTED]" in out
