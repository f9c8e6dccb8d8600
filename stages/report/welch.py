"""Intervals and tests whose variance has both of its sources: the seeds and the test set.

A system's score is the mean of its K seeds' corpus scores on one test set of N
sentences. Had other seeds been trained, or other sentences drawn, it would differ, and
a verdict about the system (the recipe: model, data and training, not one trained
network) must allow for both. Each seed's score on the test set is the recipe's, plus
the seed's own offset, plus the seed's own sentence-by-sentence luck, plus what this
draw of sentences does to every seed alike (hard sentences, sentences the recipe is
systematically good at). So

    variance of the score = s^2 / K + (v_test - v_own)

s^2 is the sample variance of the seeds' scores (K - 1 degrees of freedom): it holds the
seeds' offsets and their own sentence-level luck. v_test is the variance of the seeds'
mean over bootstrap resamples of the test sentences (each drawn sentence bringing every
seed's output of it), and v_own the part of it that is each seed's own luck
(``resampling.own_sentence_noise``: what the seeds' separate bootstrap variances have
beyond their mean's), which s^2 already holds; what remains is the test set's effect
common to the seeds. For a difference between systems A and B at one budget, the seeds
of the two are independent runs and the sentences are shared:

    variance of delta = s_A^2 / K_A + s_B^2 / K_B + (v_test(delta) - v_own(A) - v_own(B))

with v_test(delta) from the paired bootstrap, so sentences both systems find hard cancel.
The reference distribution is Student's t with the Welch-Satterthwaite degrees of freedom
of that sum, the test set's term counting N - 1. For a delta, the two seed terms count
together, with min(K_A, K_B) - 1 degrees of freedom: the conservative bound of Welch's
test (Hsu's), since with two or three seeds each side's variance is known so poorly that
Satterthwaite's estimate of the degrees of freedom, made from those same variances, runs
high when a variance happens to come out small. In the calibration's normal simulation
(below), two seeds a side with equal spreads rejected up to 6.4% of true nulls at alpha
0.05 counting each seed term with its own K - 1, up to 5.5% counted together; neither
rule holds 5% where one system's seeds spread seven times the other's (11.9% and 10.9%
with two seeds, 7.7% and 7.1% with three). With few seeds the degrees of freedom are few and the interval
is wide. p is the t distribution's, so it has no Monte Carlo floor and can be as small
as the data make it, whatever the number of resamples.

With one seed (on either side of a delta), s^2 cannot be measured: the variance is the
test set's alone (v_test), and the result says only whether the trained networks differ
beyond the test set's variation (``seed_variance_measured`` is False); whether the
recipes differ is not tested.

``benchmarks/statistics/statistics_calibration.py`` measures, by simulation at the seed and test-set
noise of the frontier study, how often these tests reject under no difference, their
power, and how often the intervals cover the truth.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

LEVEL = 0.95


def welch_satterthwaite(components: list[tuple[float, float]]) -> float:
    """The degrees of freedom of a sum of variance estimates, each (variance, its degrees
    of freedom): (sum v)^2 / sum(v^2 / df). Infinite when every term is 0."""
    total = sum(variance for variance, _ in components)
    denominator = sum(variance ** 2 / df for variance, df in components if variance > 0)
    return math.inf if denominator == 0 else total ** 2 / denominator


def _seed_term(scores: np.ndarray) -> tuple[float, float] | None:
    """s^2 / K with its K - 1 degrees of freedom; None for one seed."""
    if len(scores) < 2:
        return None
    return float(np.var(scores, ddof=1)) / len(scores), float(len(scores) - 1)


def _t(estimate: float, components: list[tuple[float, float]], level: float = LEVEL) -> dict:
    variance = sum(v for v, _ in components)
    df = welch_satterthwaite(components)
    half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(variance) if variance > 0 else 0.0
    # JSON has no infinity: df is None where no term varies (identical outputs).
    return {"standard_error": math.sqrt(variance), "df": df if math.isfinite(df) else None,
            "low": estimate - half, "high": estimate + half}


def system_interval(seed_scores: np.ndarray, test_variance: float, own_noise: float, sentences: int,
                    level: float = LEVEL) -> dict:
    """A system's score (the mean of its seeds' scores) with its ``level`` interval.
    ``test_variance``: the bootstrap variance of the seeds' mean; ``own_noise``: its part
    the seeds' spread already holds (see the module's docstring)."""
    scores = np.asarray(seed_scores, dtype=float)
    seed = _seed_term(scores)
    common = test_variance if seed is None else max(0.0, test_variance - own_noise)
    components = [(common, float(sentences - 1))] + ([seed] if seed else [])
    score = float(scores.mean())
    return {"score": score, "seed_variance_measured": seed is not None, **_t(score, components, level)}


def delta_test(first_scores: np.ndarray, second_scores: np.ndarray, test_variance: float, own_noise: float,
               sentences: int, level: float = LEVEL) -> dict:
    """delta = mean(second) - mean(first), its ``level`` interval and the two-sided p of
    no difference. ``test_variance``: the paired bootstrap's variance of delta;
    ``own_noise``: the two systems' own sentence noise, which their seeds' spreads
    already hold. With one seed on either side the seeds' variance is not measured
    (``seed_variance_measured`` False): the test is the test set's alone, of the
    trained networks, not of the recipes."""
    first, second = np.asarray(first_scores, dtype=float), np.asarray(second_scores, dtype=float)
    first_term, second_term = _seed_term(first), _seed_term(second)
    measured = first_term is not None and second_term is not None
    if first_term is not None and second_term is not None:
        # The two seed terms as one, with the smaller side's degrees of freedom (see the
        # module's docstring for why not one term each).
        together = (first_term[0] + second_term[0], float(min(len(first), len(second)) - 1))
        components = [(max(0.0, test_variance - own_noise), float(sentences - 1)), together]
    else:
        components = [(test_variance, float(sentences - 1))]
    delta = float(second.mean() - first.mean())
    result = _t(delta, components, level)
    # How much of the variance the seeds brought, against the test set's term: near 0
    # where the seeds happened to agree, which leaves the degrees of freedom to the test
    # set's and the interval to the assumption that the recipes' seeds spread that little.
    seed_share = (together[0] / components[0][0] if measured and components[0][0] > 0 else None)
    error = result["standard_error"]
    if error > 0:
        p = float(2 * stats.t.sf(abs(delta) / error, result["df"] or math.inf))
    else:  # identical outputs: no variation at all
        p = 1.0 if delta == 0 else 0.0
    return {"delta": delta, "p": p, "seed_variance_measured": measured, "seed_share": seed_share,
            "seeds": [len(first), len(second)], **result}
