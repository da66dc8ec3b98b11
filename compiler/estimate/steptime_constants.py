"""The step-time model's own constants (steptime.py), each with its source or calibration point.

Platform numbers (peak FLOP/s, bandwidths, efficiencies) live in the platform files
(recipes/platforms/*.yaml, ``performance``); these describe megatron-core's schedules and the
Adam step, the same on every machine.  docs/layout-model.md, section 6, has the calibration.
"""
# The combined-1F1B EP-overlap schedule (megatron-core pipeline_parallel/combined_1f1b) runs each
# overlapped layer as sub-modules on two streams joined by events, with the communication kernels
# taking SMs from the GEMMs: the overlapped micro-batches' layer compute runs this much slower.
# Calibrated (docs/layout-model.md, section 6: one grid fit of this and the platform's
# achievable_fraction over all the seeds' H100 step times); the two measurements that pin it are
# the EP16 saving (41.25 -> 31.31 s) and the EP4 loss (4889 -> 5538 ms).
EP_OVERLAP_SLOWDOWN = 0.15
# delay_wgrad_compute launches every local expert's weight-gradient GEMM again from a callback
# after the dispatch backward: a launch per local expert, MoE layer and micro-batch.  Calibrated
# against the Qwen3-Next-80B-A3B EP8 pair (4686 -> 4912 ms, seeds 004), the only measurement that
# separates it; the Qwen3-30B-A3B EP16 pair (31.31 vs 31.20 s, within noise) agrees within 1 %.
DWG_LAUNCH_S = 4.5e-6
# The output layer (logits GEMM [tokens, hidden] x [hidden, vocab], forward and both backward GEMMs,
# and each MTP depth's) is one GEMM far above the roofline ridge point, unlike the many small,
# memory-bound and element-wise kernels of a transformer layer that the platform's
# achievable_fraction describes.  It runs at this fraction of the datasheet peak: a large bf16
# GEMM's ~0.7, less the fused cross-entropy's passes over the [tokens, vocab] logits.  Bounded by a
# measurement (docs/layout-model.md, section 6): GPT-OSS-120B on 64 x H100, TP1 PP4 EP8, whose
# bottleneck is the stage holding the output layer (vocab 201088), Megatron-Bridge's published
# 5824 tokens/s/GPU (docs/performance-summary-archive.md, 26.04.01): estimated 1.32x slow at 0.22,
# 1.15x at 0.4, 1.11x at 0.5, 1.04x at 0.8.
OUTPUT_LAYER_FRACTION = 0.5
# Adam step bytes per parameter of the rank's shard: read fp32 master, gradient, exp_avg,
# exp_avg_sq (16 B), write master, exp_avg, exp_avg_sq (12 B) and the bf16 weight (2 B), plus the
# gradient-norm read for clipping (4 B) - megatron-core optimizer/distrib_optimizer.py step.
ADAM_BYTES_PER_PARAM = 34
FP32_STATE_BYTES = 12  # the FP32 master, exp_avg and exp_avg_sq inside it (each read and written once)
