#!/bin/bash
# `source` of a file beside the script, found through the script's own directory.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${HERE}/sourced_common.sh"
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py "${MODEL_ARGS[@]}" \
    --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512 --moe-token-dispatcher-type alltoall \
    --tensor-model-parallel-size $TP --sequence-parallel --pipeline-model-parallel-size $PP \
    --expert-model-parallel-size 4 --expert-tensor-parallel-size 1 \
    --seq-length 1024 --max-position-embeddings 1024 --position-embedding-type rope \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 100 --lr 3e-4 --min-lr 3e-5 \
    --lr-decay-style cosine --lr-warmup-iters 10 --bf16 --swiglu --disable-bias-linear \
    --tokenizer-type NullTokenizer --vocab-size 32000 --mock-data
