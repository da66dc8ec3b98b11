"""Fitting the step-time constants to measured runs: nonlinear least squares on log(estimate / measured)
(scipy.optimize.least_squares, bounded), after checking that the runs determine every constant asked for.

The step-time model (compiler/estimate/steptime.py) is evaluated as it is, with the candidate constants
passed as a calibration: the fit cannot drift from what plan-layout computes.  Identifiability is read
from the Jacobian of the residuals in scaled units (each column: how much of each run's step one
constant moves): a column that no run moves is a constant no run exercises; a small singular value of the
column-normalised Jacobian is a combination the runs cannot separate.  For each, the fit is refused with
the constant named and a run that would settle it: one of the given runs with one `--set` changed
(micro-batches, layers, EP overlap, ...), found by adding that run's Jacobian row and asking again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from moeforge.compiler.estimate import calibration as calib
from moeforge.compiler.estimate import steptime
from moeforge.compiler.knobs.layout import Layout
from moeforge.compiler.calibrate import probes

# bounds in natural units (fractions and efficiencies are of a peak, so at most 1) and where a constant the
# platform has no value for starts: compiler/estimate/calibration.py, TIME_CONSTANTS
BOUNDS = {n: c.bounds for n, c in calib.TIME_CONSTANTS.items()}
CONDITION_LIMIT = 1e3      # largest/smallest singular value of the normalised Jacobian a fit accepts
EXERCISED = 1e-4           # a constant moving no run's log step time by more than this is not exercised


class UnderDetermined(ValueError):
    """The runs cannot determine some constants: one line per constant, each with what would settle it."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


@dataclass
class TimeFit:
    names: list
    values: dict                  # fitted constants
    fixed: dict                   # what they replace (the platform's or the fixed fallback)
    stderr: dict                  # None where the runs give exactly as many equations as constants
    before: list                  # estimate with the fixed constants, per run (s)
    after: list                   # with the fitted ones
    loo: list                     # leave-one-out estimate per run (None: the others do not determine the fit)
    measured: list
    kept: dict = field(default_factory=dict)   # constants not fitted, at their values
    uncertainty: list = field(default_factory=list)  # per run: the estimate's relative standard error
    jointly: list = field(default_factory=list)      # groups of constants the runs pin only together

    @staticmethod
    def error(est: list, measured: list) -> list:
        """Relative error per run (estimate / measured - 1); None where a run has no estimate."""
        return [None if e is None else e / m - 1 for e, m in zip(est, measured)]


class Model:
    """Step times of the runs' plans for given constants (stage facts computed once per run)."""

    def __init__(self, runs: list, platform: str, assumed: dict, base: dict):
        self.runs, self.platform, self.assumed, self.base = runs, platform, assumed, base
        self.lays = [Layout.from_plan(r.plan["layout"]) for r in runs]
        self.facts = [steptime.stage_facts(r.plan, lay) for r, lay in zip(runs, self.lays)]

    def fixed_of(self, name: str) -> float | None:
        """The value a constant keeps when it is not fitted: the platform's (or assumed), else the fixed one."""
        perf = (self.runs[0].plan.get("platform") or {}).get("performance") or {} if self.runs else {}
        value = perf.get(name, self.assumed.get(name))
        return value if value is not None else calib.TIME_CONSTANTS[name].fixed

    def cal(self, values: dict) -> calib.Calibration:
        """A calibration holding the fitted values over the platform's constants, the form steptime.estimate takes."""
        return calib.Calibration(self.platform, time={**self.base, **values}, assumed=self.assumed)

    def times(self, values: dict, indices=None) -> list[float]:
        """Estimated step seconds of the runs (all, or those indexed) under trial constants: the residual's input."""
        c = self.cal(values)
        idx = range(len(self.runs)) if indices is None else indices
        return [steptime.estimate(self.runs[i].plan, self.lays[i], self.facts[i], calibration=c).total_s for i in idx]

    def time_of(self, plan: dict, values: dict, facts: dict | None = None) -> float:
        """One plan's estimated step seconds under trial constants, for a plan outside the fitted runs."""
        return steptime.estimate(plan, facts=facts, calibration=self.cal(values)).total_s


def scales(model: Model, names: list, start: dict) -> dict:
    """Typical magnitudes: the starting value, or for a constant that starts at 0 (a cost the model adds, such
    as the host and element-wise terms) the value at which it would be a tenth of a typical run's step, from
    the step's slope in it (the median over the runs it moves; 1 where no run moves it, which check names)."""
    out = {}
    for n in names:
        if start.get(n):
            out[n] = abs(start[n])
            continue
        base = model.times({**start, n: 0.0})
        unit = model.times({**start, n: 1.0})
        per = sorted(0.1 * r.step_s / (u - b) for r, u, b in zip(model.runs, unit, base) if u - b > 1e-15)
        out[n] = per[len(per) // 2] if per else 1.0
    return out


def _residuals(model: Model, names, scale, x, indices, measured) -> list[float]:
    values = {n: x[i] * scale[n] for i, n in enumerate(names)}
    return [math.log(max(t, 1e-30) / m) for t, m in zip(model.times(values, indices), measured)]


def jacobian_rows(model: Model, names, scale, point: dict, plans: list) -> list[list[float]]:
    """d log(estimate) / d (constant / scale) for each plan, by central differences."""
    rows = []
    for plan in plans:
        row = []
        facts = steptime.stage_facts(plan, Layout.from_plan(plan["layout"]))
        for n in names:
            h = 1e-3 * scale[n]
            lo = max(BOUNDS[n][0], point[n] - h)
            hi = min(BOUNDS[n][1], point[n] + h)
            t_hi, t_lo = model.time_of(plan, {**point, n: hi}, facts), model.time_of(plan, {**point, n: lo}, facts)
            row.append((math.log(t_hi) - math.log(t_lo)) / ((hi - lo) / scale[n]))
        rows.append(row)
    return rows


def undetermined(rows: list, names: list) -> list[tuple[str, list[str]]]:
    """The constants the rows cannot determine, each with the constants it is entangled with: (name, [])
    for one no row moves; (name, partners) for one whose column lies (nearly) in the span of the others'
    (its component in a right singular vector of a small singular value of the column-normalised matrix)."""
    import numpy as np  # lazy: numpy only when a fit runs

    J = np.array(rows, dtype=float).reshape(len(rows), len(names))
    norms = np.abs(J).max(axis=0) if len(rows) else np.zeros(len(names))
    out = [(n, []) for n, v in zip(names, norms) if v < EXERCISED]
    live = [i for i, v in enumerate(norms) if v >= EXERCISED]
    if not live:
        return out
    A = J[:, live] / np.linalg.norm(J[:, live], axis=0)
    if A.shape[0] < A.shape[1]:  # fewer runs than constants: pad so the SVD shows the missing directions
        A = np.vstack([A, np.zeros((A.shape[1] - A.shape[0], A.shape[1]))])
    _, s, vt = np.linalg.svd(A)
    null = vt[[k for k, sv in enumerate(s) if sv * CONDITION_LIMIT < s[0]]]
    if not len(null):
        return out
    weight = np.sqrt((null ** 2).sum(axis=0))
    for i in np.argsort(-weight):
        if weight[i] > 0.1:
            row = null[np.argmax(np.abs(null[:, i]))]
            partners = [names[live[j]] for j in np.argsort(-np.abs(row)) if j != i and abs(row[j]) > 0.2]
            out.append((names[live[i]], partners))
    return out


def separation(rows: list) -> float:
    """How well the rows tell the constants apart: the smallest over the largest singular value of the
    column-normalised Jacobian (1: independent; below 1/CONDITION_LIMIT: refused), over the constants some
    row moves."""
    import numpy as np  # lazy: numpy only when a fit runs

    J = np.array(rows, dtype=float)
    live = np.abs(J).max(axis=0) >= EXERCISED
    if not live.any():
        return 0.0
    A = J[:, live] / np.linalg.norm(J[:, live], axis=0)
    if A.shape[0] < A.shape[1]:
        return 0.0
    s = np.linalg.svd(A, compute_uv=False)
    return float(s[-1] / s[0])


def settling_run(model: Model, names: list, scale: dict, point: dict, rows: list, name: str) -> str | None:
    """'a run like NAME with --set ... would settle it', or None when no single probe (compiler/calibrate/probes.py)
    of a given run does.  Of the probes that settle it, the one that separates the constants best (separation): a
    change that moves the constant's term against the others', not one that leans on a small side effect of the
    model."""
    best = None
    for run_name, sets, plan in probes.candidates(model.runs):
        try:
            row = jacobian_rows(model, names, scale, point, [plan])[0]
        except (KeyError, ValueError, ZeroDivisionError, TypeError):
            continue
        if all(n != name for n, _ in undetermined(rows + [row], names)):
            score = separation(rows + [row])
            if best is None or score > best[0]:
                best = (score, run_name, sets)
    if best is None:
        return None
    return f"a run like {best[1]} with --set {' --set '.join(best[2].split())} would settle it"


def check(model: Model, names: list, point: dict, scale: dict) -> list[str]:
    """One line per undetermined constant with the run that would settle it; [] if none."""
    rows = jacobian_rows(model, names, scale, point, [r.plan for r in model.runs])
    lines = []
    short = len(rows) < len(names)
    for name, partners in undetermined(rows, names):
        settle = settling_run(model, names, scale, point, rows, name)
        what = (f"{name}: no run exercises it ({calib.TIME_CONSTANTS[name].exercised_by})" if not partners
                else f"{name}: the runs move it together with {', '.join(partners)}, so they cannot be told apart")
        if short:
            what += f" ({len(rows)} timed run(s) for {len(names)} constants)"
        keep = (f"; or keep its fixed value: --fix {name}" if model.fixed_of(name) is not None
                else f"; or state it: --assume {name}=VALUE")  # --fix of a constant with no value is refused
        lines.append(what + (f"; {settle}" if settle else "; no single changed run among the given ones settles "
                             "it") + keep)
    return lines


def fit_time(runs: list, names: list, platform: str, assumed: dict, fixed: dict, loo: bool = True) -> TimeFit:
    """Fit ``names`` (the other constants stay at ``fixed``); UnderDetermined when the runs cannot."""
    import numpy as np  # lazy: numpy and scipy only when a fit runs (`moeforge calibrate`)
    from scipy.optimize import least_squares  # lazy: as above

    timed = [r for r in runs if r.step_s]
    kept = {k: v for k, v in fixed.items() if k not in names}
    model = Model(timed, platform, assumed, kept)
    start = {n: min(max(fixed[n] if fixed.get(n) is not None else calib.TIME_CONSTANTS[n].start, BOUNDS[n][0]),
                    BOUNDS[n][1]) for n in names}
    scale = scales(model, names, start)
    lines = check(model, names, start, scale)
    if lines:
        raise UnderDetermined(lines)
    measured = [r.step_s for r in timed]

    def solve(indices: list[int]) -> tuple[dict, object]:
        lo = [BOUNDS[n][0] / scale[n] for n in names]
        hi = [BOUNDS[n][1] / scale[n] for n in names]
        # a constant whose fixed value is 0 (the host terms) starts at its scale, a share of the step: from the
        # bound itself the finite differences (relative to x) would not move it
        x0 = [min(max(start[n] / scale[n] if start[n] > 0 else 1.0, lo[i] + 1e-9), hi[i] - 1e-9)
              for i, n in enumerate(names)]
        meas = [measured[i] for i in indices]
        res = least_squares(lambda x: _residuals(model, names, scale, x, indices, meas), x0,
                            bounds=(lo, hi), method="trf", x_scale=1.0, diff_step=1e-4)
        return {n: float(res.x[i] * scale[n]) for i, n in enumerate(names)}, res

    everything = list(range(len(timed)))
    values, res = solve(everything)
    stderr = dict.fromkeys(names)
    uncertainty, jointly = [], []
    dof = len(timed) - len(names)
    if dof > 0:
        J = np.asarray(res.jac)
        sigma2 = float(np.sum(res.fun ** 2)) / dof
        # pinv: a constant the fit holds at a bound (a fraction at 1, a cost at 0) has no slope there
        cov = np.linalg.pinv(J.T @ J) * sigma2
        stderr = {n: float(math.sqrt(max(cov[i, i], 0.0)) * scale[n]) for i, n in enumerate(names)}
        # each run's estimate through the whole covariance (correlations included): constants the runs pin
        # only together can each be loose while the step they predict is not
        uncertainty = [float(math.sqrt(max(g @ cov @ g, 0.0))) for g in J]
        jointly = _jointly(names, values, stderr, cov)
    out_loo = []
    if loo:
        for i in everything:
            others = [j for j in everything if j != i]
            sub = Model([timed[j] for j in others], platform, assumed, kept)
            if not others or check(sub, names, start, scale):
                out_loo.append(None)
                continue
            fitted, _ = solve(others)
            out_loo.append(model.times(fitted, [i])[0])
    before = model.times({n: start[n] for n in names})
    return TimeFit(list(names), values, {n: fixed.get(n) for n in names}, stderr, before, model.times(values),
                   out_loo, measured, kept, uncertainty, jointly)


LOOSE = 0.5        # a constant whose standard error is at least this share of its value is loose alone
CORRELATED = 0.8   # ... and pinned jointly with another loose one when their correlation is at least this


def _jointly(names: list, values: dict, stderr: dict, cov) -> list[list[str]]:
    """Groups of loose constants strongly correlated with each other (achievable_fraction with
    elementwise_passes: both move the same runs' compute), each group once, in the table's order."""
    loose = [i for i, n in enumerate(names) if values[n] > 0 and stderr[n] >= LOOSE * values[n]]
    groups: list[set] = []
    for a in loose:
        for b in loose:
            if b <= a or cov[a, a] <= 0 or cov[b, b] <= 0:
                continue
            if abs(cov[a, b]) / math.sqrt(cov[a, a] * cov[b, b]) >= CORRELATED:
                hit = [g for g in groups if a in g or b in g]
                merged = set().union({a, b}, *hit)
                groups = [g for g in groups if g not in hit] + [merged]
    return [[names[i] for i in sorted(g)] for g in sorted(groups, key=min)]
