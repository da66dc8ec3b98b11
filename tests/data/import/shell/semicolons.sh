#!/bin/bash
# Several assignments on one line, separated by `;` (each its own statement).
TP=2; PP=2; EP=4; ETP=1
LAYERS=8; HIDDEN=512 ;HEADS=8
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
    --num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads $HEADS --ffn-hidden-size 1024 \
    --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512 --moe-token-dispatcher-type alltoall \
    --tensor-model-parallel-size $TP --sequence-parallel --pipeline-model-parallel-size $PP \
    --expert-model-parallel-size $EP --expert-tensor-parallel-size $ETP \
    --seq-length 1024 --max-position-embeddings 1024 --position-embedding-type rope \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 100 --lr 3e-4 --min-lr 3e-5 \
    --lr-decay-style cosine --lr-warmup-iters 10 --bf16 --swiglu --disable-bias-linear \
    --tokenizer-type NullTokenizer --vocab-size 32000 --mock-data
