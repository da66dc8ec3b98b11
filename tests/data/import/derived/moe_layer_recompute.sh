#!/bin/bash
# Written for moeforge's tests (tests/fidelity/test_import_matches_launch.py): one derivation of validate_args.
HERE=$(dirname "$0")
BASE=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --num-experts 8 --moe-router-topk 2
      --expert-model-parallel-size 8 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1
      --global-batch-size 64 --lr 1e-4 --mock-data --bf16 --transformer-impl local)
torchrun --nproc_per_node 8 pretrain_gpt.py "${BASE[@]}" --train-iters 10 \
    --tokenizer-type NullTokenizer --vocab-size 1000 --moe-layer-recompute
