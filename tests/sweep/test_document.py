"""Sweep documents: schema-checked like recipes, every problem one located line with a fix; scaffolded by
`moeforge new sweep`; the migration machinery knows the kind."""
from __future__ import annotations

import pytest

from moeforge.compiler.diagnostics import CompileError
from moeforge.compiler.recipe.migrate import CURRENT, migrate_file
from moeforge.compiler.sweep import document
from moeforge.compiler.recipe.validate import KINDS


def _write(root, name, text):
    import textwrap

    path = root / "recipes" / "sweeps" / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """\
    schema: moeforge/sweep/v1
    name: good
    recipe: builtin:tiny-moe/cpu
    axes:
      training.micro_batch_size: [1, 2]
"""


def errors(root, text) -> list:
    _write(root, "s", text)
    with pytest.raises(CompileError) as exc:
        document.load("s")
    return exc.value.diagnostics


def test_a_good_document_reads_with_defaults(proj):
    _write(proj, "good", GOOD)
    s = document.load("good")
    assert (s.name, s.recipe, s.repeats, s.warmup_steps, s.launch["target"]) == \
        ("good", "builtin:tiny-moe/cpu", 1, 1, "local")
    assert [k.value for _, ks in s.axes for k in ks] == [1, 2]
    assert s.file == "recipes/sweeps/good.yaml"


def test_unknown_keys_and_knobs_get_located_did_you_mean(proj):
    diags = errors(proj, """\
        schema: moeforge/sweep/v1
        name: s
        recipe: builtin:tiny-moe/cpu
        set:
          training.train_itres: 3
        axes:
          moe.overlap.ep_com: [true, false]
          platform.software.megatron_cor: ["0.16.1"]
        """)
    got = {(d.code, d.pos.line, d.pos.col, d.help) for d in diags}
    assert got == {("E_UNKNOWN_KNOB", 5, 3, "did you mean 'training.train_iters'?"),
                   ("E_UNKNOWN_KNOB", 7, 3, "did you mean 'moe.overlap.ep_comm'?"),
                   ("E_UNKNOWN_KNOB", 8, 3, "did you mean 'platform.software.megatron_core'?")}
    assert all(d.pos.file == "recipes/sweeps/s.yaml" for d in diags)
    assert len(diags) == 3  # one per knob, not one per value


def test_bad_values_are_located_at_the_value(proj):
    diags = errors(proj, """\
        schema: moeforge/sweep/v1
        name: s
        recipe: builtin:tiny-moe/cpu
        axes:
          moe.dispatcher: [alltoall, alltoal]
          training.micro_batch_size: [1, two]
        """)
    by_line = {d.pos.line: d for d in diags}
    assert set(by_line) == {5, 6}
    assert by_line[5].pos.col == 30 and by_line[5].help == "did you mean 'alltoall'?"
    assert "moe.dispatcher: 'alltoal' is not" in by_line[5].message
    assert by_line[6].pos.col == 34 and "expected integer" in by_line[6].message


def test_the_document_itself_is_schema_checked(proj):
    diags = errors(proj, """\
        schema: moeforge/sweep/v1
        name: Bad_Name
        recipe: builtin:tiny-moe/cpu
        repets: 2
        """)
    codes = {(d.code, d.pos.line) for d in diags}
    assert ("E_UNKNOWN_KEY", 4) in codes and ("E_SCHEMA", 2) in codes
    assert any(d.help == "did you mean 'repeats'?" for d in diags)
    assert any("axes" in d.message for d in diags if d.code == "E_SCHEMA")  # neither axes nor points


def test_missing_schema_and_missing_file(proj):
    (proj / "recipes" / "sweeps" / "bare.yaml").write_text("name: x\n")
    with pytest.raises(CompileError) as exc:
        document.load("bare")
    assert exc.value.diagnostics[0].code == "E_MISSING_SCHEMA" and "sweep/v1" in exc.value.diagnostics[0].help
    with pytest.raises(CompileError) as exc:
        document.load("nope")
    assert exc.value.diagnostics[0].code == "E_SWEEP_NOT_FOUND"


def test_a_moved_knob_path_still_means_its_new_place_and_twice_is_refused(proj):
    _write(proj, "moved", """\
        schema: moeforge/sweep/v1
        name: moved
        recipe: builtin:tiny-moe/cpu
        axes:
          training.lr: [0.001, 0.002]
        """)
    s = document.load("moved")
    assert s.axes[0][0] == ("schedule", "lr") and s.notes[0].code == "SCHEMA_OLD_VERSION"
    diags = errors(proj, """\
        schema: moeforge/sweep/v1
        name: s
        recipe: builtin:tiny-moe/cpu
        axes:
          training.lr: [0.001]
          schedule.lr: [0.002]
        """)
    assert [d.code for d in diags] == ["E_SWEEP_AXIS_TWICE"] and diags[0].pos.line == 6


def test_sweep_check_prints_located_errors_and_exits_1(proj, cli, capsys):
    _write(proj, "s", """\
        schema: moeforge/sweep/v1
        name: s
        recipe: builtin:tiny-moe/cpu
        axes:
          moe.overlap.ep_com: [true]
        """)
    assert cli("sweep", "check", "s") == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == ("recipes/sweeps/s.yaml:5:3: error[E_UNKNOWN_KNOB]: unknown knob moe.overlap.ep_com: no 'ep_com' in "
                      "moe.overlap")
    assert out[1] == "  help: did you mean 'moe.overlap.ep_comm'?"


def test_new_sweep_scaffolds_a_document_that_checks(proj, cli, capsys):
    assert cli("new", "sweep", "mbs", "builtin:tiny-moe/cpu") == 0
    text = (proj / "recipes" / "sweeps" / "mbs.yaml").read_text()
    first = text.splitlines()[0]  # the project's copy of the schema (issue 48: not this checkout's schemas/)
    assert first == "# yaml-language-server: $schema=../../.moeforge/schemas/sweep.v1.json"
    assert (proj / "recipes" / "sweeps" / first.split("=", 1)[1]).resolve().is_file()
    assert "# runs of each point" in text  # every key commented from the schema
    s = document.load("mbs")
    assert s.recipe == "builtin:tiny-moe/cpu" and s.axes[0][0] == ("training", "micro_batch_size")
    assert cli("sweep", "check", "mbs") == 0
    assert cli("new", "sweep", "mbs", "builtin:tiny-moe/cpu") == 1  # never overwrites
    assert "refusing to overwrite: recipes/sweeps/mbs.yaml" in capsys.readouterr().out
    assert cli("new", "sweep", "x", "no/such") == 1
    assert "E_RECIPE_NOT_FOUND" in capsys.readouterr().out


def test_the_migration_machinery_knows_sweeps(proj, cli, capsys):
    assert KINDS["sweep"] == CURRENT["sweep"] == 1
    path = _write(proj, "good", GOOD)
    assert migrate_file(path) is False
    assert cli("migrate", str(path)) == 0
    assert "already current" in capsys.readouterr().out
