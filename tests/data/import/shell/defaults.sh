#!/bin/bash
# Parameter expansion with defaults, nested: the variables are not set, so the innermost default applies.
TP=${TENSOR_PARALLEL:-${TP_SIZE:-2}}
EP=${EXPERT_PARALLEL:-${EP_SIZE:-4}}
ITERS=${TRAIN_ITERS:=100}
LR=${LR:-3e-4}
torchrun --nproc_per_node 8 --nnodes ${NNODES:-2} pretrain_gpt.py \
    --num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1024 \
    --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512 --moe-token-dispatcher-type alltoall \
    --tensor-model-parallel-size $TP --sequence-parallel --pipeline-model-parallel-size ${PP:-${PIPELINE:-2}} \
    --expert-model-parallel-size $EP --expert-tensor-parallel-size 1 \
    --seq-length 1024 --max-position-embeddings 1024 --position-embedding-type rope \
    --micro-batch-size 1 --global-batch-size 64 --train-iters $ITERS --lr $LR --min-lr ${MIN_LR:-3e-5} \
    --lr-decay-style cosine --lr-warmup-iters 10 --bf16 --swiglu --disable-bias-linear \
    --tokenizer-type NullTokenizer --vocab-size 32000 --mock-data
