#!/bin/bash
# A small GPT with 8 experts (GELU, LayerNorm, learned positions) on one H100 node:
# the style of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh, shrunk.

GPUS_PER_NODE=8
VOCAB_FILE=${GPT2_DIR}/gpt2-vocab.json
MERGE_FILE=${GPT2_DIR}/gpt2-merges.txt
DATA_PATH=${DATA_ROOT}/gpt2_text_document

DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes 1)

GPT_MODEL_ARGS=(
    --num-layers 12
    --hidden-size 768
    --num-attention-heads 12
    --seq-length 1024
    --max-position-embeddings 1024
    --vocab-size 50304  # GPT-2's 50257 padded to a multiple of 128
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

MOE_ARGS=(--num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2 --moe-token-dispatcher-type alltoall)

TRAINING_ARGS=(
    --micro-batch-size 4
    --global-batch-size 256
    --train-iters 20000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --fp16
    --lr 6.0e-4
    --lr-decay-style cosine
    --min-lr 6.0e-5
    --lr-warmup-fraction .001
    --lr-decay-iters 20000
)

MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 2
	--sequence-parallel
	--expert-model-parallel-size 4
	--expert-tensor-parallel-size 1  # MoE layers with bias need ETP = 1
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --merge-file $MERGE_FILE
    --split 949,50,1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --eval-interval 1000
    --eval-iters 10
    --use-mcore-models
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${MOE_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
