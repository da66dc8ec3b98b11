"""The GPT pieces of Megatron-LM's pretrain_gpt.py that its wheel does not ship.

Why: megatron-core >= 0.17 wheels carry ``megatron/training`` (pretrain(), checkpoints, data
samplers, schedules, logging) but not the repository's ``pretrain_gpt.py``, whose batch, loss
and dataset functions pretrain() is handed.  These follow Megatron-LM core_v0.19.0's
pretrain_gpt.py for plain (non-SFT, non-FIM) pretraining, so the data path, the per-token loss
report and the EP-overlap ``return_schedule_plan`` hook are the ones Megatron-LM runs.
"""

from __future__ import annotations

import inspect
from functools import partial

import torch

from .errors import PlanError

BATCH_KEYS = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")


def dataset_config(args):
    """GPTDatasetConfig from Megatron-LM's arguments (pretrain_gpt.core_gpt_dataset_config_from_args)."""
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    from megatron.training.utils import get_blend_and_blend_per_split

    blend, blend_per_split = get_blend_and_blend_per_split(args)
    return GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=blend,
        blend_per_split=blend_per_split,
        split=args.split,
        multiple_validation_sets=args.multiple_validation_sets,
        full_validation=args.full_validation,
        num_dataset_builder_threads=args.num_dataset_builder_threads,
        path_to_cache=args.data_cache_path,
        mmap_bin_files=args.mmap_bin_files,
        tokenizer=build_tokenizer(args),
        reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask,
        eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
        mid_level_dataset_surplus=args.mid_level_dataset_surplus,
        allow_ambiguous_pad_tokens=args.allow_ambiguous_pad_tokens,
        context_parallel_size=args.context_parallel_size,
        data_parallel_size=args.data_parallel_size,
        sequence_parallel_size=args.tensor_model_parallel_size * args.sequence_parallel,
    )


def check_data(args, plan) -> None:
    """Before step 1: the tokenizer fits the model, each dataset was made with the plan's
    tokenizer (the PREFIX.json `moeforge data prepare` writes), and every split gets documents."""
    from pathlib import Path

    from megatron.training import global_vars

    from . import inputs

    vocab = plan.model.get("vocab_size")
    tokenizer = global_vars.get_tokenizer()
    if vocab is not None and tokenizer is not None and tokenizer.vocab_size > vocab:
        raise PlanError(f"the tokenizer ({args.tokenizer_type} {args.tokenizer_model or ''}) has "
                        f"{tokenizer.vocab_size} ids but the model's vocabulary is {vocab}: token ids "
                        f"would index past the embedding (raise model.architecture.vocab_size)")
    planned = plan.raw.get("tokenizer") or {}
    for prefix in _prefixes(args):
        sidecar = Path(f"{prefix}.json")
        if not sidecar.is_file() or not planned.get("type"):
            continue
        meta = inputs.load_json(sidecar)
        made = (meta.get("tokenizer") if isinstance(meta, dict) else None) or {}
        made = made if isinstance(made, dict) else {}
        same = made.get("type") == planned["type"] and (
            planned.get("eod_id") is None or made.get("eod_id") == planned["eod_id"])
        if not same:
            raise PlanError(f"{prefix} was tokenized with the {made.get('type')} tokenizer "
                            f"(eod {made.get('eod_id')}, {sidecar.name}) but the plan trains with "
                            f"{planned['type']} (eod {planned.get('eod_id')}): prepare the data again "
                            f"with the plan's tokenizer, or set tokenizer.type to match")
    check_splits(args)


def _prefixes(args) -> list[str]:
    """--data-path is either PREFIX... or WEIGHT PREFIX WEIGHT PREFIX..."""
    paths = list(args.data_path or [])
    if len(paths) > 1:
        try:
            float(paths[0])
            return paths[1::2]
        except ValueError:
            pass
    return paths


def check_splits(args) -> None:
    """Every split with a non-zero weight must get at least one document of every dataset.

    Why: megatron-core builds a split's sample index by adding epochs until it has enough
    tokens; a split that received no documents (a small corpus with --split 969,30,1) adds zero
    tokens per epoch and the job hangs there without a message, before step 1.
    """
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix, parse_and_normalize_split)
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    if args.mock_data or not args.data_path or not args.split:
        return
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(args.split))
    names = ("train", "valid", "test")
    for prefix in _prefixes(args):
        documents = IndexedDataset(prefix).document_indices.shape[0] - 1
        for name, bounds in zip(names, matrix):
            if bounds is None:
                continue
            begin, end = (int(round(b * float(documents))) for b in bounds)
            if end <= begin:
                raise PlanError(
                    f"data.split {args.split!r} gives the {name} split no documents of {prefix} "
                    f"({documents} documents): megatron-core would loop forever building it. Give "
                    f"{name} a weight of 0 (e.g. data.split: \"{_zeroed(args.split, name)}\") or use a "
                    f"larger corpus")


def _zeroed(split: str, name: str) -> str:
    parts = [p.strip() for p in split.split(",")] + ["0"] * 3
    parts[("train", "valid", "test").index(name)] = "0"
    return ",".join(parts[:3])


def is_dataset_built_on_rank(vp_stage=None) -> bool:
    """TP rank 0 of the first and last pipeline stages reads data (pretrain_gpt.py)."""
    from megatron.core import mpu
    from megatron.training.utils import is_first_or_last_pipeline_stage

    return mpu.get_tensor_model_parallel_rank() == 0 and is_first_or_last_pipeline_stage(vp_stage)


def datasets_provider(train_val_test_num_samples, vp_stage=None):
    """(train, valid, test) GPT datasets: Megatron's MockGPTDataset or indexed GPTDataset blend."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, MockGPTDataset
    from megatron.training import get_args

    args = get_args()
    kind = MockGPTDataset if args.mock_data else GPTDataset
    return BlendedMegatronDatasetBuilder(
        kind, train_val_test_num_samples, partial(is_dataset_built_on_rank, vp_stage=vp_stage),
        dataset_config(args)).build()


datasets_provider.is_distributed = True  # pretrain_gpt.py: "Temporary for transition to core datasets"


def _mtp_on_this_rank(config, vp_stage) -> bool:
    """Whether this (virtual) pipeline stage holds MTP layers, which embed the tokens themselves
    (pretrain_gpt.py get_batch); megatron-core 0.17 asks for the config, 0.19 for its layout and depth."""
    if not getattr(config, "mtp_num_layers", None):
        return False
    from megatron.core.transformer.multi_token_prediction import mtp_on_this_rank

    if "config" in inspect.signature(mtp_on_this_rank).parameters:
        return mtp_on_this_rank(config, ignore_virtual=False, vp_stage=vp_stage)
    return mtp_on_this_rank(layout=config.pipeline_model_parallel_layout, mtp_num_layers=config.mtp_num_layers,
                            ignore_virtual=False, vp_stage=vp_stage)


def get_batch(data_iterator, vp_stage=None, config=None):
    """This rank's micro-batch: read on TP rank 0, broadcast over TP, sliced for CP.  With PP > 1 only
    the first and last stages and a stage holding MTP layers read one (``config``: the model chunk's)."""
    from megatron.core import mpu
    from megatron.core.utils import get_batch_on_this_cp_rank, get_batch_on_this_tp_rank
    from megatron.training import get_args
    from megatron.training.utils import is_first_or_last_pipeline_stage

    args = get_args()
    mtp_here = _mtp_on_this_rank(config, vp_stage)
    if not is_first_or_last_pipeline_stage(vp_stage) and not mtp_here:
        return {key: None for key in BATCH_KEYS}
    tp_rank = mpu.get_tensor_model_parallel_rank()
    batch = {}
    if tp_rank == 0:
        batch = next(data_iterator)
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
        batch = {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v)
                 for k, v in batch.items()}
        for key in BATCH_KEYS:
            batch.setdefault(key, None)
    batch = get_batch_on_this_tp_rank(
        batch, has_cu_seqlens=False, is_hybrid_cp=False,
        create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
        broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
        broadcast_group=mpu.get_tensor_model_parallel_group(),
        cp_size=args.context_parallel_size, tp_rank=tp_rank,
        micro_batch_size=args.micro_batch_size, seq_length=args.seq_length,
        mtp_on_this_rank=mtp_here,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
        is_pipeline_last_stage=mpu.is_pipeline_last_stage())
    if args.context_parallel_size > 1:
        batch = get_batch_on_this_cp_rank(batch, is_hybrid_cp=False,
                                          cp_group=mpu.get_context_parallel_group())
    return batch


def forward_step(data_iterator, model, return_schedule_plan: bool = False, loss_func=None):
    """pretrain()'s forward_step_func; the combined-1F1B EP-overlap schedule asks for a plan."""
    from megatron.core.utils import get_attr_wrapped_model

    batch = get_batch(data_iterator, get_attr_wrapped_model(model, "vp_stage"), get_attr_wrapped_model(model, "config"))
    args = (batch["tokens"], batch["position_ids"], batch["attention_mask"])
    kwargs = {"labels": batch["labels"], "loss_mask": batch["loss_mask"]}
    if return_schedule_plan:
        return model.build_schedule_plan(*args, **kwargs), partial(loss_func, batch["loss_mask"])
    return model(*args, **kwargs), partial(loss_func, batch["loss_mask"])
