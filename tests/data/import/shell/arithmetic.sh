#!/bin/bash
# Arithmetic expansion: sizes computed from others.
GPUS_PER_NODE=8
NODES=2
PP=2
TP=2
DP=$(( GPUS_PER_NODE * NODES / (TP * PP) ))
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NODES pretrain_gpt.py \
    --num-layers $((PP * 4)) --hidden-size $((64 * 8)) --num-attention-heads 8 --ffn-hidden-size $((512 << 1)) \
    --num-experts $((DP * 4)) --moe-router-topk 2 --moe-ffn-hidden-size 512 --moe-token-dispatcher-type alltoall \
    --tensor-model-parallel-size $TP --sequence-parallel --pipeline-model-parallel-size $((PP*1)) \
    --expert-model-parallel-size $DP --expert-tensor-parallel-size $((TP / 2)) \
    --seq-length 1024 --max-position-embeddings 1024 --position-embedding-type rope \
    --micro-batch-size 1 --global-batch-size $((DP * 16)) --train-iters $((10 ** 2)) --lr 3e-4 --min-lr 3e-5 \
    --lr-decay-style cosine --lr-warmup-iters $((100 % 30)) --bf16 --swiglu --disable-bias-linear \
    --tokenizer-type NullTokenizer --vocab-size 32000 --mock-data
