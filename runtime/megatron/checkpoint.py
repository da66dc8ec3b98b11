"""Checkpoints under Megatron-LM: refuse the wrong model before loading, prune the old ones after.

Why: Megatron-LM compares only num_layers/hidden_size/heads with a bare assert (and with
dist_checkpointing a differing expert count or FFN width surfaces as a tensor-shape error deep in
the loader), so a resume is checked here first against the arguments the checkpoint was saved
with (the common state of torch_dist checkpoints), naming every differing field.  A changed parallel
layout is what torch_dist checkpoints reshard (dist_checkpointing): it is allowed and reported.
Megatron-LM has no "keep the last N checkpoints"; ``checkpoint.keep_last`` is done here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..plan import inputs
from ..errors import CheckpointMismatch

TRACKER = "latest_checkpointed_iteration.txt"
# Megatron-LM arguments that fix the shapes of the saved tensors.
SHAPE_ARGS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
              "group_query_attention", "kv_channels", "num_experts", "moe_ffn_hidden_size",
              "moe_router_topk", "moe_shared_expert_intermediate_size", "moe_layer_freq",
              "padded_vocab_size", "swiglu", "normalization", "position_embedding_type",
              "untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias", "qk_layernorm",
              "multi_latent_attention", "mtp_num_layers", "max_position_embeddings")
# Arguments that only change how the tensors are split across ranks.
LAYOUT_ARGS = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
               "virtual_pipeline_model_parallel_size", "context_parallel_size",
               "expert_model_parallel_size", "expert_tensor_parallel_size", "data_parallel_size",
               "use_distributed_optimizer")


def _value(ns, key: str):
    """An argument as the model uses it: Megatron-LM sets num_query_groups = num_attention_heads
    only later (when it first counts FLOPs), so without GQA both sides read the head count."""
    if key == "num_query_groups" and not getattr(ns, "group_query_attention", False):
        return getattr(ns, "num_attention_heads", None)
    return getattr(ns, key)


def latest(directory: str | None) -> tuple[int | None, Path | None]:
    """(iteration, directory) of the newest checkpoint under ``directory`` (Megatron-LM's tracker)."""
    if not directory:
        return None, None
    tracker = Path(directory) / TRACKER
    if not tracker.is_file():
        return None, None
    text = inputs.read_text(tracker, limit=4096, error=CheckpointMismatch).strip()
    if text == "release":
        return 0, Path(directory) / "release"
    if not (text.isascii() and text.isdigit()):
        raise CheckpointMismatch(f"{tracker}: {text[:40]!r} is not an iteration number (Megatron-LM writes "
                                 f"one; remove the damaged tracker, or set checkpoint.load: none)")
    return int(text), Path(directory) / f"iter_{int(text):07d}"


def saved_args(ckpt_dir: Path):
    """The argparse namespace a torch_dist checkpoint was saved with (None if it has none)."""
    from megatron.core import dist_checkpointing

    try:
        state = dist_checkpointing.load_common_state_dict(str(ckpt_dir))
    except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is reported, not raised
        raise CheckpointMismatch(f"cannot read the checkpoint {ckpt_dir}: {type(exc).__name__}: {exc} "
                                 f"(set checkpoint.load: none to start from scratch)") from None
    return state.get("args") if isinstance(state, dict) else None


def check_resume(plan, args) -> dict:
    """What the run resumes from; a checkpoint of another model shape raises CheckpointMismatch."""
    iteration, ckpt_dir = latest(getattr(args, "load", None))
    if iteration is None:
        return {"resumed_from": None}
    old = saved_args(ckpt_dir)
    info = {"resumed_from": str(ckpt_dir), "resumed_iteration": iteration}
    if old is None:
        return {**info, "verified": False}
    shape = [f"{k}: checkpoint {_value(old, k)!r}, this run {_value(args, k)!r}"
             for k in SHAPE_ARGS if hasattr(old, k) and hasattr(args, k)
             and _value(old, k) != _value(args, k)]
    if shape:
        raise CheckpointMismatch(
            f"the checkpoint {ckpt_dir} was saved by a different model: " + "; ".join(shape)
            + " (point checkpoint.load at a matching checkpoint, or set checkpoint.load: none to "
              "start from scratch)")
    layout = {k: [getattr(old, k), getattr(args, k)] for k in LAYOUT_ARGS
              if hasattr(old, k) and hasattr(args, k) and getattr(old, k) != getattr(args, k)}
    if layout and getattr(args, "ckpt_format", "torch_dist") != "torch_dist":
        field = next(iter(layout))
        raise CheckpointMismatch(
            f"the checkpoint {ckpt_dir} was saved with {field} = {layout[field][0]}, this run has "
            f"{layout[field][1]}; only torch_dist checkpoints reshard (checkpoint.format: torch_dist)")
    return {**info, "verified": True, "resharded": layout or None}


def prune(plan, args) -> list[str]:
    """Delete all but the newest ``checkpoint.keep_last`` iteration directories (rank 0 only).

    Only directories older than the one Megatron-LM's tracker names go: an asynchronous save
    still being written is newer than the tracker and never touched."""
    keep = (plan.raw.get("checkpoint") or {}).get("keep_last")
    save = getattr(args, "save", None)
    if not keep or not save or int(os.environ.get("RANK", "0")) != 0:
        return []
    newest, _ = latest(save)
    if newest is None:
        return []
    done = sorted(p for p in Path(save).glob("iter_*") if p.is_dir() and _iteration(p) <= newest)
    doomed = done[:-keep]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return [p.name for p in doomed]


def _iteration(path: Path) -> int:
    try:
        return int(path.name[len("iter_"):])
    except ValueError:
        return -1


def pruning_after_each_save(save_checkpoint_and_time, plan, args, pruned: list):
    """Megatron-LM's save_checkpoint_and_time, followed by keep_last pruning."""
    import functools

    @functools.wraps(save_checkpoint_and_time)
    def save(*a, **kw):
        result = save_checkpoint_and_time(*a, **kw)
        pruned.extend(prune(plan, args))
        return result

    return save


def guarded_load(load_checkpoint, resume: dict):
    """Megatron-LM's load_checkpoint, with a failure to reshard a changed layout, or a changed schedule
    (OptimizerParamScheduler's check), named as such with the recipe value that makes it load."""
    import functools

    @functools.wraps(load_checkpoint)
    def load(*args, **kwargs):
        try:
            return load_checkpoint(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - becomes one clear message, never a traceback
            changed = resume.get("resharded") or {}
            what = "; ".join(f"{k}: checkpoint {old}, this run {new}" for k, (old, new) in changed.items())
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if changed:
                raise CheckpointMismatch(
                    f"the checkpoint {resume['resumed_from']} was saved with another parallel layout "
                    f"({what}) and dist_checkpointing could not reshard it: {first} (resume with the "
                    f"checkpoint's layout, or start from it with fresh optimizer state by passing "
                    f"-- --no-load-optim)") from None
            if "OptimizerParamScheduler" in first:  # the schedule changed (e.g. train_iters raised to train longer)
                raise CheckpointMismatch(
                    f"the checkpoint {resume['resumed_from']} was saved with another LR/weight-decay schedule: "
                    f"{first} (set checkpoint.scheduler: plan to go on with this plan's schedule, e.g. to train "
                    f"longer, or checkpoint.scheduler: checkpoint to keep the checkpoint's)") from None
            raise CheckpointMismatch(f"loading {resume['resumed_from']} failed: {type(exc).__name__}: "
                                     f"{first}") from None

    return load
