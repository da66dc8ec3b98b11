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
# Adam step bytes per parameter of the rank's shard: read fp32 master, gradient, exp_avg,
# exp_avg_sq (16 B), write master, exp_avg, exp_avg_sq (12 B) and the bf16 weight (2 B), plus the
# gradient-norm read for clipping (4 B) - megatron-core optimizer/distrib_optimizer.py step.
ADAM_BYTES_PER_PARAM = 34
