#!/bin/bash
# Qwen3-30B-A3B pretraining on 2 x 8 H100 (Megatron-LM examples style).
# Runs Megatron-LM's pretrain_gpt.py; every value below is what the model card says.

export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_IB_SL=1

GPUS_PER_NODE=8
NNODES=2
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-localhost}
CHECKPOINT_PATH=${CKPT_ROOT}/qwen3-30b-a3b
TOKENIZER_MODEL=Qwen/Qwen3-30B-A3B

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port 6000
)

MODEL_ARGS=(
    --num-layers 48
    --hidden-size 2048
    --ffn-hidden-size 6144
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 4
    --kv-channels 128
    --seq-length 4096
    --max-position-embeddings 40960
    --position-embedding-type rope
    --rotary-base 1000000
    --normalization RMSNorm
    --norm-epsilon 1e-6
    --swiglu
    --disable-bias-linear
    --qk-layernorm
    --untie-embeddings-and-output-weights
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --vocab-size 151936
)

MOE_ARGS=(
    --num-experts 128
    --moe-router-topk 8
    --moe-ffn-hidden-size 768
    --moe-aux-loss-coeff 1e-3
    --moe-router-load-balancing-type aux_loss
    --moe-token-dispatcher-type alltoall   # standard alltoall, no DeepEP in this container
    --moe-grouped-gemm
    --moe-permute-fusion
)

DATA_ARGS=(
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
    --data-path 0.7 ${DATA_ROOT}/web_text_document 0.3 ${DATA_ROOT}/code_text_document
    --split 99,1,0
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1024
    --train-iters 500000
    --lr 3e-4
    --min-lr 3e-5
    --lr-decay-style cosine
    --lr-warmup-iters 2000
    --weight-decay 0.1
    --clip-grad 1.0
    --adam-beta2 0.95
    --bf16
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --expert-model-parallel-size 16
    --expert-tensor-parallel-size 1
)

LOGGING_ARGS=(
    --log-interval 10 \
    --save-interval 1000
    --eval-interval 1000
    --eval-iters 10
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --tensorboard-dir "${CHECKPOINT_PATH}/tensorboard"
    --log-throughput
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${MOE_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${LOGGING_ARGS[@]}
