"""The comparison's statistics: a 95% interval per system, and for every pair of systems
at one budget a verdict that a reviewer can check.

A system is one configured model at one budget, with all its seeds
(``resampling.SeededSystem``); its score is the mean of its seeds' corpus scores.

For each pair and metric (BLEU, chrF, chrF++):

- the sentence-level tests, which resample the test set with each sentence's seeds
  together (``resampling``): the paired bootstrap and stratified approximate
  randomization, both two-sided; the pair's sentence-level p is the larger of the two;
- with two or more seeds a side, the seed-level test: an exact permutation test over
  the seed scores, with the smallest p it could give for that many seeds;
- Holm-Bonferroni over every verdict of the report (``adjust``): a difference is
  significant when the adjusted sentence-level p is below ``ALPHA`` and, with several
  seeds, so is the adjusted seed-level p. With one seed, "significant" says only that
  the test set's variation does not explain the difference: how much another seed would
  move it was not measured;
- the estimated agreement with human judgement of a difference that large (Kocmi et al.
  2024, ``human_agreement``), for the observed delta and the ends of its interval.
"""

from __future__ import annotations

import itertools

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric

from stages.report import resampling
from stages.report.resampling import RANDOMIZATION_TRIALS, SeededSystem

ALPHA = 0.05

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


def human_agreement(metric: str, delta: float) -> dict:
    """The estimated share (%) of system pairs with this |delta| whose order humans
    confirm, interpolated linearly in the published table; outside it, its bound and the
    side: ``{"percent": 72.3, "bound": None}``, ``{"percent": 50, "bound": "at most"}``
    (below the coin-toss delta), ``{"percent": 85, "bound": "at least"}`` (past the
    table's largest delta)."""
    table = AGREEMENT[metric]
    percents, deltas = list(table), list(table.values())
    size = abs(delta)
    if size <= deltas[0]:
        return {"percent": float(percents[0]), "bound": "at most"}
    if size >= deltas[-1]:
        return {"percent": float(percents[-1]), "bound": "at least"}
    return {"percent": float(np.interp(size, deltas, percents)), "bound": None}


def confidence_intervals(system: SeededSystem, counts: np.ndarray) -> dict[str, dict]:
    """Per metric: the score, the bootstrap mean and the half-width of the 95% interval."""
    return {name: resampling.interval(system, name, metric, counts) for name, metric in metrics().items()}


def paired_tests(systems: list[SeededSystem], counts: np.ndarray,
                 randomization_trials: int = RANDOMIZATION_TRIALS) -> list[dict]:
    """Every pair (a, b), a listed first, per metric: delta = b - a with its bootstrap
    interval, both sentence-level p-values, the seed-level test with several seeds, and
    the human-agreement estimates. Not yet adjusted: ``adjust`` takes the whole report's."""
    rows = []
    for first, second in itertools.combinations(systems, 2):
        for name, metric in metrics().items():
            bootstrap = resampling.paired_bootstrap(first, second, name, metric, counts)
            randomization = resampling.paired_randomization(first, second, name, metric, randomization_trials)
            row = {"a": first.name, "b": second.name, "metric": name, "seeds": len(first.seeds),
                   "a_score": first.score(name, metric), "b_score": second.score(name, metric),
                   "delta": bootstrap["delta"], "delta_low": bootstrap["delta_low"],
                   "delta_high": bootstrap["delta_high"],
                   "p_bootstrap": bootstrap["p"], "p_randomization": randomization["p"],
                   "p_sentences": max(bootstrap["p"], randomization["p"]),
                   # What sacreBLEU's --paired-bs and --paired-ar print, for the record.
                   "p_bootstrap_sacrebleu": bootstrap["p_sacrebleu"],
                   "p_randomization_sacrebleu": randomization["p_sacrebleu"],
                   "agreement": human_agreement(name, bootstrap["delta"]),
                   "agreement_low": human_agreement(name, _nearest_zero(bootstrap)),
                   "agreement_high": human_agreement(name, _farthest(bootstrap))}
            if len(first.seeds) > 1:
                seeds = resampling.seed_permutation_test(list(first.seed_scores(name, metric)),
                                                         list(second.seed_scores(name, metric)))
                row.update(p_seeds=seeds["p"], p_seeds_smallest=seeds["smallest_p"])
            rows.append(row)
    return rows


def _nearest_zero(bootstrap: dict) -> float:
    """The end of the delta's interval nearest to no difference (0 if it spans 0)."""
    low, high = bootstrap["delta_low"], bootstrap["delta_high"]
    return 0.0 if low <= 0 <= high else min(abs(low), abs(high))


def _farthest(bootstrap: dict) -> float:
    return max(abs(bootstrap["delta_low"]), abs(bootstrap["delta_high"]))


def adjust(rows: list[dict], alpha: float = ALPHA) -> list[dict]:
    """Holm-Bonferroni over all the rows (every verdict of one report): each row gains
    the adjusted p-values and ``significant``; ``comparisons`` is how many there were."""
    sentences = resampling.holm([row["p_sentences"] for row in rows])
    seeded = [index for index, row in enumerate(rows) if "p_seeds" in row]
    seeds = dict(zip(seeded, resampling.holm([rows[index]["p_seeds"] for index in seeded])))
    adjusted = []
    for index, row in enumerate(rows):
        row = {**row, "p_sentences_holm": sentences[index], "comparisons": len(rows)}
        significant = row["p_sentences_holm"] < alpha
        if index in seeds:
            row["p_seeds_holm"] = seeds[index]
            significant = significant and row["p_seeds_holm"] < alpha
        adjusted.append({**row, "significant": significant})
    return adjusted
