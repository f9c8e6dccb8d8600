"""Laws of quality against compute that are tested before they are believed, and say
what they do not know.

The law is saturating, L(C) = E + A * C^(-alpha) (Kaplan et al. 2020; Hoffmann et al.
2022, eq. 2, in compute alone): validation loss falls as a power of the counted training
FLOPs C towards an irreducible E. A score that rises to a ceiling (BLEU) takes the same
form upside down, B(C) = B_max - A * C^(-alpha). E = 0 (no ceiling for a score) is the
plain power law, kept as ``power_law`` for comparison.

- **Bounds are not estimates.** E is searched over its admissible range (a loss's floor
  from 0 to the smallest loss measured, BLEU's ceiling up to 100). Where the best fit
  puts it on the bound, the data did not determine it (``Law.at_bound``): the report says
  "not determined (at bound)", and the saturating law is then the power law.
- **A law is judged by what it predicts** (``leave_one_budget_out``): refitted without
  each budget in turn and asked for it, against two baselines fitted to the same
  remaining budgets: a straight line in log compute, and the nearest other budget's
  measurement. It "predicts" only if its mean absolute error beats both.
- **Intervals from the seeds** (``bootstrap``): each draw resamples the seeds within each
  budget (budgets branched from one run are not independent cases, so budgets are never
  drawn); a budget with one seed gets the seeds' pooled spread from the budgets with
  several. With one seed everywhere there is no interval.
- The FLOPs a law needs for a value, and where two laws cross, are stated only inside
  the FLOPs measured (``inside``); outside, the report says "beyond the measured range".

The fit profiles E out: for a given E, log(L - E) is a straight line in log C, solved by
least squares; E itself minimizes the squared error of L over its admissible range, on a
grid refined by a bounded search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_DRAWS = 1000
MIN_BUDGETS = 4  # three parameters, and one budget to leave out
BEYOND = "beyond the measured range"


@dataclass(frozen=True)
class Law:
    """``value(C) = E + sign * A * C^(-alpha)``: sign +1 for a falling loss, -1 for a
    rising score (then E is its ceiling). Valid over the FLOPs it was fitted on."""

    E: float
    A: float
    alpha: float
    sign: int
    valid_from: float
    valid_to: float
    budgets: int
    # The best fit put E on the edge of its admissible range: E was not determined.
    at_bound: bool = False

    def __call__(self, flops):
        return self.E + self.sign * self.A * np.power(flops, -self.alpha)

    def inside(self, flops: float) -> bool:
        return self.valid_from <= flops <= self.valid_to

    def flops_for(self, value: float) -> float | None:
        """The FLOPs at which the law reaches ``value``, if that is inside the measured
        range; None otherwise (the report then says ``BEYOND``)."""
        gap = (value - self.E) * self.sign
        if gap <= 0 or self.alpha <= 0:
            return None
        flops = (self.A / gap) ** (1.0 / self.alpha)
        return flops if self.inside(flops) else None


def fit(flops, values, *, rising: bool = False, saturating: bool = True,
        bound: float | None = None) -> Law:
    """The least-squares law through (FLOPs, value) points, several per budget allowed.

    ``rising``: the values rise to a ceiling (BLEU), else they fall to a floor (a loss).
    ``bound``: how far the floor or ceiling may lie (a loss's floor is at least 0,
    BLEU's ceiling at most 100); None: 0 for a falling value, else 100 times the
    values' spread beyond the largest.
    ``saturating=False``: the plain power law value = A * C^(-alpha), E = 0, fitted as a
    line on log-log axes (a rising value has a negative alpha)."""
    c = np.asarray(flops, dtype=float)
    y = np.asarray(values, dtype=float)
    needed, distinct = (3 if saturating else 2), len(set(c.tolist()))
    if distinct < needed:
        raise ValueError(f"a {'saturating' if saturating else 'power'} law needs at least {needed} budgets, "
                         f"got {distinct}")
    if not saturating:  # log value is a straight line in log C
        if np.any(y <= 0):
            raise ValueError("a power law needs values above 0")
        slope, log_a = np.polyfit(np.log(c), np.log(y), 1)
        return Law(E=0.0, A=math.exp(log_a), alpha=-float(slope), sign=1, valid_from=float(c.min()),
                   valid_to=float(c.max()), budgets=distinct)
    sign = -1 if rising else 1
    z = y * sign  # falling in every case: the floor E' = sign * E lies below every point
    reference = math.exp(float(np.mean(np.log(c))))  # C / reference keeps the line well conditioned
    x = np.log(c / reference)
    centred = x - x.mean()

    def lines(floors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each floor: the squared error, log a and slope of log(z - floor) against x
        (every floor lies below every point)."""
        logs = np.log(z[None, :] - floors[:, None])
        slopes = logs @ centred / float(centred @ centred)
        log_as = logs.mean(axis=1) - slopes * x.mean()
        fitted = floors[:, None] + np.exp(log_as[:, None] + slopes[:, None] * x[None, :])
        return np.sum((fitted - z[None, :]) ** 2, axis=1), log_as, slopes

    lowest = float(z.min())
    spread = float(z.max() - z.min()) or abs(lowest) or 1.0
    low = (bound * sign) if bound is not None else (0.0 if not rising else lowest - 100.0 * spread)
    low = min(low, lowest - 1e-6 * spread)
    floors = lowest - (lowest - low) * np.geomspace(1e-6, 1.0, 200)
    best = int(np.argmin(lines(floors)[0]))
    floor = _refine(lambda f: float(lines(np.array([f]))[0][0]), floors[max(best - 1, 0)],
                    floors[min(best + 1, len(floors) - 1)], float(floors[best]))
    _, log_as, slopes = lines(np.array([floor]))
    # value = sign * (floor + a * (C / reference)^slope) = E + sign * A * C^(-alpha)
    alpha = -float(slopes[0])
    # On the bound, or against the best value measured (where log(value - E) runs off):
    # either edge of the admissible range leaves E undetermined.
    width = lowest - low
    at_bound = floor - low <= BOUND_TOLERANCE * width or lowest - floor <= BOUND_TOLERANCE * width
    return Law(E=sign * floor, A=math.exp(float(log_as[0])) * reference ** alpha, alpha=alpha, sign=sign,
               valid_from=float(c.min()), valid_to=float(c.max()), budgets=distinct, at_bound=bool(at_bound))


# A floor within this share of its admissible range from an edge of it is on that edge.
BOUND_TOLERANCE = 1e-3


def _refine(error, left: float, right: float, start: float) -> float:
    from scipy.optimize import minimize_scalar

    low, high = sorted((left, right))
    if high - low <= 0:
        return start
    found = minimize_scalar(error, bounds=(low, high), method="bounded", options={"xatol": 1e-12 * max(1.0, abs(start))})
    return float(found.x) if found.fun <= error(start) else start


@dataclass(frozen=True)
class LeaveOneOut:
    """Per budget left out: the measured value (mean over its points), the law's
    prediction from the other budgets, and two baselines from the same other budgets: a
    straight line in log compute (``line``), and the nearest other budget's measurement
    (``naive``: the next larger one; for the largest, the one below)."""

    budgets: list[float]
    measured: list[float]
    predicted: list[float]
    line: list[float]
    naive: list[float]

    @property
    def errors(self) -> list[float]:
        return [p - m for p, m in zip(self.predicted, self.measured)]

    @property
    def mean_absolute_error(self) -> float:
        return float(np.mean(np.abs(self.errors)))

    @property
    def line_mean_absolute_error(self) -> float:
        return float(np.mean(np.abs(np.subtract(self.line, self.measured))))

    @property
    def naive_mean_absolute_error(self) -> float:
        return float(np.mean(np.abs(np.subtract(self.naive, self.measured))))

    @property
    def predicts(self) -> bool:
        """The law predicts its left-out budgets better than both baselines."""
        return self.mean_absolute_error < min(self.line_mean_absolute_error, self.naive_mean_absolute_error)


def leave_one_budget_out(flops, values, **law) -> LeaveOneOut:
    """Every budget's points left out in turn, the law refitted on the rest (``law``:
    ``fit``'s options) and asked for the left-out budget's value, beside a straight line
    in log compute fitted to the same points. The first and last budgets are predicted
    outside the range the refits saw: they test extrapolation."""
    c = np.asarray(flops, dtype=float)
    y = np.asarray(values, dtype=float)
    budgets = sorted(set(c.tolist()))
    means = [float(y[c == budget].mean()) for budget in budgets]
    predicted, line = [], []
    for budget in budgets:
        kept = c != budget
        predicted.append(float(fit(c[kept], y[kept], **law)(budget)))
        slope, intercept = np.polyfit(np.log(c[kept]), y[kept], 1)
        line.append(float(intercept + slope * math.log(budget)))
    naive = [means[i + 1] if i + 1 < len(means) else means[i - 1] for i in range(len(means))]
    return LeaveOneOut(budgets, means, predicted, line, naive)


def bootstrap(flops, values, draws: int = BOOTSTRAP_DRAWS, seed: int = 0, **law) -> list[Law]:
    """Laws refitted on the seeds resampled within each budget: a budget with K >= 2
    seeds draws K from them with replacement, spread about their mean by sqrt(K/(K-1))
    (drawing from K values shrinks their variance by (K-1)/K); one with a single seed
    adds to it a normal draw of the seeds' pooled standard deviation (from the budgets
    with several).
    Budgets are never drawn: the budgets of one branched run share its stable phase.
    [] when no budget has two seeds: the seeds' variation is then unknown."""
    c = np.asarray(flops, dtype=float)
    y = np.asarray(values, dtype=float)
    groups = [y[c == budget] for budget in sorted(set(c.tolist()))]
    spread = pooled_seed_deviation(groups)
    if spread is None:
        return []
    rng = np.random.default_rng(seed)
    laws = []
    x = np.concatenate([np.full(len(group), c_value) for group, c_value in zip(groups, sorted(set(c.tolist())))])
    for _ in range(draws):
        drawn = [_resampled(group, rng) if len(group) > 1 else group + rng.normal(0.0, spread, size=len(group))
                 for group in groups]
        try:
            laws.append(fit(x, np.concatenate(drawn), **law))
        except ValueError:  # a power law through a drawn value at or below 0
            continue
    return laws


def _resampled(group: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    centre, inflation = group.mean(), math.sqrt(len(group) / (len(group) - 1))
    return centre + inflation * (rng.choice(group, size=len(group), replace=True) - centre)


def pooled_seed_deviation(groups: list[np.ndarray]) -> float | None:
    """The seeds' standard deviation pooled over the groups (budgets) with two or more;
    None without any."""
    several = [group for group in groups if len(group) > 1]
    if not several:
        return None
    degrees = sum(len(group) - 1 for group in several)
    return math.sqrt(sum((len(group) - 1) * float(np.var(group, ddof=1)) for group in several) / degrees)


def interval(samples, level: float = 0.95) -> tuple[float, float] | None:
    """The central ``level`` interval of the samples (percentiles); None without any."""
    kept = [s for s in samples if s is not None and math.isfinite(s)]
    if not kept:
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(kept, [tail, 100.0 - tail])
    return float(low), float(high)


def crossover(first: Law, second: Law) -> float | None:
    """The FLOPs where two laws give the same value, inside both measured ranges; None
    when they do not cross there (``BEYOND``, whatever they would do further out). With
    several crossings inside, the first."""
    low, high = max(first.valid_from, second.valid_from), min(first.valid_to, second.valid_to)
    if low >= high:
        return None
    grid = np.geomspace(low, high, 400)
    difference = first(grid) - second(grid)
    changes = np.flatnonzero(np.sign(difference[:-1]) * np.sign(difference[1:]) <= 0)
    if len(changes) == 0:
        return None
    from scipy.optimize import brentq

    i = int(changes[0])
    if difference[i] == 0:
        return float(grid[i])
    return float(math.exp(brentq(lambda logc: float(first(math.exp(logc)) - second(math.exp(logc))),
                                 math.log(grid[i]), math.log(grid[i + 1]))))
