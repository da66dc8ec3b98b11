"""Which decoder layers are MoE and which are linear attention, as megatron-core reads the two per-layer
patterns (moe_layer_freq, linear_attention_freq: an integer frequency or one 0/1 entry per layer).

One owner: the memory and FLOPs models count layers by kind, and the rules ask about the last decoder layer,
whose spec megatron-core (and Megatron-LM's gpt_builders) give the MTP layers.
"""
from __future__ import annotations

GATED_DELTA_NET = "gated_delta_net"  # megatron-core's one linear attention variant (is_linear_attention_variant)


def moe_layer(freq, number: int) -> bool:
    """1-based layer ``number`` is MoE: an integer N selects layers 1, N+1, 2N+1, ... (gpt_layer_specs.py
    get_gpt_decoder_block_spec: i % N == 0 for 0-based i); a list, its 1 entries."""
    if isinstance(freq, list):
        return bool(freq[number - 1])
    return (number - 1) % (freq or 1) == 0


def linear_attention_layer(variant, freq, number: int) -> bool:
    """1-based layer ``number`` is Gated DeltaNet: an integer N makes every Nth layer softmax attention and the
    rest linear; a list, its 1 entries (experimental_attention_variant_module_specs.py
    get_linear_attention_pattern: 1 linear attention, 0 softmax)."""
    if variant != GATED_DELTA_NET:
        return False
    if isinstance(freq, list):
        return bool(freq[number - 1])
    return number % (freq or 1) != 0


def list_entries(freq) -> int | None:
    """How many entries a per-layer pattern has; None for an integer frequency (or unset)."""
    return len(freq) if isinstance(freq, list) else None


def fits_layers(freq, num_layers) -> bool:
    """megatron-core can read the pattern for ``num_layers`` decoder layers: an integer (or unset), or a list
    of exactly that many entries (its layer specs assert so when they are built)."""
    return list_entries(freq) in (None, num_layers) or not isinstance(num_layers, int)


def _last(freq, num_layers, kind) -> bool | None:
    """``kind`` of the last decoder layer (a list: its last entry, whatever its length, which
    *_ONE_ENTRY_PER_LAYER refuses); None where the pattern cannot say (an expression, no layer count)."""
    if isinstance(freq, list):
        return bool(freq[-1]) if freq else None
    if freq is None or (isinstance(freq, int) and not isinstance(freq, bool) and freq > 0):
        return kind(num_layers) if isinstance(num_layers, int) else None
    return None


def last_layer_moe(freq, num_layers) -> bool | None:
    """Whether the last decoder layer is MoE (None: cannot say)."""
    return _last(freq, num_layers, lambda n: moe_layer(freq, n))


def last_layer_linear_attention(variant, freq, num_layers) -> bool | None:
    """Whether the last decoder layer is linear attention (None: cannot say)."""
    if variant != GATED_DELTA_NET:
        return False
    return _last(freq, num_layers, lambda n: linear_attention_layer(variant, freq, n))
