"""Fit cost model 2's figures to measured calls (nccl-tests rows) by least squares.

Each measured call is predicted as NCCL would run it (synth.predict.nccl.choose, or the
algorithm and protocol the log says were forced); the residual is the log of predicted
over measured time, so a 10% miss weighs the same at 8 bytes and at 8 GB. The fitted
figures are the fixed costs of a call, the scale on NCCL's latencies, and the
efficiencies as ratios to their architecture's defaults (one ratio fits machines of
several architectures at once). A weak pull towards the defaults keeps a figure the
rows say nothing about (no NIC in a one-node log) where it was.

Cost: one prediction per row per evaluation; scipy's least_squares takes a few hundred
evaluations, well under a second for a hundred rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from synth.topology.figures import LIMITS, Figures, defaults
from synth.predict.machine import Machine
from synth.predict.nccl import Choice, choose

# fitted as themselves (us) or as ratios to the architecture's defaults
TIMES = ("call_us", "nvls_call_us", "alltoall_call_us", "launch_us", "latency_scale", "chunk_kb")
RATIOS = ("nvlink", "nvls", "nic", "pcie")
PULL = 0.05  # weight of the pull towards the defaults, against 1 per row
# per parameter (TIMES then RATIOS): its scale, and the bounds of the fit
SCALE = np.array([10.0, 10.0, 30.0, 4.0, 1.0, 256.0] + [1.0] * len(RATIOS))
LOWER = np.array([0.0, 0.0, 0.0, 0.0, 0.05, 1.0] + [0.3] * len(RATIOS))
UPPER = np.array([500.0, 500.0, 1000.0, 100.0, 20.0, 65536.0] + [1.6] * len(RATIOS))
F_SCALE = 0.15  # soft_l1's scale: log errors past it count less than squared


@dataclass(frozen=True)
class Sample:
    """One measured call: nccl-tests' size (bytes) and time (us), the algorithms and
    protocols the run allowed ("" when NCCL chose among all), and the GPUs one thread
    launched (nccl-tests' -g)."""

    machine: Machine
    collective: str
    nbytes: int
    time_us: float
    algorithm: str = ""
    protocol: str = ""
    launches: int = 1


@dataclass(frozen=True)
class Fitted:
    sample: Sample
    choice: Choice  # NCCL's choice there and its time in the fitted figures

    @property
    def error(self) -> float:
        """predicted / measured - 1"""
        return self.choice.predicted_us / self.sample.time_us - 1


def figures_for(machine: Machine, theta) -> Figures:
    """The machine's figures with the parameter vector `theta` applied."""
    base = defaults(machine.arch)
    values = {name: float(x) for name, x in zip(TIMES, theta[:len(TIMES)])}
    for name, ratio in zip(RATIOS, theta[len(TIMES):]):
        lo, hi = LIMITS[name]
        values[name] = float(min(hi, max(lo, getattr(base, name) * float(ratio))))
    return replace(machine.figures, **values)


def predict(samples: list[Sample], theta) -> list[Fitted]:
    # each distinct call predicted once: logs of the same sizes run again and again (2,000
    # rows of 16 calls) took a minute, one prediction per row per evaluation
    out, seen = [], {}
    for s in samples:
        key = (id(s.machine), s.collective, s.nbytes, s.algorithm, s.protocol, s.launches)
        if key not in seen:
            m = replace(s.machine, figures=figures_for(s.machine, theta))
            seen[key] = choose(m, s.collective, s.nbytes, s.algorithm, s.protocol,
                               s.launches)
        out.append(Fitted(s, seen[key]))
    return out


def fit(samples: list[Sample], start: Figures | None = None) -> tuple[np.ndarray, list[Fitted]]:
    """The parameters (TIMES then RATIOS) that best predict `samples`, and each sample
    predicted with them. `start` (default: the defaults) is where the pull goes."""
    start = start or defaults("ampere")
    theta0 = np.array([getattr(start, t) for t in TIMES] + [1.0] * len(RATIOS))
    scale, lower, upper = SCALE, LOWER, UPPER

    def residuals(theta):
        errs = [math.log(max(f.choice.predicted_us, 1e-9) / f.sample.time_us)
                for f in predict(samples, theta)]
        return np.concatenate([errs, PULL * (theta - theta0) / scale])

    begin = _coarse_start(residuals, np.clip(theta0, lower, upper), len(TIMES))
    solved = least_squares(residuals, begin, bounds=(lower, upper),
                           x_scale=scale, diff_step=1e-3, loss="soft_l1", f_scale=F_SCALE)
    # a figure the solver left a hair inside a bound is at it (nvls_call_us was written
    # as 3e-13 us, for 0)
    theta = np.where(np.isclose(solved.x, lower, rtol=0, atol=1e-6 * scale), lower, solved.x)
    theta = np.where(np.isclose(theta, upper, rtol=0, atol=1e-6 * scale), upper, theta)
    return theta, predict(samples, theta)


def at_bound(machine: Machine, theta) -> list[str]:
    """The figures `theta` puts at a bound, of the fit or of the figure itself (an
    efficiency of 1, LIMITS), by name: the rows would take them further."""
    base, limits = defaults(machine.arch), []
    for name, x in zip(RATIOS, theta[len(TIMES):]):
        lo, hi = LIMITS[name]
        if getattr(base, name) == 0:  # the machine has none (NVLS before Hopper)
            continue
        if not lo < getattr(base, name) * float(x) < hi:
            limits.append(name)
    return [name for name, x, lo, hi in zip(TIMES + RATIOS, theta, LOWER, UPPER)
            if x in (lo, hi) or name in limits]


RATIO_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.4, 1.6)


def _coarse_start(residuals, theta: np.ndarray, first_ratio: int) -> np.ndarray:
    """`theta` with each efficiency ratio, one at a time, at the value of RATIO_GRID
    where the rows fit best: a ratio's effect can be flat near the defaults (on two
    H100 boxes a NIC at 0.6 of line rate moves a 1 GB allreduce 2.5%, at 0.4 by half,
    where NCCL's per-channel caps bind first), and least squares started there never
    left the defaults though the rows were 16-46% slower. O(ratios x grid) evaluations."""
    out = theta.copy()
    for k in range(first_ratio, len(theta)):
        def cost(x, k=k):
            trial = out.copy()
            trial[k] = x
            r = residuals(trial)
            return float(np.sum(np.sqrt(1 + (r / F_SCALE) ** 2) - 1))  # soft_l1, as fitted
        out[k] = min(RATIO_GRID, key=lambda x: (cost(x), abs(x - theta[k])))
    return out
