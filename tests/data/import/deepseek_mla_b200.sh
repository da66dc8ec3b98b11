#!/usr/bin/env bash
# A DeepSeek-style MoE with multi-latent attention on 4 x 8 B200, BF16.
set -euo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=32
export NVTE_FWD_LAYERNORM_SM_MARGIN=20 NVTE_BWD_LAYERNORM_SM_MARGIN=20

NUM_NODES=4
GPUS=8
OUT=${OUT:-/checkpoints/dsv3-mini}

ARCH=(--num-layers 16 --hidden-size 2048 --ffn-hidden-size 10944 --num-attention-heads 16)
ARCH+=(--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128
       --qk-pos-emb-head-dim 64 --v-head-dim 128)
ARCH+=(--position-embedding-type rope --rope-type yarn --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0)
ARCH+=(--normalization RMSNorm --norm-epsilon 1e-6 --swiglu --disable-bias-linear --qk-layernorm
       --untie-embeddings-and-output-weights --vocab-size 129280 --max-position-embeddings 163840
       --attention-dropout 0.0 --hidden-dropout 0.0 --init-method-std 0.006)

MOE=(
  --num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 1408
  --moe-shared-expert-intermediate-size 2816
  --moe-layer-freq "([0]*1+[1]*15)"       # first layer dense
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias
  --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4
  --moe-router-dtype fp32
  --moe-token-dispatcher-type alltoall
  --moe-grouped-gemm
)

PAR="--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 8 \
     --expert-tensor-parallel-size 1"

python -m torch.distributed.run --nnodes $NUM_NODES --nproc-per-node $GPUS \
  pretrain_gpt.py "${ARCH[@]}" "${MOE[@]}" $PAR \
  --micro-batch-size 1 --global-batch-size 512 --seq-length 4096 --train-iters 20000 \
  --lr 2e-4 --min-lr 2e-5 --lr-decay-style WSD --lr-wsd-decay-iters 2000 --lr-warmup-fraction 0.01 \
  --bf16 --use-distributed-optimizer \
  --recompute-granularity selective --recompute-modules mla_up_proj moe_act \
  --mock-data --tokenizer-type NullTokenizer \
  --save "$OUT" --save-interval 500 --async-save --use-persistent-ckpt-worker \
  --eval-iters 0 --distributed-timeout-minutes 60
