"""Every Megatron text in the catalogue occurs in the Megatron sources it cites.

The texts (megatron_message, its version variants, and what other front-ends say in `also`) are
compared with the string literals of the released Megatron code (tests/rules/megatron_sources.py):
megatron-core 0.16.1 (this interpreter), 0.17.0 and 0.18.0 (pinned wheels `make megatron-wheels`
caches), 0.19.2 with megatron/training and megatron-bridge 0.6.2 (.venv312). Placeholders on either
side ({num_moe_experts} here, {model_cfg.num_moe_experts} there) match anything. A few texts cite
files that no wheel carries (OUTSIDE_WHEELS): for them the test checks that this is still so, and
matches them against git mirrors where $MOEFORGE_MEGATRON_LM_GIT / $MOEFORGE_BRIDGE_GIT name them.
(megatron-core 0.16.1's fields are also checked by tests/lint/test_lint_vs_mcore016.py.)
"""
from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest

from moeforge.compiler.knobs import pipeline_layout
from moeforge.compiler.rules import CATALOGUE

sys.path.insert(0, str(Path(__file__).resolve().parent))
import megatron_sources as MS  # noqa: E402

# The Megatron-LM tags a named git mirror is read at (the wheels above are these releases)
MLM_TAGS = ("core_v0.16.1", "core_v0.17.0", "core_v0.18.0", "core_v0.19.0")
MLM_FILES = (
    "megatron/core/transformer/transformer_config.py", "megatron/core/model_parallel_config.py",
    "megatron/core/parallel_state.py", "megatron/core/transformer/transformer_block.py",
    "megatron/core/transformer/moe/token_dispatcher.py", "megatron/core/num_microbatches_calculator.py",
    "megatron/core/transformer/cuda_graph_config.py", "megatron/training/arguments.py",
    "megatron/core/transformer/pipeline_parallel_layer_layout.py", "megatron/core/optimizer/optimizer_config.py",
    "megatron/core/distributed/distributed_data_parallel_config.py", "megatron/core/transformer/moe/experts.py",
    "megatron/core/transformer/moe/shared_experts.py",
    "megatron/core/extensions/transformer_engine.py", "megatron/core/models/common/language_module/language_module.py",
    "megatron/core/pipeline_parallel/schedules.py", "megatron/core/tensor_parallel/mappings.py",
    "megatron/core/transformer/torch_norm.py", "megatron/core/transformer/moe/moe_layer.py",
    "megatron/core/transformer/dot_product_attention.py", "megatron/core/tensor_parallel/layers.py",
    "megatron/core/fusions/fused_layer_norm.py", "megatron/core/models/gpt/experimental_attention_variant_module_specs.py",
    "megatron/core/transformer/moe/moe_utils.py", "megatron/core/transformer/moe/router.py",
    "megatron/core/models/common/fine_grained_callables.py", "megatron/core/models/gpt/gpt_layer_specs.py",
    "megatron/core/transformer/multi_token_prediction.py",
)
BRIDGE_FILES = (
    "src/megatron/bridge/training/comm_overlap.py", "src/megatron/bridge/training/flex_dispatcher_backend.py",
    "src/megatron/bridge/models/gpt_provider.py", "src/megatron/bridge/utils/cuda_graph.py",
    "src/megatron/bridge/training/config.py", "src/megatron/bridge/training/mixed_precision.py",
    "scripts/performance/utils/utils.py",
    "scripts/common/benchmark_parallelism.py",
)
# Python's own TypeError text, not a Megatron literal
NOT_LITERALS = {"__init__() got an unexpected keyword argument"}
# Texts whose cited file no released wheel (nor megatron-bridge's sdist) carries: (rule id, text start) -> where
OUTSIDE_WHEELS = {
    ("DP_PARAM_GATHER_NEEDS_DIST_OPT", "--overlap-param-gather only supported with distributed optimizer or"):
        "Megatron-LM core_v0.16.1 megatron/training/arguments.py (the 0.16.1 wheel has no megatron/training)",
    ("HYBRIDEP_EP_WITHIN_NVL72", "HybridEP expert parallel size must not exceed"):
        "Megatron-Bridge scripts/performance/utils/utils.py (the repository's scripts/ are not packaged)",
    ("LAYOUT_EXPERT_WORLD_DIVISIBLE", "The expert-parallel grid is incompatible"):
        "Megatron-Bridge scripts/common/benchmark_parallelism.py (the repository's scripts/ are not packaged)",
    ("LAYOUT_WORLD_DIVISIBLE", "Requested {world_size} GPUs is not divisible"):
        "Megatron-Bridge scripts/common/benchmark_parallelism.py (the repository's scripts/ are not packaged)",
}


def _outside(rule_id: str, text: str) -> str | None:
    return next((where for (rid, start), where in OUTSIDE_WHEELS.items()
                 if rid == rule_id and text.startswith(start)), None)


def _text(node) -> str | None:
    """A string literal's text, an f-string's with its fields as {placeholders}, literals joined by ``+`` as one
    (megatron-core 0.16's MTP message); None for anything else."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _literals(src: str) -> set[str]:
    """Every string literal, and every message built by `msg = '...'` then `msg += '...'` lines (megatron-core's
    interleaved schedule builds its texts so) as the whole text."""
    out = set()
    for node in ast.walk(ast.parse(src)):
        text = _text(node)
        if text is not None and (isinstance(node, ast.JoinedStr) or len(text) > 12):
            out.add(text)
        for body in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
            if isinstance(body, list):
                out |= _built_up(body)
    return out


def _built_up(statements: list) -> set[str]:
    out, name, parts = set(), None, []
    for st in statements + [None]:
        if (name and isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add) and isinstance(st.target, ast.Name)
                and st.target.id == name and _text(st.value) is not None):
            parts.append(_text(st.value))
            continue
        if len(parts) > 1:
            out.add("".join(parts))
        name, parts = None, []
        if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                and _text(st.value) is not None):
            name, parts = st.targets[0].id, [_text(st.value)]
    return out


def _pattern(text: str) -> re.Pattern:
    parts = re.split(r"\{[^{}]*\}", text)
    return re.compile(".*?".join(re.escape(p) for p in parts), re.S)


def _literals_of(sources, files) -> set[str]:
    out: set[str] = set()
    for source in sources:
        for path in files:
            src = source.text(path)
            if src:
                out |= _literals(src)
    return out


@pytest.fixture(scope="module")
def literals() -> set[str]:
    """The literals of every released source (the wheels); never skipped under `make test`, which
    fetches the pinned wheels first."""
    absent = MS.missing()
    if absent:
        message = "Megatron sources missing: " + "; ".join(absent)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    out = _literals_of(MS.megatron_core(), MLM_FILES) | _literals_of([MS.megatron_bridge()], BRIDGE_FILES)
    assert len(out) > 1000
    return out


def _texts():
    for r in CATALOGUE:
        if r.megatron_message == "{pipeline_layout_problem}":  # quotes one of megatron-core's layout texts
            yield from ((r.id, text) for text in pipeline_layout.MEGATRON_TEXTS.values())
        elif r.megatron_message:
            yield r.id, r.megatron_message
        for _, text in r.variants:
            yield r.id, text
        for _, text in r.also:
            if text:
                yield r.id, text


TEXTS = sorted(set(_texts()))


def test_there_is_a_lot_to_check():
    assert len(TEXTS) > 100


def _fixed(text: str) -> int:
    return len(re.sub(r"\{[^{}]*\}", "", text))


def _compile(literals) -> list:
    return [(lit, _fixed(lit), _pattern(lit)) for lit in literals]


@pytest.fixture(scope="module")
def compiled(literals):
    return _compile(literals)


def matches(text: str, compiled) -> bool:
    """Some literal equals the text up to placeholders (on either side), and most of both is fixed text."""
    fixed = _fixed(text)
    if fixed < 10:
        return False
    ours = _pattern(text)
    for lit, lit_fixed, theirs in compiled:
        if min(lit_fixed, fixed) < 0.6 * max(lit_fixed, fixed):
            continue
        if ours.fullmatch(lit) or theirs.fullmatch(text):
            return True
    return False


def test_matching_is_not_vacuous(compiled):
    assert not matches("overlap_moe_expert_parallel_comm is only supported with the moon", compiled)
    assert not matches("{anything}", compiled)
    assert matches("world_size ({world_size}) is not divisible by {model_size}", compiled)


IN_WHEELS = [(r, t) for r, t in TEXTS if _outside(r, t) is None]
OUTSIDE = [(r, t) for r, t in TEXTS if _outside(r, t) is not None]


@pytest.mark.parametrize("rule_id,text", IN_WHEELS, ids=[f"{r}:{t[:30]}" for r, t in IN_WHEELS])
def test_text_is_a_megatron_literal(compiled, rule_id, text):
    if any(text.startswith(p) for p in NOT_LITERALS):
        return
    assert matches(text, compiled), f"{rule_id}: no Megatron source literal matches {text!r}"


def test_outside_wheels_names_catalogue_texts():
    """Every OUTSIDE_WHEELS entry is a text of the catalogue (the list does not outlive a reworded rule)."""
    assert len(OUTSIDE) == len(OUTSIDE_WHEELS)


@pytest.fixture(scope="module")
def mirror_compiled():
    sources = MS.git_mirrors(MLM_TAGS)
    return _compile(_literals_of(sources, MLM_FILES) | _literals_of(sources, BRIDGE_FILES)) if sources else None


@pytest.mark.parametrize("rule_id,text", OUTSIDE, ids=[f"{r}:{t[:30]}" for r, t in OUTSIDE])
def test_text_outside_the_wheels(compiled, mirror_compiled, rule_id, text):
    """No wheel carries the file this text cites: it stays on the list only while that holds (a wheel that
    starts to carry it moves it to the test above), and a named git mirror has it."""
    assert not matches(text, compiled), f"{rule_id}: a wheel now carries {text!r}: drop it from OUTSIDE_WHEELS"
    if mirror_compiled is not None:
        assert matches(text, mirror_compiled), \
            f"{rule_id}: {_outside(rule_id, text)} does not hold {text!r}"
