"""Fitting the memory model's activation and allocator terms to measured peaks per rank.

measured peak = weights + gradients + optimizer state (exact: the parameter counts are megatron-core's)
              + activation_scale x activations (compiler/estimate/activations.py)
              + the allowance (all a rank holds beyond those: allocator fragmentation, the CUDA context,
                communicator buffers; on CPU the process itself)

Linear in the two unknowns: bounded linear least squares (scipy.optimize.lsq_linear).  How a peak was
measured decides what it sees: ``allocated`` (torch.cuda.max_memory_allocated, Megatron-LM's "max
allocated") sees no allowance, so those runs get an intercept of their own that the estimates do not
use; ``reserved`` and ``rss`` see it.  Reported separately from the step time.
"""
from __future__ import annotations

from dataclasses import dataclass

from moeforge.compiler.estimate import memory
from moeforge.compiler.knobs.layout import Layout

SEES_ALLOWANCE = {"reserved": True, "rss": True, "allocated": False}
CONDITION_LIMIT = 1e3


@dataclass
class MemoryFit:
    values: dict          # activation_scale, allowance_bytes (when a run saw it), allocated_offset_bytes
    stderr: dict
    before: list          # bytes, the fixed model as the measurement sees it
    after: list
    loo: list
    measured: list
    names: list           # run names


def _terms(run) -> tuple[float, float]:
    """(weights + gradients + optimizer, activations) of the run's largest rank, fixed model, bytes."""
    lay = Layout.from_plan(run.plan["layout"])
    est, _ = memory.peak(run.plan, lay, calibration=None)
    return float(est.weights + est.gradients + est.optimizer), float(est.activations)


def _design(runs, kinds: list[str], fix_scale: bool):
    import numpy as np  # lazy: numpy only when a fit runs

    rows, y = [], []
    for r in runs:
        states, acts = _terms(r)
        row = [] if fix_scale else [acts]
        row += [1.0 if r.peak_source == k else 0.0 for k in kinds]
        rows.append(row)
        y.append(r.peak_bytes - states - (acts if fix_scale else 0.0))
    return np.array(rows, dtype=float), np.array(y, dtype=float)


def _columns(kinds: list[str], fix_scale: bool) -> list[str]:
    return ([] if fix_scale else ["activation_scale"]) + [
        "allowance_bytes" if SEES_ALLOWANCE[k] else "allocated_offset_bytes" for k in kinds]


def problems(runs, fix_scale: bool) -> list[str]:
    """One line per memory term the runs cannot determine, with the run that would settle it."""
    import numpy as np  # lazy: numpy only when a fit runs

    kinds = sorted({r.peak_source for r in runs})
    A, _ = _design(runs, kinds, fix_scale)
    names = _columns(kinds, fix_scale)
    out = []
    if len(runs) < len(names) or not fix_scale and np.ptp(A[:, 0]) <= 1e-9 * max(1.0, abs(A[:, 0]).max()):
        if not fix_scale:
            out.append("activation_scale: every run keeps the same activations, so scale and allowance cannot be "
                       f"told apart; a run like {runs[0].name} with --set training.micro_batch_size="
                       f"{runs[0].plan['training']['micro_batch_size'] * 2} (or a longer training.seq_length) "
                       "would settle it; or keep the fixed scale: --fix activation_scale")
        return out
    norms = np.linalg.norm(A, axis=0)
    s = np.linalg.svd(A / np.where(norms > 0, norms, 1), compute_uv=False)
    if s[-1] * CONDITION_LIMIT < s[0]:
        out.append(f"{' and '.join(names)}: the runs' activations barely differ, so the activation scale and the "
                   "allowance cannot be told apart; a run with more micro-batches in flight or a longer sequence "
                   "would settle it; or --fix activation_scale")
    return out


def fit_memory(runs, fix_scale: bool = False, loo: bool = True) -> MemoryFit:
    """Bounded linear least squares of the measured peaks on the memory model's terms, with leave-one-out errors."""
    import numpy as np  # lazy: numpy and scipy only when a fit runs (`moeforge calibrate`)
    from scipy.optimize import lsq_linear  # lazy: as above

    kinds = sorted({r.peak_source for r in runs})
    names = _columns(kinds, fix_scale)
    lower = [0.0] * len(names)
    upper = [np.inf] * len(names)
    if not fix_scale:
        upper[0] = 20.0

    def solve(subset):
        A, y = _design(subset, kinds, fix_scale)
        res = lsq_linear(A, y, bounds=(lower, upper))
        return res.x, A, y

    x, A, y = solve(runs)
    values = {n: float(v) for n, v in zip(names, x)}
    stderr = dict.fromkeys(names)
    dof = len(runs) - len(names)
    if dof > 0:
        resid = A @ x - y
        try:
            cov = np.linalg.inv(A.T @ A) * float(resid @ resid) / dof
            stderr = {n: float(np.sqrt(max(cov[i, i], 0.0))) for i, n in enumerate(names)}
        except np.linalg.LinAlgError:
            pass
    terms = [_terms(r) for r in runs]

    def predict(vals: dict, r, t) -> float:
        scale = 1.0 if fix_scale else vals["activation_scale"]
        key = "allowance_bytes" if SEES_ALLOWANCE[r.peak_source] else "allocated_offset_bytes"
        return t[0] + scale * t[1] + vals.get(key, 0.0)

    before = [t[0] + t[1] + (memory.ALLOWANCE_BYTES if SEES_ALLOWANCE[r.peak_source] else 0) for r, t in zip(runs, terms)]
    after = [predict(values, r, t) for r, t in zip(runs, terms)]
    out_loo = []
    if loo:
        for i in range(len(runs)):
            others = runs[:i] + runs[i + 1:]
            if not others or {r.peak_source for r in others} != set(kinds) or problems(others, fix_scale):
                out_loo.append(None)
                continue
            xi, _, _ = solve(others)
            out_loo.append(predict(dict(zip(names, map(float, xi))), runs[i], terms[i]))
    return MemoryFit(values, stderr, before, after, out_loo, [r.peak_bytes for r in runs], [r.name for r in runs])
