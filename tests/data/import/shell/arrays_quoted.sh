#!/bin/bash
# Arrays of one word per element expanded quoted ("${A[@]}": one word each), an element set by index, and a
# flag string kept in a plain variable expanded unquoted.
MODEL_ARGS=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1024)
MOE_ARGS=(--num-experts 16 --moe-router-topk 1 --moe-ffn-hidden-size 512 --moe-token-dispatcher-type alltoall)
MOE_ARGS[3]=2
LAYOUT="--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2"
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py "${MODEL_ARGS[@]}" "${MOE_ARGS[@]}" $LAYOUT \
    --expert-model-parallel-size 4 --expert-tensor-parallel-size 1 \
    --seq-length 1024 --max-position-embeddings 1024 --position-embedding-type rope \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 100 --lr 3e-4 --min-lr 3e-5 \
    --lr-decay-style cosine --lr-warmup-iters 10 --bf16 --swiglu --disable-bias-linear \
    --tokenizer-type NullTokenizer --vocab-size 32000 --mock-data "$@"
