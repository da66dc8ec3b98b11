"""Kernel choices: fusions that keep the math but exist only under some conditions.

Megatron-LM turns its fusions on by default and off again where they cannot run; megatron-core
defaults them off. The plan states each one (compiler.knobs, `kernels.*`), so what Megatron-LM
rewrites at start-up must be known here.
"""
from . import Rule
from .expr import F

ARGS = "Megatron-LM megatron/training/arguments.py validate_args"

RULES = (
    Rule("ROPE_FUSION_NEEDS_PLAIN_ROPE", "warning", F("apply_rope_fusion") == True,  # noqa: E712
         F("position_embedding_type") == "rope",
         "the fused RoPE kernel applies to plain RoPE only; Megatron-LM turns it off for other position "
         "embeddings (YaRN, learned, none)", ARGS,
         "set kernels.apply_rope_fusion: false", None, origin="megatron-lm",
         silent={"apply_rope_fusion": False}),
    # validate_args reads args.spec[0]; moeforge never emits --spec (Megatron-LM's GPT builder imports a
    # <module function> pair from it, so no --spec value gives the local layer spec with this backend)
    Rule("ATTENTION_BACKEND_LOCAL_NOT_IN_MEGATRON_LM", "error", F("attention_backend") == "local",
         F("attention_backend") != "local",
         "Megatron-LM accepts attention_backend local only with --spec local, which its GPT model builder "
         "cannot load", ARGS, "set kernels.attention_backend: auto (or unfused for the non-fused kernel)",
         "--attention-backend local is only supported with --spec local", origin="megatron-lm"),
)
