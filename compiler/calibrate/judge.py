"""Whether a fit can be trusted, judged by what it predicts rather than by each constant alone.

Why by prediction: constants that the runs pin only together (achievable_fraction with elementwise_passes:
both move every run's compute) each carry a standard error near their value while the step they predict is
well pinned; refusing on the constants would refuse good fits.  A fit is weak when

  - its leave-one-out error (each run estimated by a fit without it) has a median over LOO_LIMIT,
  - a fitted value lies outside its physical range (compiler/estimate/calibration.py, PHYSICAL), or
  - some run's estimate has a propagated standard error (through the whole covariance) at least
    UNCERTAINTY_LIMIT of itself: the estimate is as uncertain as it is large.

`moeforge calibrate` refuses a weak fit, or writes it with --accept-weak marked weak, and every command that
uses it says "calibration: weak (...)".
"""
from __future__ import annotations

import statistics

from moeforge.compiler.estimate.calibration import GIB, outside_physical

LOO_LIMIT = 0.25          # the project's own cpu set: 14.8 % median (README, calibration); the goal is 25 %
UNCERTAINTY_LIMIT = 1.0   # an estimate whose standard error is as large as itself predicts nothing


def reasons(time_fit, mem_fit) -> list[str]:
    """One line per reason the fit is weak; [] for a fit to accept."""
    out = []
    for label, fit in (("step time", time_fit), ("peak memory", mem_fit)):
        if fit is None or not fit.loo:
            continue
        errs = [abs(e / m - 1) for e, m in zip(fit.loo, fit.measured) if e is not None and m]
        if not errs:
            out.append(f"{label}: no run can be left out (the others do not determine the fit), so nothing tests "
                       "its predictions")
        elif statistics.median(errs) > LOO_LIMIT:
            out.append(f"{label} leave-one-out median error {statistics.median(errs):.0%} > {LOO_LIMIT:.0%}")
    values = dict(time_fit.values) if time_fit is not None else {}
    if mem_fit is not None:
        values.update({k.replace("_bytes", "_gib"): v / GIB if k.endswith("_bytes") else v
                       for k, v in mem_fit.values.items()})
    out += outside_physical(values)
    if time_fit is not None and time_fit.uncertainty:
        worst = max(range(len(time_fit.uncertainty)), key=lambda i: time_fit.uncertainty[i])
        if time_fit.uncertainty[worst] >= UNCERTAINTY_LIMIT:
            loose = [n for n in time_fit.names if time_fit.stderr.get(n) is not None
                     and time_fit.stderr[n] >= time_fit.values[n] > 0]
            out.append(f"the step-time estimate is as uncertain as itself (±{time_fit.uncertainty[worst]:.0%} for "
                       f"run {worst + 1})" + (f": {', '.join(loose)} not pinned by the runs" if loose else ""))
    return out


def fixes() -> str:
    """What to do about a weak fit (the refusal's last line)."""
    return ("more runs, or runs that vary what the loose constants price (the table above), settle it; or keep a "
            "constant at its fixed value (--fix NAME; a memory term: --fix activation_scale, or --only time); or "
            "write it anyway, marked weak: --accept-weak")
