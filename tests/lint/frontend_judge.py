"""What a Megatron front-end itself says about flat configurations (run under .venv312).

    .venv312/bin/python tests/lint/frontend_judge.py KIND < configs.json > verdicts.json

KIND is one of:

- mcore:       megatron-core's TransformerConfig(**config) (ModelParallelConfig/TransformerConfig
               __post_init__), pipeline_dtype=bfloat16 with PP > 1 as every front-end sets it;
- megatron-lm: Megatron-LM's parse_args() defaults, the configuration set on the namespace under
               Megatron-LM's dests, validate_args(), then core_transformer_config_from_args() (what
               pretrain_gpt builds, i.e. TransformerConfig.__post_init__ on the validated arguments);
- bridge:      Megatron-Bridge's CommOverlapConfig (finalize + setup), the provider's finalize()
               (Bridge's pre-processing + megatron-core's __post_init__) and the checks
               GPTModelProvider.provide() makes before building (CUDA-graph configuration, TE RNG
               tracker). megatron.bridge is imported the way tests/fidelity/bridge_judge.py imports it
               (Transformer-Engine-free placeholders, shared code). Needs megatron-bridge.

Input: a JSON list of flat configurations (Megatron field names, plus world_size). Output, on stdout
and nothing else there (Megatron's prints and logging go to stderr): one JSON object per configuration: {"ok": bool, "error": text or null, "kind": exception class or null,
"warnings": [...]}. An exception other than AssertionError/ValueError is reported with ok false
and kind set, so the caller can tell a harness problem from a verdict.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import warnings

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
warnings.simplefilter("ignore")

# Megatron-LM dests that differ from the megatron-core field name
LM_DEST = {"num_moe_experts": "num_experts", "use_te_rng_tracker": "te_rng_tracker",
           "fp8_param": "fp8_param_gather", "fp4_param": "fp4_param_gather",
           "num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
           "num_layers_in_last_pipeline_stage": "decoder_last_pipeline_num_layers"}


def _activation(kw: dict) -> dict:
    """activation_func by name (as lint-config reads it) as megatron-core's callable."""
    if isinstance(kw.get("activation_func"), str):
        import torch.nn.functional as F

        from megatron.core.activations import squared_relu
        from megatron.core.fusions.fused_bias_geglu import quick_gelu  # the object TransformerConfig compares

        kw = {**kw, "activation_func": {"gelu": F.gelu, "silu": F.silu, "quick_gelu": quick_gelu,
                                        "squared_relu": squared_relu}[kw["activation_func"]]}
    return kw


def _verdict(fn, cfg):
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        try:
            fn(cfg)
        except (AssertionError, ValueError) as exc:
            return {"ok": False, "error": str(exc), "kind": None, "warnings": []}
        except BaseException as exc:  # noqa: BLE001 - a harness problem, reported as such
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "kind": type(exc).__name__,
                    "warnings": []}
    return {"ok": True, "error": None, "kind": None,
            "warnings": [str(w.message) for w in caught] + out.getvalue().splitlines()}


def _mcore(cfg):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    kw = _activation({k: v for k, v in cfg.items() if k != "world_size"})
    if kw.get("pipeline_model_parallel_size", 1) > 1:
        kw["pipeline_dtype"] = torch.bfloat16
    TransformerConfig(**kw)


_LM_DEFAULTS = None


def _lm_defaults():
    global _LM_DEFAULTS
    if _LM_DEFAULTS is None:
        from megatron.training.arguments import parse_args

        argv, sys.argv = sys.argv, ["pretrain_gpt.py"]
        try:
            _LM_DEFAULTS = vars(parse_args(ignore_unknown_args=True))
        finally:
            sys.argv = argv
    return _LM_DEFAULTS


def _lm(cfg):
    import argparse

    from megatron.training.argument_utils import core_transformer_config_from_args
    from megatron.training.arguments import validate_args

    import torch

    import megatron.training.arguments as lm_arguments

    # validate_args asks the GPU (grouped GEMM needs compute capability >= 8; TP/CP > 1 reads the
    # architecture for CUDA_DEVICE_MAX_CONNECTIONS): answer as a Hopper would
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    lm_arguments.get_device_arch_version = lambda: 9
    args = argparse.Namespace(**_lm_defaults())
    args.rank = 0
    args.world_size = cfg.get("world_size", 1)
    args.seq_length = args.max_position_embeddings = 128
    args.micro_batch_size = 1
    args.train_iters, args.lr, args.mock_data = 10, 1e-4, True
    args.tokenizer_type, args.vocab_size = "NullTokenizer", 1024
    args.position_embedding_type = "rope"  # the MoE models use RoPE (MTP refuses learned_absolute)
    args.apply_rope_fusion = False  # the fused RoPE kernel needs Transformer Engine, absent here
    # the activation by Megatron-LM's flags (none: GELU), its fusion by the flag of that activation
    act, gated = cfg.get("activation_func", "gelu"), cfg.get("gated_linear_unit", False)
    flag = {("silu", True): "swiglu", ("quick_gelu", True): "quick_geglu", ("squared_relu", False): "squared_relu",
            ("gelu", False): None}[(act, gated)]
    if flag:
        setattr(args, flag, True)
    for key, value in cfg.items():
        if key in ("world_size", "activation_func", "gated_linear_unit"):
            continue
        if key == "bias_activation_fusion":
            setattr(args, "bias_swiglu_fusion" if flag == "swiglu" else "bias_gelu_fusion", value)
            continue
        if key == "virtual_pipeline_model_parallel_size":
            args.num_virtual_stages_per_pipeline_rank = value
            continue
        if key == "cuda_graph_scope":
            args.cuda_graph_modules = value
            continue
        setattr(args, LM_DEST.get(key, key), value)
        if key == "num_query_groups" and value is not None:
            args.group_query_attention = True  # Megatron-LM reads num_query_groups only with this flag
    validate_args(args, {})
    core_transformer_config_from_args(args)


def _bridge_import():
    """megatron.bridge without Transformer Engine, the way the fidelity judge imports it (shared code)."""
    from pathlib import Path

    fidelity = str(Path(__file__).resolve().parents[1] / "fidelity")
    if fidelity not in sys.path:
        sys.path.insert(0, fidelity)
    import logging

    from bridge_judge import install_te_free_bridge

    logging.disable(logging.WARNING)  # Bridge logs INFO lines on import
    install_te_free_bridge()
    import megatron.bridge.training.comm_overlap  # noqa: F401


def _bridge(cfg):
    import torch
    from megatron.bridge.models.gpt_provider import GPTModelProvider
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.config import DistributedDataParallelConfig, OptimizerConfig

    skip = ("world_size", "overlap_grad_reduce", "overlap_param_gather", "use_distributed_optimizer")
    model_kw = _activation({k: v for k, v in cfg.items() if k not in skip})
    model = GPTModelProvider(**model_kw)
    if model.pipeline_model_parallel_size > 1:
        model.pipeline_dtype = torch.bfloat16
    dp = cfg.get("world_size", 1) // (model.tensor_model_parallel_size * model.pipeline_model_parallel_size
                                      * model.context_parallel_size)
    ddp = DistributedDataParallelConfig(use_distributed_optimizer=cfg.get("use_distributed_optimizer", False))
    optimizer = OptimizerConfig(optimizer="adam", lr=1e-4, use_distributed_optimizer=ddp.use_distributed_optimizer,
                                bf16=bool(cfg.get("bf16")), fp16=bool(cfg.get("fp16")))
    overlap = CommOverlapConfig(tp_comm_overlap=bool(cfg.get("tp_comm_overlap", False)), data_parallel_size=dp,
                                overlap_moe_expert_parallel_comm=cfg.get("overlap_moe_expert_parallel_comm"),
                                delay_wgrad_compute=cfg.get("delay_wgrad_compute"))
    overlap.finalize()
    try:
        overlap.setup(model, optimizer, ddp)
    except TypeError as exc:  # Bridge's own check crashes (e.g. num_moe_experts None > 1): it refuses
        raise ValueError(f"CommOverlapConfig.setup raises {type(exc).__name__}: {exc}") from exc
    model.finalize()
    # GPTModelProvider.provide() checks these before it builds anything (gpt_provider.py, 0.6.2)
    from megatron.bridge.utils.cuda_graph import validate_cuda_graph_configuration

    validate_cuda_graph_configuration(model)
    if model.cuda_graph_impl != "none":
        assert getattr(model, "use_te_rng_tracker", False), (
            "Transformer engine's RNG tracker is required for cudagraphs, it can be "
            "enabled with use_te_rng_tracker=True'.")


JUDGES = {"mcore": _mcore, "megatron-lm": _lm, "bridge": _bridge}


def main(kind: str) -> int:
    configs = json.load(sys.stdin)
    judge = JUDGES[kind]
    # stdout carries the JSON answer only: whatever Megatron prints or logs there (Bridge's INFO
    # logging, C-level prints) goes to stderr, at the file-descriptor level
    sys.stdout.flush()
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        if kind == "bridge":
            try:
                _bridge_import()
            except Exception as exc:  # noqa: BLE001
                json.dump({"unavailable": f"{type(exc).__name__}: {exc}"}, answer)
                return 0
        verdicts = [_verdict(judge, cfg) for cfg in configs]
        json.dump({"verdicts": verdicts}, answer)
    finally:
        answer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
