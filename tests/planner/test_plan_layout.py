"""Issue 15: `moeforge plan-layout` - the JSON fields checks read, --emit/--evaluate/--all/--explain, bad
input as one line, and legality judged by the rule catalogue (never by the planner)."""
import dataclasses
import io
import json
import os
import re
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from moeforge.compiler.cli import main
from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.estimate import calibration
from moeforge.compiler.planner import report, search, space, splits

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"layout", "dispatcher", "overlap", "recompute", "memory_gb", "step_time_s", "mfu", "feasible", "reasons"}
LAYOUT_FIELDS = {"tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs"}


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def qwen16():
    rc, out, err = run("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--top", "3",
                       "--all", "--format", "json")
    assert rc == 0, err
    return json.loads(out)


def test_json_fields_best_first(qwen16):
    cands = qwen16["candidates"]
    ranked = [c for c in cands if c["feasible"]]
    assert len(ranked) == 3 and cands[:3] == ranked          # the ranked ones first, then the rejected
    for c in cands:
        assert FIELDS <= c.keys() and LAYOUT_FIELDS == c["layout"].keys()
    times = [c["step_time_s"] for c in ranked]
    assert times == sorted(times)
    for c in ranked:
        lay = c["layout"]
        assert lay["tp"] * lay["cp"] * lay["dp"] * lay["pp"] == 16
        assert c["memory_gb"] <= 80 and 0 < c["mfu"] < 1 and c["reasons"] == []
    assert qwen16["considered"] >= qwen16["kept"] > 0


def test_dispatchers_priced_alike_share_one_row(qwen16):
    """Inside one NVLink domain alltoall, DeepEP and HybridEP cost the model the same: the layout is one
    row naming the others (each confirmed legal), so --top counts distinct layouts; across nodes DeepEP
    and HybridEP de-duplicate and alltoall does not, so alltoall is never their twin there."""
    ranked = [c for c in qwen16["candidates"] if c["feasible"]]
    keys = [(json.dumps(c["layout"]), json.dumps(c["overlap"]), json.dumps(c["recompute"])) for c in ranked]
    assert len(set(keys)) == len(keys)
    merged = [c for c in ranked if c["equivalent_dispatchers"]]
    assert merged
    for c in merged:
        named = [c["dispatcher"] + (f"/{c['flex_backend']}" if c["flex_backend"] else "")] + c["equivalent_dispatchers"]
        assert len(set(named)) == len(named)
        if c["layout"]["ep"] * c["layout"]["etp"] > 8:   # beyond the 8-GPU domain
            assert "alltoall" not in named
    rc, out, _ = run("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "8", "--top", "1")
    assert rc == 0 and "alltoall = flex/deepep = flex/hybridep" in out


def test_all_gives_reasons(qwen16):
    rejected = [c for c in qwen16["candidates"] if not c["feasible"]]
    assert rejected and all(c["reasons"] for c in rejected)
    over = [c for c in rejected if c["reasons"][0].startswith("memory ")]
    assert over and all(c["memory_gb"] > 80 and "> 80 GB" in c["reasons"][0] for c in over)


def test_kernels_follow_the_platforms_software():
    """Fused permutation where the platform's Transformer Engine has it (PERMUTE_FUSION_NEEDS_TE_2_1's release),
    not where it has none or an older one."""
    s = search.setting("qwen3-30b-a3b", "h100", 16)
    cand = space.Candidate(ep=16)
    assert cand.recipe(s)["moe"]["permute_fusion"] is True
    for te in (None, "2.0.0"):
        plat = {**s.plat, "software": {**s.plat["software"], "transformer_engine": te}}
        assert "permute_fusion" not in cand.recipe(dataclasses.replace(s, plat=plat))["moe"]


def test_legality_is_the_rule_catalogues():
    """A candidate the rules reject comes back with the rule id: EP overlap with PP needs a virtual pipeline."""
    s = search.setting("qwen3-30b-a3b", "h100", 16)
    comp = search.Compiler(s)
    try:
        bad = space.Candidate(pp=2, ep=8, ep_overlap=True)
        with pytest.raises(CompileError) as exc:
            comp.compile(bad.recipe(s))
        assert any(r.startswith("EP_OVERLAP_NEEDS_VPP: ") for r in search.reasons_of(exc.value))
        comp.compile(space.Candidate(pp=2, vpp=2, ep=8, ep_overlap=True).recipe(s))   # with VPP: legal
    finally:
        comp.close()


def test_text_table_and_explain():
    rc, out, _ = run("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--top", "2",
                     "--explain", "2")
    assert rc == 0
    lines = out.splitlines()
    assert "candidates estimated" in lines[0]
    assert lines[2].split()[:2] == ["#", "layout"] and lines[3].startswith("1  TP") and lines[4].startswith("2  TP")
    assert lines[5:7] == ["", report.CALIBRATION_NOTE]  # under the table: what the absolute numbers stand on
    explain = out[out.index("rank 2:"):]
    for item in ("weights", "gradients", "optimizer", "activations", "allowance", "compute", "ep_a2a", "pp_bubble",
                 "dp_reduce"):
        assert f"    {item}" in explain
    rc, _, err = run("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--top", "2",
                     "--explain", "5")
    assert rc == 1 and "there are 2 ranked layouts" in err


def _project(tmp_path: Path) -> Path:
    for kind, name in (("models", "qwen3-30b-a3b"), ("platforms", "h100")):
        (tmp_path / "recipes" / kind).mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "recipes" / kind / f"{name}.yaml", tmp_path / "recipes" / kind)
    return tmp_path


def test_emit_writes_a_recipe_that_compiles_and_checks(tmp_path):
    root = _project(tmp_path)
    target = root / "recipes" / "planned" / "qwen-h100-x16.yaml"
    rc, out, err = run("--root", str(root), "plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16",
                       "--top", "1", "--format", "json", "--emit", str(target))
    assert rc == 0, err
    assert f"wrote {target}; compile it: moeforge compile {target}" in err
    best = json.loads(out)["candidates"][0]
    doc = yaml.safe_load(target.read_text())
    par = doc["parallelism"]
    assert {k: par[k] for k in ("tp", "pp", "vpp", "cp", "ep", "etp")} == \
        {k: best["layout"][k] for k in ("tp", "pp", "vpp", "cp", "ep", "etp")}
    assert doc["training"]["micro_batch_size"] == best["layout"]["mbs"]
    assert doc["moe"]["dispatcher"] == best["dispatcher"]
    assert doc["moe"]["permute_fusion"] is True   # h100 ships TE 2.12: fused permutation, as Bridge's providers
    assert f"{best['step_time_s']:.2f} s/step" in doc["description"]
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]   # no temporary left behind
    assert doc["moe"]["router"] == {"dtype": "fp32"}   # 128 experts: megatron-core warns on a bf16 router
    rc, out, err = run("--root", str(root), "compile", str(target), "--out", str(tmp_path / "build"))
    # clean but for a field hazard the platform's unstated versions leave open (h100 states no NVSHMEM)
    warnings = [line for line in (out + err).splitlines() if "warning[" in line]
    assert rc == 0 and all("warning[HAZARD_" in w and "may apply" in w for w in warnings), out + err
    plan = json.loads((tmp_path / "build" / "planned" / "qwen-h100-x16" / "plan.json").read_text())
    assert plan["layout"]["ep"] == best["layout"]["ep"] and plan["layout"]["dp"] == best["layout"]["dp"]
    rc, out, err = run("--root", str(root), "check", str(target))
    assert rc == 0, out + err
    # --evaluate on the emitted recipe reproduces the planner's estimate of it
    rc, out, _ = run("--root", str(root), "plan-layout", "--evaluate", str(target), "--format", "json")
    again = json.loads(out)
    assert rc == 0 and again["step_time_s"] == best["step_time_s"] and again["memory_gb"] == best["memory_gb"]


def test_emit_where_it_cannot_be_written_or_compiled(tmp_path):
    """--emit into a path that cannot be written is one line naming the path, after the table; a recipe
    written outside recipes/ comes with how to make it compile (compile reads only recipes/)."""
    (tmp_path / "plain-file").write_text("x")
    argv = ("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--top", "1", "--emit")
    rc, out, err = run(*argv, str(tmp_path / "plain-file" / "x.yaml"))
    assert rc == 1 and "TP" in out and "Traceback" not in err
    assert err.strip() == f"moeforge plan-layout: error: --emit {tmp_path}/plain-file/x.yaml: cannot write it " \
                          f"({tmp_path}/plain-file: File exists): choose a writable path, under recipes/ to compile it"
    rc, out, err = run(*argv, str(tmp_path / "x.yaml"))
    assert rc == 0 and (tmp_path / "x.yaml").exists()
    assert f"it lies outside {ROOT / 'recipes'}: move it there to compile it" in err


def test_emit_never_replaces_a_file_it_did_not_write(tmp_path, deadline):
    """A user's own recipe at the --emit path is kept, and said so before the search; an earlier plan is
    replaced (re-planning into one file); --force replaces anything; a directory is named as one."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: my own recipe\n")
    argv = ("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--top", "1", "--emit")
    rc, out, err = run(*argv, str(mine))
    assert rc == 1 and out == "" and mine.read_text() == "name: my own recipe\n"
    assert err.strip() == f"moeforge plan-layout: error: --emit {mine}: the file exists and plan-layout did not " \
                          "write it: choose another path, or pass --force to replace it"
    planned = tmp_path / "planned.yaml"
    for _ in range(2):   # the second run replaces the first one's plan
        rc, _, err = run(*argv, str(planned), "--gbs", "512")
        assert rc == 0 and "global_batch_size: 512" in planned.read_text(), err
    rc, _, err = run(*argv, str(mine), "--gbs", "512", "--force")
    assert rc == 0 and planned.read_text() == mine.read_text(), err
    rc, out, err = run(*argv, str(tmp_path))
    assert rc == 1 and out == "" and f"--emit {tmp_path}: is a directory" in err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)   # opened to read whether plan-layout wrote it, it would block (hence the deadline)
    rc, out, err = run(*argv, str(fifo))
    assert rc == 1 and out == "" and f"--emit {fifo}: is not a regular file" in err


def test_evaluate_a_catalogue_recipe():
    rc, out, err = run("plan-layout", "--evaluate", "qwen3-30b-a3b/h100-bf16", "--format", "json")
    assert rc == 0, err
    rec = json.loads(out)
    assert FIELDS <= rec.keys()
    assert rec["layout"] == {"tp": 1, "pp": 1, "vpp": None, "cp": 1, "ep": 16, "etp": 1, "dp": 16, "mbs": 1}
    assert rec["dispatcher"] == "flex" and rec["flex_backend"] == "hybridep"
    assert rec["overlap"] == {"ep_comm": True, "delay_wgrad": False}
    assert rec["recompute"]["granularity"] is None and rec["step_time_s"] > 0
    rc, out, _ = run("plan-layout", "--evaluate", "qwen3-30b-a3b/h100-bf16")
    assert rc == 0 and "activations" in out and "ep_a2a" in out
    assert out.rstrip().splitlines()[-2:] == [report.CALIBRATION_NOTE, calibration.note(None)]  # which constants
    rc, out, _ = run("plan-layout", "--evaluate", "no-such/recipe")
    assert rc == 1 and "error[" in out
    # the recipe states the layout: a search option beside --evaluate was silently ignored (an estimate of the
    # recipe's 16 GPUs printed for "--gpus 8"); now it is refused, naming what would be ignored
    rc, out, err = run("plan-layout", "--evaluate", "qwen3-30b-a3b/h100-bf16", "--gpus", "8", "--top", "3")
    assert rc == 1 and out == "" and "so --gpus, --top would be ignored: drop them" in err


@pytest.mark.parametrize("argv, words", [
    (["no-such-model", "--platform", "h100", "--gpus", "16"], "unknown model 'no-such-model'"),
    (["qwen3-30b-a3b", "--platform", "tpu9", "--gpus", "16"], "unknown platform 'tpu9'"),
    (["qwen3-30b-a3b", "--platform", "h100", "--gpus", "12"], "not a whole number of h100 nodes of 8 GPUs"),
    # part of a node: a recipe holds whole nodes (it used to fail the template's GBS with a misleading fix)
    (["qwen3-30b-a3b", "--platform", "h100", "--gpus", "4"], "--gpus 4 is not a whole number of h100 nodes of 8 GPUs"),
    (["qwen3-30b-a3b", "--gpus", "16"], "missing --platform"),
    (["qwen3-30b-a3b", "--platform", "h100", "--gpus", "0"], "--gpus must be a positive integer, got 0"),
    (["qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--seq", "-1"], "--seq must be a positive integer"),
    (["deepseek-v3", "--platform", "h100", "--gpus", "8"], "no feasible layout for deepseek-v3 on 8 x h100"),
    # TP <= 8 and PP <= 32 (48 layers) leave DP >= 4 of 1024 GPUs (24 GPUs fold with DP 1: TP4 x PP6)
    (["qwen3-30b-a3b", "--platform", "h100", "--gpus", "1024", "--gbs", "6"],
     "--gbs 6: no layout of 1024 GPUs has a DP x micro-batch that divides it"),
])
def test_bad_input_is_one_line(argv, words):
    rc, out, err = run("plan-layout", *argv)
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_all_lists_the_reasons_when_nothing_fits(fmt):
    """The no-feasible-layout error points to --all for the reasons; with --all they are printed (it printed the
    same one line), the nearest to fitting first, and the error still ends the run with its exit code."""
    rc, out, err = run("plan-layout", "deepseek-v3", "--platform", "h100", "--gpus", "8", "--all", "--format", fmt)
    assert rc == 1 and err.count("\n") == 1 and "no feasible layout for deepseek-v3 on 8 x h100" in err
    assert "--all" not in err
    if fmt == "json":
        cands = json.loads(out)["candidates"]
        assert cands and not any(c["feasible"] for c in cands)
        memory = [c["memory_gb"] for c in cands]
        assert memory == sorted(memory) and memory[0] > 80
        assert all(re.match(r"memory [\d.]+ GB > 80 GB even with full recompute", c["reasons"][0]) for c in cands)
    else:
        assert "0 within memory" in out and out.count("rejected: memory") >= 2


@pytest.mark.parametrize("argv, fits", [
    # GBS 96 on 256 GPUs: 6 micro-batches at DP 16, which PP 4 cannot interleave; the search proposed
    # TP4 PP4 VP8 EP32, which megatron-core's interleaved schedule refuses when the first step starts
    (["qwen3-235b-a22b", "--platform", "h100", "--gpus", "256", "--gbs", "96"],
     lambda lay, gbs, seq: lay["vpp"] is None or (gbs // (lay["mbs"] * lay["dp"])) % lay["pp"] == 0),
    # seq 4097 splits over no TP > 1 under sequence parallelism: every TP > 1 layout was tried and refused, so
    # "none of those tried passed the rules"
    (["qwen3-235b-a22b", "--platform", "h100", "--gpus", "256", "--seq", "4097"], lambda lay, gbs, seq: lay["tp"] == 1),
])
def test_layouts_the_batch_or_sequence_rules_refuse_are_never_proposed(argv, fits):
    rc, out, err = run("plan-layout", *argv, "--top", "3", "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert len(doc["candidates"]) == 3
    assert all(fits(c["layout"], doc["global_batch_size"], doc["seq_length"]) for c in doc["candidates"])


def test_a_batch_smaller_than_the_gpu_count_plans_with_model_parallelism():
    """GBS 8 on 16 GPUs: only layouts with DP <= 8 can run it (the planner's template recipe, DP 16, cannot:
    planning failed on it with LAYOUT_GBS_DIVISIBLE)."""
    rc, out, err = run("plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16", "--gbs", "8",
                       "--top", "3", "--format", "json")
    assert rc == 0, err
    ranked = json.loads(out)["candidates"]
    assert ranked and all(8 % (c["layout"]["dp"] * c["layout"]["mbs"]) == 0 for c in ranked)


def test_a_model_the_rules_refuse_is_one_line_at_its_place(tmp_path):
    """A model document no layout can fix (an odd head size under RoPE) is refused once, at its line in the
    user's own file, with the fix; it read "the baseline recipe does not compile" with no place."""
    root = _project(tmp_path)
    path = root / "recipes" / "models" / "qwen3-30b-a3b.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["architecture"]["kv_channels"] = 127
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, out, err = run("--root", str(root), "plan-layout", "qwen3-30b-a3b", "--platform", "h100", "--gpus", "16")
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert re.match("moeforge plan-layout: error: qwen3-30b-a3b on h100 cannot be planned: the rules refuse it "
                    r"before any layout is chosen: recipes/models/qwen3-30b-a3b\.yaml:\d+:\d+: ", err), err
    assert "ROPE_NEEDS_EVEN_HEAD_SIZE" in err and "(help: set model.architecture.kv_channels" in err


@pytest.mark.parametrize("model", ["mixtral-8x7b", "deepseek-v2-lite", "minimal-moe", "minimal-mla-moe"])
def test_a_users_own_model_plans_to_a_recipe_that_compiles(model, tmp_path):
    """Model documents outside the catalogue (two real models, two minimal documents that leave nearly every field
    to megatron-core, as the fidelity judges use them): the winner compiles and check passes on it (a document
    without ffn_hidden_size failed with KeyError)."""
    shutil.copytree(ROOT / "tests" / "fidelity" / "outside_catalogue" / "recipes" / "models",
                    tmp_path / "recipes" / "models")
    target = tmp_path / "recipes" / "planned" / f"{model}.yaml"
    rc, _, err = run("--root", str(tmp_path), "plan-layout", model, "--platform", "h100", "--gpus", "16", "--top", "1",
                     "--emit", str(target))
    assert rc == 0, err
    rc, out, err = run("--root", str(tmp_path), "compile", str(target), "--out", str(tmp_path / "build"))
    assert rc == 0, out + err
    rc, out, err = run("--root", str(tmp_path), "check", str(target))
    assert rc == 0, out + err


def test_usage_errors_exit_2():
    assert run("plan-layout", "qwen3-30b-a3b", "--gpus", "many")[0] == 2
    rc, out, _ = run("plan-layout", "--help")
    assert rc == 0 and "usage: moeforge plan-layout" in out


def test_a_rack_of_72_folds_with_every_pipeline_and_expert_size_that_divides_it():
    """PP and EP range over the divisors of the GPU count, not powers of two alone: DeepSeek-V3 on one GB200 NVL72
    rack fits only with PP 9 and EP 8; the search said that no layout fits when PP stopped at 8."""
    s = search.setting("deepseek-v3", "gb200-nvl72", 72)
    comp = search.Compiler(s)
    try:
        weights = splits.Weights.of(search.base_plan(comp, s))
    finally:
        comp.close()
    sizes = {(c.pp, c.ep) for c, lay in space.layouts(s, weights)}
    # every divisor of 72 up to the 61 layers: an uneven pipeline layout splits the layers where no even split does
    # (6, 12, 18, 24 and 36 stages divide none of 61, 63 and 64)
    assert {p for p, _ in sizes} == {1, 2, 3, 4, 6, 8, 9, 12, 18, 24, 36}
    assert {e for _, e in sizes} == {1, 2, 4, 8}                             # 256 experts, 72 GPUs: gcd 8
    rc, out, err = run("plan-layout", "deepseek-v3", "--platform", "gb200-nvl72", "--gpus", "72", "--top", "3",
                       "--format", "json")
    assert rc == 0, err
    for c in json.loads(out)["candidates"]:
        lay = c["layout"]
        assert lay["pp"] == 9 and lay["tp"] * lay["cp"] * lay["dp"] * lay["pp"] == 72 and c["memory_gb"] <= 186
    assert space.divisors(12) == [1, 2, 3, 4, 6, 12] and space.divisors(1) == [1]


def test_a_platform_without_performance_numbers_is_one_clear_line():
    """cpu.yaml has no performance block (no datasheet peak for a CPU): the planner says which file
    and which fields, before searching, for a search and for --evaluate alike."""
    for argv in (("tiny-moe", "--platform", "cpu", "--gpus", "2"), ("--evaluate", "tiny-moe/cpu")):
        rc, out, err = run("plan-layout", *argv)
        assert rc == 1 and "Traceback" not in err, err
        assert "performance" in err and "recipes/platforms/cpu.yaml" in err and len(err.strip().splitlines()) == 1
