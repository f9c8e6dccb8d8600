"""The comparison's statistics: a 95% interval per system, and for the pairs of systems
at one budget a test whose variance has both its sources, the seeds and the test set.

A system is one configured model at one budget, with all its seeds
(``resampling.SeededSystem``); its score is the mean of its seeds' corpus scores.

- **The interval and the test** (``welch``): the seeds' spread plus the test set's
  variation common to the seeds (the bootstrap of the seeds' mean, or of the pair's
  delta), Student's t with Welch-Satterthwaite degrees of freedom. With one seed, the
  test set's alone, and the row says the seeds' variance was not measured.
- **A declared family of comparisons** (``PRIMARY`` and the rest): the primary comparisons (by default
  each family's best size by validation loss against each other family's, at each
  budget, on BLEU; chosen in ``comparison.py`` before any test is run) are the only rows
  with a verdict, Holm-Bonferroni adjusted over the testable primary rows alone
  (``adjust``). The same pairs on chrF and chrF++ are secondary, every other pair
  exploratory: they show an unadjusted p and no verdict word.
- **Verdicts that say what the design can show** (``verdict``): "significant" or "not
  significant" at ``ALPHA`` after Holm, with the difference the test would detect with
  80% power, only where each side has ``VERDICT_SEEDS`` (3) seeds or more; with two
  seeds a side the row gives the difference and its interval and no verdict (the seed
  term then has one degree of freedom, and two seeds that happen to agree make it
  vanish: simulated through this path, equal recipes gave p < 0.05 in up to 17% of
  studies and p < 0.001 in up to 5%, ``benchmarks/statistics/verdict_calibration.py
  --seeds 2``);
  "untestable with 1 seed" where the seeds' variance was not measured. Where the seeds'
  term is under ``SEEDS_AGREED`` of the test set's (``seed_share``), the row says the
  seeds agreed and that the interval assumes the recipe's seeds spread that little.
- **p as printed** (``shown_p``): floored at ``P_FLOOR``; a p of 1e-50 says no more
  than the model of the seeds it rests on.
- **The test set's own tests, for comparability**: the paired bootstrap and approximate
  randomization (one coin per sentence for all its seeds), two-sided, with sacreBLEU's
  own p-values beside them. They measure the test set's variation only and decide
  nothing.
- The estimated agreement with human judgement of a difference that large (Kocmi et al.
  2024, ``human_agreement``), for the observed delta and the ends of its interval.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric

from stages.report import resampling, welch
from stages.report.comparison_records import Agreement, PairedTest, SystemInterval
from stages.report.resampling import RANDOMIZATION_TRIALS, SeededSystem

ALPHA = 0.05
# Seeds a side a verdict needs: with two, the seeds' variance has one degree of freedom
# (benchmarks/statistics/verdict_calibration.py --seeds 2 measures what that gives).
VERDICT_SEEDS = 3
# Where the seeds' term of a delta's variance is under this share of the test set's, the
# seeds agreed more than the test set varies, and the row says what that assumes.
SEEDS_AGREED = 0.1
# The smallest p the report prints as a number; below it, "< 0.001".
P_FLOOR = 1e-3

# Kocmi, Zouhar, Federmann and Post (2024), "Navigating the Metrics Maze: Reconciling
# Score Magnitudes and Accuracies", arXiv 2401.06760, table 1: the metric delta at which
# the metric agrees with human judgement of which of two systems is better in the given
# share of system pairs. The paper has no chrF++ row: chrF's stands in for it.
AGREEMENT = {
    "BLEU": {50: 0.27, 55: 0.52, 60: 0.78, 65: 1.06, 70: 1.39, 75: 1.79, 80: 2.34, 85: 3.35},
    "chrF": {50: 0.14, 55: 0.33, 60: 0.54, 65: 0.76, 70: 1.00, 75: 1.28, 80: 1.63, 85: 2.12, 90: 3.05},
}
AGREEMENT["chrF++"] = AGREEMENT["chrF"]


def metrics() -> dict[str, Metric]:
    """Fresh metric objects (sacreBLEU's keep state between calls), by display name."""
    return {"BLEU": BLEU(), "chrF": CHRF(), "chrF++": CHRF(word_order=2)}


def human_agreement(metric: str, delta: float) -> Agreement:
    """The estimated share (%) of system pairs with this |delta| whose order humans
    confirm, interpolated linearly in the published table; outside it, its bound and the
    side: 72.3 with no bound, 50 "at most" (below the coin-toss delta), 85 "at least"
    (past the table's largest delta)."""
    table = AGREEMENT[metric]
    percents, deltas = list(table), list(table.values())
    size = abs(delta)
    if size <= deltas[0]:
        return Agreement(percent=float(percents[0]), bound="at most")
    if size >= deltas[-1]:
        return Agreement(percent=float(percents[-1]), bound="at least")
    return Agreement(percent=float(np.interp(size, deltas, percents)), bound=None)


# What a row of the tests is: a primary comparison has a verdict, Holm-adjusted over the
# primary family; a secondary (the primary pairs on chrF and chrF++, which restate BLEU)
# or exploratory one (every other pair at a budget) shows its unadjusted p, no verdict.
PRIMARY, SECONDARY, EXPLORATORY = "primary", "secondary", "exploratory"
PRIMARY_METRIC = "BLEU"
POWER = 0.8  # the power at which the report states the difference a test would detect
SCORE_RANGE = (0.0, 100.0)  # BLEU, chrF and chrF++


def resampled_per_seed(system: SeededSystem, name: str, metric: Metric, counts: np.ndarray,
                       cache: dict | None = None) -> np.ndarray:
    """``resampling.resampled_seed_scores``, kept in ``cache`` (keyed by the system's
    name and the metric's) where one is given: a report's intervals and its tests use
    the same resamples of each system, and computing them is most of its time."""
    if cache is None:
        return resampling.resampled_seed_scores(system, name, metric, counts)
    key = (system.name, name)
    if key not in cache:
        cache[key] = resampling.resampled_seed_scores(system, name, metric, counts)
    return cache[key]


def confidence_intervals(system: SeededSystem, counts: np.ndarray,
                         cache: dict | None = None) -> dict[str, SystemInterval]:
    """Per metric: the score with its 95% interval (``welch.system_interval``: seeds and
    test set), and sacreBLEU's ``--confidence`` of the seeds' mean (the test set's)."""
    found = {}
    for name, metric in metrics().items():
        if name not in system.statistics:  # a system scored on some metrics only (simulated: BLEU's)
            continue
        per_seed = resampled_per_seed(system, name, metric, counts, cache)
        resampled = per_seed.mean(axis=1)
        interval = welch.system_interval(system.seed_scores(name, metric), float(np.var(resampled, ddof=1)),
                                          resampling.own_sentence_noise(per_seed), len(counts[0]))
        # Every metric here scores from 0 to 100: an interval past either end is cut
        # there (it still holds the true score whenever the uncut one did).
        interval.update(low=max(SCORE_RANGE[0], interval["low"]), high=min(SCORE_RANGE[1], interval["high"]))
        found[name] = SystemInterval(**interval, seeds=len(system.seeds),
                                     sacrebleu=resampling.sacrebleu_interval(resampled))
    return found


def paired_tests(pairs: list[tuple[SeededSystem, SeededSystem, str]], counts: np.ndarray,
                 randomization_trials: int = RANDOMIZATION_TRIALS, cache: dict | None = None) -> list[PairedTest]:
    """One test per pair (a, b, role) and metric: BLEU for every pair; chrF and chrF++
    too for primary pairs, as secondary tests, where the systems were scored on them.
    delta = b - a. ``randomization_trials`` 0: no randomization test. Not yet adjusted:
    ``adjust`` takes the whole report's."""
    every, cache = metrics(), {} if cache is None else cache

    def resampled(system: SeededSystem, name: str) -> tuple[np.ndarray, float]:
        """A system's mean score on the shared resamples (computed once for all its
        pairs: ``cache``) and its seeds' own sentence noise."""
        per_seed = resampled_per_seed(system, name, every[name], counts, cache)
        return per_seed.mean(axis=1), resampling.own_sentence_noise(per_seed)

    found = []
    for first, second, role in pairs:
        resampling.check_paired(first, second)
        names = [name for name in every if name in first.statistics] if role == PRIMARY else [PRIMARY_METRIC]
        for name in names:
            metric = every[name]
            first_scores, second_scores = first.seed_scores(name, metric), second.seed_scores(name, metric)
            (first_resampled, first_noise), (second_resampled, second_noise) = (resampled(first, name),
                                                                                resampled(second, name))
            bootstrap = resampling.bootstrap_deltas(float(second_scores.mean() - first_scores.mean()),
                                                    first_resampled, second_resampled)
            test = welch.delta_test(first_scores, second_scores, bootstrap["variance"], first_noise + second_noise,
                                     len(counts[0]))
            randomization = (resampling.paired_randomization(first, second, name, metric, randomization_trials)
                             if randomization_trials else None)
            found.append(PairedTest(
                a=first.name, b=second.name, metric=name, role=role if name == PRIMARY_METRIC else SECONDARY,
                seeds=test["seeds"], seed_variance_measured=test["seed_variance_measured"],
                seed_share=test["seed_share"],
                repeated_seeds={first.name: first.repeated, second.name: second.repeated},
                a_score=float(first_scores.mean()), b_score=float(second_scores.mean()),
                delta=test["delta"], delta_low=test["low"], delta_high=test["high"],
                standard_error=test["standard_error"], df=test["df"], p=test["p"],
                detectable=detectable(test["standard_error"], test["df"]),
                # The test set's variation alone: for comparability, deciding nothing.
                p_bootstrap=bootstrap["p"], p_randomization=None if randomization is None else randomization["p"],
                # What sacreBLEU's --paired-bs and --paired-ar print, for the record.
                p_bootstrap_sacrebleu=bootstrap["p_sacrebleu"],
                p_randomization_sacrebleu=None if randomization is None else randomization["p_sacrebleu"],
                agreement=human_agreement(name, test["delta"]),
                agreement_low=human_agreement(name, _nearest_zero(test["low"], test["high"])),
                agreement_high=human_agreement(name, max(abs(test["low"]), abs(test["high"])))))
    return found


def detectable(standard_error: float, df: float | None, alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference a two-sided t test at ``alpha`` with this standard error and degrees
    of freedom detects with probability ``power`` (unadjusted for multiplicity)."""
    df = math.inf if df is None else df
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * standard_error)


def _nearest_zero(low: float, high: float) -> float:
    """The end of the delta's interval nearest to no difference (0 if it spans 0)."""
    return 0.0 if low <= 0 <= high else min(abs(low), abs(high))


def testable(test: PairedTest) -> bool:
    """A primary test can be decided: both systems have ``VERDICT_SEEDS`` seeds or more,
    so the seeds' variance was measured with at least two degrees of freedom."""
    return test.role == PRIMARY and test.seed_variance_measured and min(test.seeds) >= VERDICT_SEEDS


def seeds_agreed(test: PairedTest) -> bool:
    """Whether the seeds' term of the delta's variance is under ``SEEDS_AGREED`` of the
    test set's: the seeds agreed, and the interval rests on their spread being that small."""
    return test.seed_share is not None and test.seed_share < SEEDS_AGREED


def shown_p(value: float | None) -> str:
    """A p as the report prints it: 4 decimals, floored at ``P_FLOOR``."""
    if value is None:
        return "-"
    return f"{value:.4f}" if value >= P_FLOOR else f"< {P_FLOOR:g}"


def adjust(tests: list[PairedTest], alpha: float = ALPHA) -> list[PairedTest]:
    """Holm-Bonferroni over the testable primary tests alone: each gains ``p_holm`` and
    ``significant``; every test gains ``family_size``, how many tests the adjustment
    counted. Other tests keep their unadjusted p and get no verdict (``significant``
    None)."""
    decided = [index for index, test in enumerate(tests) if testable(test)]
    adjusted = dict(zip(decided, resampling.holm([tests[index].p for index in decided])))
    return [dataclasses.replace(test, family_size=len(decided), p_holm=adjusted.get(index),
                                significant=bool(adjusted[index] < alpha) if index in adjusted else None)
            for index, test in enumerate(tests)]


def verdict(test: PairedTest) -> str:
    """What one test says, in the words the report uses everywhere."""
    if test.role != PRIMARY:
        return test.role
    fewest = min(test.seeds)
    if not test.seed_variance_measured:
        return f"untestable with {fewest} seed{'s' if fewest != 1 else ''}"
    if fewest < VERDICT_SEEDS:
        return f"no verdict with {fewest} seeds ({VERDICT_SEEDS} needed)"
    return "significant" if test.significant else "not significant"
