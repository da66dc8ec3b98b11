#!/bin/bash
# export, declare -a, readonly, and local inside a function that builds the command's parallel flags.
export NNODES=2
readonly SEQ=1024
declare -a MODEL=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1024)
parallel_args() {
    local tp=$1 pp=$2
    PARALLEL="--tensor-model-parallel-size $tp --sequence-parallel --pipeline-model-parallel-size $pp"
}
parallel_args 2 2
torchrun --nproc_per_node 8 --nnodes $NNODES pretrain_gpt.py "${MODEL[@]}" \
    --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512 --moe-token-dispatcher-type alltoall \
    $PARALLEL \
    --expert-model-parallel-size 4 --expert-tensor-parallel-size 1 \
    --seq-length $SEQ --max-position-embeddings $SEQ --position-embedding-type rope \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 100 --lr 3e-4 --min-lr 3e-5 \
    --lr-decay-style cosine --lr-warmup-iters 10 --bf16 --swiglu --disable-bias-linear \
    --tokenizer-type NullTokenizer --vocab-size 32000 --mock-data
