"""An explicit pipeline layout (pipeline_model_parallel_layout), read as megatron-core reads it.

megatron-core's PipelineParallelLayerLayout (transformer/pipeline_parallel_layer_layout.py, the same
in 0.16 and 0.19) parses a string such as ``Et*4|(t*7|)*5t*8|tmL`` into pp x vpp virtual stages of E
(embedding), t (decoder layer), m (MTP layer) and L (loss), and TransformerConfig.__post_init__
validates it against the model.  Here the string is parsed the same way, once, for the rules
(``facts``: numbers the layout rules in rules/layout.py compare, and the first structural problem
in megatron-core's words) and for the memory and step-time models (``stages``).
"""
from __future__ import annotations

import re

# megatron-core parse_str_to_list: first '(...)*n', then 'x*n', each one pass of re.sub
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_SINGLE = re.compile(r"(.)\*(\d+)")
KINDS = ("E", "L", "t", "m")          # megatron-core's char2layer_type, in its order
_TYPE = {"E": "LayerType.embedding", "L": "LayerType.loss", "t": "LayerType.decoder", "m": "LayerType.mtp"}
MAX_SLOTS = 100_000                  # a layout is a few hundred slots; refuse to unroll a runaway repeat
# megatron-core's own texts (parse_str_to_list, validate_layer_layout), which lint and compile quote
MEGATRON_TEXTS = {
    "char": "Invalid layer character: {char} (stage={stage!r}, layout_str={layout!r}), known layer characters: "
            "{known}",
    "first": "The first layer must be embedding, but got {got}",
    "last": "The last layer must be loss, but got {got}",
    "embedding_once": "Embedding must be specified exactly once",
    "loss_once": "Loss must be specified exactly once",
    "mtp_after": "decoder layers must be placed before MTP layers",
    "mtp_one_stage": "All of the MTP layers must be in the same one virtual pipeline stage",
}
FACT_FIELDS = ("pipeline_layout_stages", "pipeline_layout_decoder_layers", "pipeline_layout_mtp_layers",
               "pipeline_layout_stages_after_mtp", "pipeline_layout_problem")


class LayoutTextError(ValueError):
    """The string is not a layout megatron-core can parse (its message, where megatron-core has one)."""


def _unroll(pattern: re.Pattern, text: str) -> str:
    size = len(text) + sum(len(m.group(1)) * int(m.group(2)) for m in pattern.finditer(text))
    if size > MAX_SLOTS:
        raise LayoutTextError(f"the layout unrolls to over {MAX_SLOTS} slots")
    return pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)


def stages(text: str) -> list[str]:
    """The virtual stages in order (stage i is model chunk i // pp of pipeline rank i % pp), each a
    string over E/L/t/m; LayoutTextError where megatron-core's parser would assert."""
    unrolled = _unroll(_SINGLE, _unroll(_GROUP, text.replace(",", "")))
    parts = unrolled.split("|")
    for part in parts:
        for char in part:
            if char not in KINDS:
                raise LayoutTextError(MEGATRON_TEXTS["char"].format(char=char, stage=part, layout=unrolled,
                                                                    known=list(KINDS)))
    return parts


def _problem(parts: list[str]) -> str | None:
    """The first pp-independent check of PipelineParallelLayerLayout.validate_layer_layout that fails,
    in its words (the layer counts, the MTP stage and the stage count are rules of their own)."""
    flat = "".join(parts)
    if not flat:
        return "the layout holds no layer (megatron-core needs E first and L last)"
    checks = (("first", flat[0] != "E", flat[0]), ("last", flat[-1] != "L", flat[-1]),
              ("embedding_once", flat.count("E") != 1, None), ("loss_once", flat.count("L") != 1, None),
              ("mtp_after", "m" in flat and "t" in flat[flat.find("m"):], None),
              ("mtp_one_stage", sum("m" in p for p in parts) > 1, None))
    for key, failed, got in checks:
        if failed:
            return MEGATRON_TEXTS[key].format(got=_TYPE.get(got))
    return None


def facts(text) -> dict:
    """What the layout rules read: stage, decoder and MTP counts, how many stages follow the first one
    holding MTP, and the first structural problem (None when there is none).  Every value None without
    a layout."""
    out = dict.fromkeys(FACT_FIELDS)
    if not isinstance(text, str):
        return out
    try:
        parts = stages(text)
    except LayoutTextError as exc:
        out["pipeline_layout_problem"] = str(exc)
        return out
    flat = "".join(parts)
    out.update(pipeline_layout_stages=len(parts), pipeline_layout_decoder_layers=flat.count("t"),
               pipeline_layout_mtp_layers=flat.count("m"), pipeline_layout_problem=_problem(parts),
               pipeline_layout_stages_after_mtp=next((len(parts) - 1 - i for i, p in enumerate(parts) if "m" in p),
                                                     None))
    return out


def implied_vpp(stages_count, pp) -> int | None:
    """The VPP megatron-core (TransformerConfig) and Megatron-LM (validate_args) take from a layout of
    ``stages_count`` virtual stages when none is given: stages / pp, where that is above 1."""
    if isinstance(stages_count, int) and isinstance(pp, int) and pp > 0 and stages_count % pp == 0 \
            and stages_count > pp:
        return stages_count // pp
    return None
