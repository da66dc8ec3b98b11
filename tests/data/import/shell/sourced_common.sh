# Sourced by sourced.sh (not a launch itself): the model and the layout.
MODEL_ARGS=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1024)
TP=2
PP=2
