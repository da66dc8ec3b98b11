"""Megatron-LM's datasets for pretrain(): the GPT dataset config, the checks before step 1, the provider.

Why: megatron-core >= 0.17 wheels ship ``megatron/training`` but not ``pretrain_gpt.py``, whose dataset
provider pretrain() is handed; these follow Megatron-LM core_v0.19.0's pretrain_gpt.py for plain
pretraining, and check before anything is built that every dataset was made with the plan's tokenizer.
"""

from __future__ import annotations

from functools import partial

from ..errors import PlanError


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

    from ..plan import inputs

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
