"""Quality against compute per family: a power law fitted to (training FLOPs, BLEU)
points, where it holds, what it says each family needs for a given BLEU, and where two
families' laws cross.

The law is BLEU = a * C^b with C the counted training FLOPs, fitted by least squares on
log BLEU against log C (a straight line on log-log axes, as scaling studies draw them).
It is fitted only over the budgets measured: ``valid_from`` and ``valid_to`` bound it,
and any FLOPs it predicts outside that range are marked as extrapolated. BLEU cannot
grow without bound, so the law describes the rising part of the curve and says nothing
about where a family saturates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BLEU_LEVELS = (10.0, 20.0, 30.0)  # the qualities whose cost the report states


@dataclass(frozen=True)
class PowerLaw:
    family: str
    a: float
    b: float  # the exponent: BLEU gained per doubling of compute is a factor 2^b
    valid_from: float  # the smallest and largest FLOPs of the points fitted
    valid_to: float
    points: int
    r_squared: float  # of the log-log line

    def bleu(self, flops: float) -> float:
        return self.a * flops ** self.b

    def flops_for(self, bleu: float) -> float | None:
        """The FLOPs at which the law reaches ``bleu``; None when it never does (b <= 0)."""
        if self.b <= 0:
            return None
        return (bleu / self.a) ** (1.0 / self.b)

    def holds_at(self, flops: float) -> bool:
        return self.valid_from <= flops <= self.valid_to


def fit_power_law(family: str, flops: list[float], bleu: list[float]) -> PowerLaw | None:
    """The least-squares power law through the points with BLEU above 0 (log 0 is not a
    number); None with fewer than two distinct budgets among them."""
    points = [(c, q) for c, q in zip(flops, bleu) if c > 0 and q is not None and q > 0]
    if len({c for c, _ in points}) < 2:
        return None
    x = np.log([c for c, _ in points])
    y = np.log([q for _, q in points])
    b, log_a = np.polyfit(x, y, 1)
    residual = y - (log_a + b * x)
    spread = float(np.sum((y - y.mean()) ** 2))
    r_squared = 1.0 - float(np.sum(residual ** 2)) / spread if spread > 0 else 1.0
    return PowerLaw(family, math.exp(log_a), float(b), min(c for c, _ in points), max(c for c, _ in points),
                    len(points), r_squared)


def crossover(first: PowerLaw, second: PowerLaw) -> float | None:
    """The FLOPs at which two laws predict the same BLEU; None if they are parallel."""
    if math.isclose(first.b, second.b, rel_tol=0, abs_tol=1e-12):
        return None
    return math.exp((math.log(second.a) - math.log(first.a)) / (first.b - second.b))


def frontier_rows(laws: list[PowerLaw], levels: tuple[float, ...] = BLEU_LEVELS) -> list[dict]:
    """Per family: the law, and the FLOPs it needs for each BLEU level, marked
    ``extrapolated`` outside the measured range."""
    rows = []
    for law in laws:
        needs = {}
        for level in levels:
            flops = law.flops_for(level)
            needs[f"{level:g}"] = None if flops is None else {"flops": flops, "extrapolated": not law.holds_at(flops)}
        rows.append({"family": law.family, "a": law.a, "b": law.b, "valid_from": law.valid_from,
                     "valid_to": law.valid_to, "points": law.points, "r_squared": law.r_squared,
                     "flops_for_bleu": needs})
    return rows


# How far beyond the measured FLOPs a crossover is still reported, as a factor: 1, none.
# A law fitted over a decade or two, with its exponents moving by a third when a budget
# is added, says nothing about where it meets another outside the data.
CROSSOVER_REACH = 1.0


def crossovers(laws: list[PowerLaw]) -> list[dict]:
    """Every pair of families whose laws cross within ``CROSSOVER_REACH`` of both measured
    ranges at a BLEU a model can score (0 to 100), with where, and whether that lies
    inside both ranges."""
    found = []
    for index, first in enumerate(laws):
        for second in laws[index + 1:]:
            flops = crossover(first, second)
            low = max(first.valid_from, second.valid_from) / CROSSOVER_REACH
            high = min(first.valid_to, second.valid_to) * CROSSOVER_REACH
            if flops is not None and low <= flops <= high and 0 < first.bleu(flops) <= 100:
                found.append({"families": [first.family, second.family], "flops": flops,
                              "bleu": first.bleu(flops),
                              "measured": first.holds_at(flops) and second.holds_at(flops)})
    return found
