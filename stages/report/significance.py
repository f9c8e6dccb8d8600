"""Confidence intervals and paired significance tests, computed by sacreBLEU's own code.

For each compared system, a 95% confidence interval per metric from sacreBLEU's
bootstrap (``corpus_score(n_bootstrap=...)``, what ``sacrebleu --confidence`` prints);
for every pair, the p-values of sacreBLEU's paired bootstrap resampling and paired
approximate randomization (``sacrebleu.significance.PairedTest``, what ``--paired-bs``
and ``--paired-ar`` print). The same inputs give the same numbers as the CLI: both use
``SACREBLEU_SEED`` (12345 unless set).

A system is one configured model at one budget. With several seeds, its output is every
seed's hypotheses one after another, against the references repeated once per seed;
two systems are paired line by line, seed i of one with seed i of the other. Resampling
then draws (sentence, seed) pairs, so the interval and the p-value reflect both the
test set's and the seeds' variation (seed spread alone is in the seeds table).

A difference is marked significant when both tests give p < ``ALPHA``, and practical
when it is at least the delta at which the metric agrees with human rankings of two
systems 80% of the time (Kocmi et al. 2024, "Navigating the Metrics Maze", table 1:
BLEU 2.34, chrF 1.63; the paper has no chrF++ row, so chrF's is used for it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest

ALPHA = 0.05
BOOTSTRAP_SAMPLES = 1000  # sacreBLEU's default for --confidence and --paired-bs
RANDOMIZATION_TRIALS = 10000  # sacreBLEU's default for --paired-ar
PRACTICAL_DELTA = {"BLEU": 2.34, "chrF": 1.63, "chrF++": 1.63}


def metrics() -> dict[str, Metric]:
    """Fresh metric objects (sacreBLEU's keep state between calls), by display name."""
    return {"BLEU": BLEU(), "chrF": CHRF(), "chrF++": CHRF(word_order=2)}


@dataclass(frozen=True)
class System:
    name: str  # the configured model (and budget) whose output this is
    hypotheses: list[str]  # every seed's, one after another
    references: list[str]  # repeated once per seed


def confidence_intervals(system: System, samples: int = BOOTSTRAP_SAMPLES) -> dict[str, dict]:
    """Per metric: the score, the bootstrap mean and the half-width of the 95% interval."""
    intervals = {}
    for name, metric in metrics().items():
        score = metric.corpus_score(system.hypotheses, [system.references], n_bootstrap=samples)
        intervals[name] = {"score": score.score, "mean": float(score._mean), "ci": float(score._ci)}
    return intervals


def paired_tests(systems: list[System], bootstrap_samples: int = BOOTSTRAP_SAMPLES,
                 randomization_trials: int = RANDOMIZATION_TRIALS) -> list[dict]:
    """Every pair (a, b), a listed first: per metric the delta b - a, both p-values, and
    whether the delta is significant and practical. Pairs whose references differ (a
    different number of seeds) are left out."""
    rows = []
    for first, second in itertools.combinations(systems, 2):
        if first.references != second.references:
            continue
        named = [(first.name, first.hypotheses), (second.name, second.hypotheses)]
        bootstrap = _paired(named, first.references, "bs", bootstrap_samples)
        randomization = _paired(named, first.references, "ar", randomization_trials)
        for metric, (baseline, other) in bootstrap.items():
            delta = other.score - baseline.score
            p_bootstrap, p_randomization = float(other.p_value), float(randomization[metric][1].p_value)
            rows.append({"a": first.name, "b": second.name, "metric": metric, "a_score": baseline.score,
                         "b_score": other.score, "delta": delta,
                         "p_bootstrap": p_bootstrap, "p_randomization": p_randomization,
                         "significant": max(p_bootstrap, p_randomization) < ALPHA,
                         "practical": abs(delta) >= PRACTICAL_DELTA[metric]})
    return rows


def _paired(named: list[tuple[str, list[str]]], references: list[str], test: str, samples: int) -> dict:
    """Metric -> (the first system's result, the second's with its p-value), from one
    sacreBLEU ``PairedTest``. Its result columns follow the metrics' order, under
    sacreBLEU's own names (chrF2, chrF2++), after the "System" column."""
    _, scores = PairedTest(named, metrics(), [references], test_type=test, n_samples=samples)()
    columns = [column for column in scores if column != "System"]
    return {metric: tuple(scores[column]) for metric, column in zip(metrics(), columns)}
