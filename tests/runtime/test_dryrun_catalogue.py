"""Every catalogue recipe dry-runs with ``--local-spec`` on rank 0 and on the last rank.

Each recipe is compiled into a temporary build root, then ``moeforge.runtime.dryrun`` builds both ranks
of every plan in the virtual environment whose megatron-core release the plan targets
(platform.software.megatron_core: the CPU platform is 0.16 -> .venv, the GPU platforms 0.19 ->
.venv312).  The dry runs are batched: one ``python -m moeforge.runtime.dryrun PLAN... --rank 0,-1``
process per venv and chunk (megatron-core is imported once per process, not once per plan), two
chunks at a time on a 2-core machine.

Checked per recipe: exit 0 and no error entry, the report of both ranks (parameter counts that
add up, the decoder layers the pipeline stage owns, the embedding on the first stage and the
output layer on the last), every --local-spec mapping stated as field/plan/used/why, and - for
the families the closed-form count in test_dryrun.py covers (no biases, no MLA, no explicit
pipeline layout, TP 1) - the parameter counts against that independent formula.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runtime_testlib import ROOT, subprocess_env

from moeforge.compiler.commands.check import recipe_ids
from moeforge.compiler.commands.dryrun_report import with_estimates
from test_dryrun import layer

RECIPES = recipe_ids(ROOT / "recipes")
VENVS = {".venv": ROOT / ".venv" / "bin" / "python", ".venv312": ROOT / ".venv312" / "bin" / "python"}
CHUNKS = 2  # parallel dry-run processes per venv (the CI machine has 2 cores)


def venv_release(name: str) -> str | None:
    """megatron-core major.minor installed in a venv (from its dist-info, no interpreter start)."""
    for info in (ROOT / name / "lib").glob("python3*/site-packages/megatron_core-*.dist-info"):
        version = info.name.removeprefix("megatron_core-").removesuffix(".dist-info")
        return ".".join(version.split(".")[:2])
    return None


def release(plan: dict) -> str:
    version = ((plan.get("platform") or {}).get("software") or {}).get("megatron_core") or ""
    return ".".join(str(version).split(".")[:2])


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory) -> dict:
    """{recipe id: plan path} for every catalogue recipe, compiled in one process."""
    out = tmp_path_factory.mktemp("catalogue-build")
    script = ("import sys\nfrom moeforge.compiler.cli import main\nbad = [r for r in sys.argv[2:] "
              "if main(['compile', r, '--out', sys.argv[1]]) != 0]\n"
              "sys.exit('failed: ' + ' '.join(bad) if bad else 0)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(out), *RECIPES], cwd=ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    plans = {r: out / r / "plan.json" for r in RECIPES}
    assert all(p.exists() for p in plans.values())
    return plans


def _dryrun(python: Path, plans: list[Path], out: Path) -> tuple[int, str]:
    cmd = [str(python), "-m", "moeforge.runtime.dryrun", *map(str, plans), "--rank", "0,-1",
           "--local-spec", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=900)
    return proc.returncode, proc.stderr


@pytest.fixture(scope="module")
def dryruns(catalogue, tmp_path_factory) -> dict:
    """{recipe id: {"entry", "returncode", "stderr"} or {"skip": reason}}."""
    tmp = tmp_path_factory.mktemp("catalogue-dryrun")
    installed = {name: venv_release(name) for name in VENVS}
    groups: dict[str, list[str]] = {}
    results: dict = {}
    for recipe, path in catalogue.items():
        wanted = release(json.loads(path.read_text()))
        venv = next((n for n, rel in installed.items() if rel == wanted), None)
        if venv is None:
            results[recipe] = {"skip": f"no venv with megatron-core {wanted} for the plan's "
                                       f"platform (looked for {' and '.join(VENVS)}; "
                                       f"installed: {installed})"}
        else:
            groups.setdefault(venv, []).append(recipe)
    jobs = []
    for venv, recipes in groups.items():
        for i in range(CHUNKS):
            part = recipes[i::CHUNKS]
            if part:
                jobs.append((venv, part, tmp / f"{venv.strip('.')}-{i}.json"))
    with ThreadPoolExecutor(max_workers=CHUNKS) as pool:
        done = list(pool.map(
            lambda job: _dryrun(VENVS[job[0]], [catalogue[r] for r in job[1]], job[2]), jobs))
    for (venv, part, out), (code, stderr) in zip(jobs, done):
        report = json.loads(out.read_text()) if out.exists() else None
        entries = (report["plans"] if report and len(part) > 1
                   else [report] if report else [None] * len(part))
        chunk_ok = bool(report) and all(e and "error" not in e for e in entries)
        for recipe, entry in zip(part, entries):
            # A batch exits non-zero when any of its plans fails: only a fully clean batch
            # must exit 0 (the failing recipe itself is reported by its error entry).
            results[recipe] = {"entry": entry, "returncode": code if chunk_ok else 0,
                               "stderr": stderr, "venv": venv, "chunk_ok": chunk_ok}
    return results


# ------------------------------------------------------------------ independent count
def _uniform_stage_layers(n: int, pp: int, vpp: int | None, pp_rank: int) -> list[int]:
    """1-based layer numbers on a pipeline rank, megatron's default uniform (interleaved) split."""
    chunks = vpp or 1
    per = n // (pp * chunks)
    return [v * pp * per + pp_rank * per + i + 1 for v in range(chunks) for i in range(per)]


def closed_form(plan: dict, rank: int) -> dict | None:
    """Expected counts, or None where the formula does not cover the architecture."""
    tc, layout = plan["transformer_config"], plan["layout"]
    if (tc.get("add_bias_linear") or tc.get("add_qkv_bias") or tc.get("multi_latent_attention")
            or tc.get("pipeline_model_parallel_layout") or layout["tp"] != 1
            or tc.get("num_layers_in_first_pipeline_stage")
            or tc.get("num_layers_in_last_pipeline_stage")
            or plan["model"].get("share_embeddings_and_output_weights")
            or tc.get("normalization") != "RMSNorm" or tc.get("experimental_attention_variant")
            or tc.get("attention_output_gate") or tc.get("softmax_type") not in (None, "vanilla")):
        return None
    h, pp, ep, vocab = tc["hidden_size"], layout["pp"], layout["ep"], plan["model"]["vocab_size"]
    if tc["num_layers"] % (pp * (layout.get("vpp") or 1)):
        return None  # megatron's uneven split: not modelled here
    pp_rank = rank // (layout["world_size"] // pp)
    numbers = _uniform_stage_layers(tc["num_layers"], pp, layout.get("vpp"), pp_rank)
    freq = tc.get("moe_layer_freq", 1)

    def moe(number):
        return bool(freq[number - 1]) if isinstance(freq, list) else (number - 1) % freq == 0

    def one(number):
        d, e = layer(tc, moe(number), ep)
        if moe(number) and tc.get("moe_shared_expert_intermediate_size") and \
                tc.get("moe_shared_expert_gate"):
            d += h  # the shared expert's gate: Linear(h -> 1), no bias
        return d, e

    dense = expert = embedding = 0
    for n in numbers:
        d, e = one(n)
        dense, expert = dense + d, expert + e
    if pp_rank == 0:
        embedding += vocab * h
    if pp_rank == pp - 1:
        dense += h
        embedding += vocab * h
        for _ in range(tc.get("mtp_num_layers") or 0):
            d, e = one(tc["num_layers"])
            dense, expert = dense + 3 * h + 2 * h * h + d, expert + e
            embedding += vocab * h if pp > 1 else 0
    return {"total": dense + expert + embedding, "embedding": embedding, "expert": expert,
            "dense": dense}


# ------------------------------------------------------------------ tests
@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_catalogue_dryrun_local_spec(recipe, catalogue, dryruns):
    got = dryruns[recipe]
    if "skip" in got:
        pytest.skip(got["skip"])
    entry = got["entry"]
    assert entry is not None and "error" not in entry, \
        f"{recipe}: {entry and entry.get('error')}\n{got['stderr'][-3000:]}"
    assert got["returncode"] == 0, got["stderr"][-3000:]
    assert "Traceback" not in got["stderr"]
    plan = json.loads(catalogue[recipe].read_text())
    world, pp = plan["layout"]["world_size"], plan["layout"]["pp"]
    ranks = entry["ranks"] if "ranks" in entry else [entry]
    assert [r["rank"] for r in ranks] == ([0, world - 1] if world > 1 else [0])
    expected_mtp = plan["transformer_config"].get("mtp_num_layers") or 0
    for result in ranks:
        counts = result["parameters"]
        assert counts["total"] > 0
        assert counts["total"] == counts["embedding"] + counts["expert"] + counts["dense"]
        assert result["device"] == "meta" and result["world_size"] == world
        assert result["decoder_layers"]["numbers"], "no decoder layer on this rank"
        assert with_estimates(result)["memory_estimate"]["total_bytes"] > 0  # the compiler's, beside it
        last = result["rank"] == world - 1
        assert counts["embedding"] > 0  # the embedding (first stage), the output layer (last)
        assert result["mtp_layers_on_rank"] == (expected_mtp if last or pp == 1 else 0)
        for sub in result["substitutions"]:
            assert set(sub) == {"field", "plan", "used", "why"} and sub["why"], sub
        if plan["runtime"].get("transformer_impl") == "transformer_engine":
            assert {"field": "runtime.transformer_impl", "plan": "transformer_engine",
                    "used": "local"}.items() <= result["substitutions"][0].items()
        assert result["realised"]["_modules"]["transformer_impl"] == "local"
        want = closed_form(plan, result["rank"])
        if want is not None:
            assert counts == want, (recipe, result["rank"])


def test_catalogue_is_covered():
    """The catalogue the test walks is the one `make compile-all` compiles."""
    assert len(RECIPES) >= 25 and "tiny-moe/cpu" in RECIPES
    assert all(re.fullmatch(r"[a-z0-9.-]+/[a-z0-9.-]+", r) for r in RECIPES)
