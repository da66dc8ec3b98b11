"""moeforge compiler: YAML recipes -> checked, solved, emitted Megatron launches.

Never imports torch, megatron or transformer_engine (a test enforces it).
"""
__version__ = "0.1.0"
