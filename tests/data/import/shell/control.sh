#!/bin/bash
# Branches and loops over what the script itself knows: an if on a variable it sets, a case, a for loop over
# known words, `[ ] &&`, and a while loop over the script's (absent) arguments.
MODE=mock
while [[ $# -gt 0 ]]; do shift; done
if [[ "$MODE" == "mock" ]]; then
    DATA=(--tokenizer-type NullTokenizer --vocab-size 32000 --mock-data)
else
    DATA=(--data-path /data/corpus_text_document)
fi
case "$MODE" in
    real|indexed) LR=1e-4 ;;
    mock) LR=3e-4 ;;
esac
LAYOUT=""
for flag in "--tensor-model-parallel-size 2" "--sequence-parallel" "--pipeline-model-parallel-size 2"; do
    LAYOUT="$LAYOUT $flag"
done
[ -n "$LR" ] && MIN_LR=3e-5
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
    --num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1024 \
    --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512 --moe-token-dispatcher-type alltoall \
    $LAYOUT --expert-model-parallel-size 4 --expert-tensor-parallel-size 1 \
    --seq-length 1024 --max-position-embeddings 1024 --position-embedding-type rope \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 100 --lr $LR --min-lr $MIN_LR \
    --lr-decay-style cosine --lr-warmup-iters 10 --bf16 --swiglu --disable-bias-linear \
    "${DATA[@]}"
