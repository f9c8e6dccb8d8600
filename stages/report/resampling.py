"""Confidence intervals and paired tests that keep a system's seeds together, computed
from sacreBLEU's per-sentence sufficient statistics with numpy.

A system is one configured model at one budget, trained with K seeds and scored on one
test set of N sentences: for each metric, an array of shape (K, N, D) holding, per seed
and sentence, the statistics sacreBLEU sums into a corpus score (BLEU: lengths, n-gram
matches and totals; chrF/chrF++: hypothesis, reference and matched counts per character
and word n-gram order). Its score is the mean over seeds of each seed's corpus score.

- Bootstrap resampling draws test sentences, not (sentence, seed) rows: a drawn sentence
  brings every seed's output of it, and each resample is scored as the mean of the seeds'
  corpus scores on it. A second seed is therefore never counted as a second test set,
  and a seed given twice leaves every resample's score as it was. The bootstrap measures
  the test set's variation only; how much the seeds vary is measured by their spread,
  and ``welch`` adds the two.
- Approximate randomization swaps a sentence's outputs between the two systems with one
  coin per sentence, every seed's output of it at once (seed k of one with seed k of the
  other): as in the bootstrap, a copy of a seed adds no evidence.

With one seed these are sacreBLEU's own procedures, drawing the same random numbers
(``SACREBLEU_SEED``, 12345 unless set), so ``interval`` equals ``sacrebleu
--confidence``, and the ``p_sacrebleu`` fields equal what ``--paired-bs`` and
``--paired-ar`` print. The ``p`` fields differ on purpose: they are two-sided and count
ties as extreme. sacreBLEU's paired bootstrap compares the spread of |delta| with the
observed |delta|, which halves a two-sided p; and both of its tests count only resamples
strictly beyond the observed delta, so a system compared with itself gets p = 1/(n+1).

The per-sentence statistics come from sacreBLEU's ``_extract_corpus_statistics``, the
method its own significance module uses; the scores from them are sacreBLEU's formulas
(``BLEU.compute_bleu`` with its defaults, ``CHRF._compute_f_score``) written for arrays,
and a unit test holds them equal to ``corpus_score`` on Multi30k.
"""

from __future__ import annotations

import hashlib
import functools
import os
from dataclasses import dataclass, field

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric

from stages.report.comparison_records import SacrebleuInterval

BOOTSTRAP_SAMPLES = 1000  # sacreBLEU's default for --confidence and --paired-bs
RANDOMIZATION_TRIALS = 10000  # sacreBLEU's default for --paired-ar


def sacrebleu_seed() -> int | None:
    """The seed sacreBLEU's resampling uses (``SACREBLEU_SEED``; "none" draws from the OS)."""
    seed = os.environ.get("SACREBLEU_SEED", "12345")
    return None if seed.lower() == "none" else int(seed)


def sentence_statistics(metric: Metric, hypotheses: list[str], references: list[str]) -> np.ndarray:
    """One row of sufficient statistics per sentence, shape (N, D)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses against {len(references)} references")
    return np.asarray(metric._extract_corpus_statistics(hypotheses, [references]), dtype=np.float64)


def corpus_scores(metric: Metric, totals: np.ndarray) -> np.ndarray:
    """The corpus score of each row of summed statistics, shape (..., D) -> (...)."""
    totals = np.asarray(totals, dtype=np.float64)
    if isinstance(metric, BLEU):
        return _bleu(metric, totals)
    if isinstance(metric, CHRF):
        return _chrf(metric, totals)
    raise TypeError(f"no array form of {type(metric).__name__}'s score")


def _bleu(metric: BLEU, totals: np.ndarray) -> np.ndarray:
    """``BLEU.compute_bleu`` for arrays, for the settings it is used with here: 'exp'
    smoothing (the corpus default), no effective order, sacreBLEU's floor for log 0."""
    if metric.smooth_method != "exp" or metric.effective_order:
        raise ValueError("the array form of BLEU covers smooth_method='exp' without effective_order")
    order = metric.max_ngram_order
    sys_len, ref_len = totals[..., 0], totals[..., 1]
    correct, total = totals[..., 2:2 + order], totals[..., 2 + order:2 + 2 * order]
    with np.errstate(divide="ignore", invalid="ignore"):
        brevity = np.where(sys_len < ref_len,
                           np.where(sys_len > 0, np.exp(1 - ref_len / np.where(sys_len > 0, sys_len, 1)), 0.0), 1.0)
        # An order with no n-grams ends the loop in sacreBLEU: it and every higher order
        # keep precision 0. An order with none correct gets 100 / (2^k * total), k
        # counting such orders so far.
        reached = np.cumprod(total > 0, axis=-1).astype(bool)
        zero_correct = (correct == 0) & reached
        halvings = np.cumsum(zero_correct, axis=-1)
        safe_total = np.where(total > 0, total, 1)
        precision = np.where(zero_correct, 100.0 / (2.0 ** halvings * safe_total), 100.0 * correct / safe_total)
        precision = np.where(reached, precision, 0.0)
        logs = np.where(precision > 0, np.log(np.where(precision > 0, precision, 1)), -9999999999.0)
        scores = brevity * np.exp(logs.sum(axis=-1) / order)
    return np.where(correct.sum(axis=-1) > 0, scores, 0.0)


def _chrf(metric: CHRF, totals: np.ndarray) -> np.ndarray:
    """``CHRF._compute_f_score`` for arrays (sacreBLEU's default effective-order
    averaging; with eps_smoothing, the chrF++.py form)."""
    eps, factor = 1e-16, metric.beta ** 2
    counts = totals.reshape(*totals.shape[:-1], metric.order, 3)
    hyp, ref, match = counts[..., 0], counts[..., 1], counts[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(hyp > 0, match / np.where(hyp > 0, hyp, 1), eps)
        recall = np.where(ref > 0, match / np.where(ref > 0, ref, 1), eps)
        if metric.eps_smoothing:
            denominator = factor * precision + recall
            f = np.where(denominator > 0, (1 + factor) * precision * recall / np.where(denominator > 0, denominator, 1),
                         eps)
            return 100 * f.sum(axis=-1) / metric.order
        counted = (hyp > 0) & (ref > 0)
        orders = counted.sum(axis=-1)
        average_precision = np.where(orders > 0, (precision * counted).sum(axis=-1) / np.maximum(orders, 1), 0.0)
        average_recall = np.where(orders > 0, (recall * counted).sum(axis=-1) / np.maximum(orders, 1), 0.0)
        both = average_precision + average_recall
        f = (1 + factor) * average_precision * average_recall / np.where(
            both > 0, factor * average_precision + average_recall, 1)
    return np.where(both > 0, 100 * f, 0.0)


@dataclass(frozen=True)
class SeededSystem:
    """One system's sufficient statistics: metric name -> array (K seeds, N sentences, D).
    ``repeated``: seeds left out because their outputs were another seed's, word for
    word (seed -> the seed kept); ``test_set``: the sha256 of its references, which a
    paired test needs to be the other system's too (None: not known, as in simulations)."""
    name: str
    seeds: tuple
    statistics: dict[str, np.ndarray]
    repeated: dict = field(default_factory=dict)
    test_set: str | None = None

    def seed_scores(self, metric_name: str, metric: Metric) -> np.ndarray:
        """Each seed's corpus score, shape (K,)."""
        return corpus_scores(metric, self.statistics[metric_name].sum(axis=1))

    def score(self, metric_name: str, metric: Metric) -> float:
        """The system's score: the mean of its seeds' corpus scores."""
        return float(self.seed_scores(metric_name, metric).mean())


def seeded_system(name: str, seeds: list, outputs: list[tuple[list[str], list[str]]],
                  metrics: dict[str, Metric]) -> SeededSystem:
    """``outputs``: per seed, (hypotheses, references); every seed must be scored on the
    same references, or its statistics would not be of the same sentences. A seed whose
    hypotheses are another seed's, line for line, is the same evidence twice (a seed
    listed twice, a run copied): it is counted once and named in ``repeated``."""
    references = outputs[0][1]
    for seed, (_, seed_references) in zip(seeds, outputs):
        if seed_references != references:
            raise ValueError(f"{name}: seed {seed} was scored on other references than seed {seeds[0]}; "
                             "a system's seeds must share one test set")
    kept: list[tuple[int, list[str]]] = []
    first_of: dict[tuple[str, ...], int] = {}  # a seed's outputs -> the first seed that wrote them
    repeated: dict[int, int] = {}
    for seed, (hypotheses, _) in zip(seeds, outputs):
        key = tuple(hypotheses)
        if key in first_of:
            repeated[seed] = first_of[key]
            continue
        first_of[key] = seed
        kept.append((seed, hypotheses))
    return SeededSystem(name, tuple(seed for seed, _ in kept), {
        metric_name: np.stack([sentence_statistics(metric, hypotheses, references) for _, hypotheses in kept])
        for metric_name, metric in metrics.items()}, repeated, test_set_hash(references))


def test_set_hash(references: list[str]) -> str:
    """The sha256 of a test set's references, one per line: what two evaluations must
    share for their sentences to be paired."""
    return hashlib.sha256("\n".join(references).encode("utf-8")).hexdigest()


def unpaired_reason(first: SeededSystem, second: SeededSystem) -> str | None:
    """Why the two systems' sentences cannot be paired, or None when they can: a paired
    test needs the same test sentences on both sides, not merely as many."""
    sizes = [next(iter(system.statistics.values())).shape[1] for system in (first, second)]
    if sizes[0] != sizes[1]:
        return (f"{first.name} and {second.name} were scored on test sets of different sizes ({sizes[0]} and "
                f"{sizes[1]} sentences)")
    if first.test_set is not None and second.test_set is not None and first.test_set != second.test_set:
        return (f"{first.name} and {second.name} were scored on different references ({sizes[0]} sentences each; "
                f"sha256 {first.test_set[:12]} and {second.test_set[:12]})")
    return None


def check_paired(first: SeededSystem, second: SeededSystem) -> None:
    """Paired tests need the same test sentences on both sides."""
    reason = unpaired_reason(first, second)
    if reason:
        raise ValueError(reason)


def bootstrap_counts(sentences: int, samples: int = BOOTSTRAP_SAMPLES, seed: int | None = None) -> np.ndarray:
    """How often each sentence is drawn in each resample, shape (samples, N): sacreBLEU's
    draws (``rng.choice(N, size=(samples, N))``) as counts, so that a resample's totals
    are one matrix product. Read-only, and drawn once per process for each (N, samples,
    seed): a seeded draw is the same every time, and drawing it took as long as
    comparing two systems with it."""
    seed = sacrebleu_seed() if seed is None else seed
    # SACREBLEU_SEED=none asks for fresh draws each time: never cached.
    return _draw_counts(sentences, samples, None) if seed is None else _seeded_counts(sentences, samples, seed)


def _draw_counts(sentences: int, samples: int, seed: int | None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    indices = rng.choice(sentences, size=(samples, sentences), replace=True)
    offsets = (np.arange(samples) * sentences)[:, None]
    drawn = np.bincount((indices + offsets).ravel(), minlength=samples * sentences).reshape(samples, sentences)
    counts = drawn.astype(np.float64)  # a resample's totals: one float product, counts exact
    counts.flags.writeable = False
    return counts


_seeded_counts = functools.lru_cache(maxsize=8)(_draw_counts)


def percentile_ends(values: np.ndarray) -> tuple[float, float]:
    """The values at the 2.5th and 97.5th percentile positions of the sorted resamples,
    as sacreBLEU's ``estimate_ci`` picks them."""
    ordered = np.sort(values)
    lower = len(ordered) // 40
    return float(ordered[lower]), float(ordered[len(ordered) - lower - 1])


def estimate_ci(scores: np.ndarray) -> tuple[float, float]:
    """sacreBLEU's ``estimate_ci``: the mean, and half the distance between the ends."""
    low, high = percentile_ends(scores)
    return float(np.mean(scores)), 0.5 * (high - low)


def resampled_seed_scores(system: SeededSystem, metric_name: str, metric: Metric, counts: np.ndarray) -> np.ndarray:
    """Each seed's corpus score on each resample of sentences, shape (samples, K)."""
    statistics = system.statistics[metric_name]  # (K, N, D)
    seeds, sentences, width = statistics.shape
    # One product for every seed: (samples, N) @ (N, K * D).
    totals = (counts @ statistics.transpose(1, 0, 2).reshape(sentences, seeds * width)).reshape(-1, seeds, width)
    return corpus_scores(metric, totals)


def resampled_scores(system: SeededSystem, metric_name: str, metric: Metric, counts: np.ndarray) -> np.ndarray:
    """The system's score on each resample of sentences, shape (samples,): the mean of
    its seeds' corpus scores on the drawn sentences."""
    return resampled_seed_scores(system, metric_name, metric, counts).mean(axis=1)


def own_sentence_noise(per_seed: np.ndarray) -> float:
    """Of the bootstrap variance of the seeds' mean (``per_seed``: (samples, K)), the
    part that is each seed's own sentence-by-sentence variation, independent between
    seeds: (mean of the seeds' bootstrap variances - the mean's) / (K - 1). The seeds'
    spread on the test set already holds it, so ``welch`` counts it once. 0 for one
    seed (it cannot be told apart from the test set's)."""
    seeds = per_seed.shape[1]
    if seeds < 2:
        return 0.0
    each = float(np.var(per_seed, axis=0, ddof=1).mean())
    together = float(np.var(per_seed.mean(axis=1), ddof=1))
    return max(0.0, (each - together) / (seeds - 1))


def sacrebleu_interval(resampled: np.ndarray) -> SacrebleuInterval:
    """What ``sacrebleu --confidence`` prints from a system's resampled scores
    (``resampled_scores``): their mean and half the distance between the 2.5th and 97.5th
    percentile resamples; the test set's variation only (the report's interval,
    ``welch.system_interval``, adds the seeds')."""
    mean, half_width = estimate_ci(resampled)
    return SacrebleuInterval(mean=mean, ci=half_width)


def paired_bootstrap(first: SeededSystem, second: SeededSystem, metric_name: str, metric: Metric,
                     counts: np.ndarray) -> dict:
    """delta = second - first on the same resamples of sentences (``bootstrap_deltas``)."""
    check_paired(first, second)
    return bootstrap_deltas(second.score(metric_name, metric) - first.score(metric_name, metric),
                            resampled_scores(first, metric_name, metric, counts),
                            resampled_scores(second, metric_name, metric, counts))


def bootstrap_deltas(observed: float, first: np.ndarray, second: np.ndarray) -> dict:
    """The paired bootstrap from the two systems' scores on the same resamples.
    ``variance``: the resampled deltas' variance, the test set's share of the delta's
    (``welch`` adds the seeds'). ``p``: two-sided, the share of resampled deltas,
    centred on their mean, at least as far from 0 as the observed one (Koehn 2004;
    Berg-Kirkpatrick et al. 2012): a test of the test set's variation alone, never below
    1/(samples + 1). ``p_sacrebleu``: what ``--paired-bs`` prints.
    ``delta_low``/``delta_high``: the 2.5th and 97.5th percentile deltas."""
    deltas = second - first
    centred = deltas - deltas.mean()
    spread = np.abs(deltas)
    low, high = percentile_ends(deltas)
    return {"delta": observed, "variance": float(np.var(deltas, ddof=1)),
            "p": _p_value(np.abs(centred) >= abs(observed) - _TIE),
            "p_sacrebleu": _p_value(spread - spread.mean() > abs(observed)),
            "delta_low": low, "delta_high": high}


def paired_randomization(first: SeededSystem, second: SeededSystem, metric_name: str, metric: Metric,
                         trials: int = RANDOMIZATION_TRIALS, seed: int | None = None) -> dict | None:
    """Approximate randomization: in each trial, each sentence's outputs are swapped
    between the systems with probability 1/2, one coin per sentence for every seed pair
    (seed k of one with seed k of the other; with one seed, sacreBLEU's own draws). A seed
    given twice on both sides leaves every trial's delta, and so p, as it was. ``p``: the
    share of trials whose |delta| is at least the observed one; ``p_sacrebleu``: strictly
    greater, what ``--paired-ar`` prints. None when the systems have different numbers of
    seeds (there is no seed to swap with)."""
    check_paired(first, second)
    if len(first.seeds) != len(second.seeds):
        return None
    rng = np.random.default_rng(sacrebleu_seed() if seed is None else seed)
    a, b = first.statistics[metric_name], second.statistics[metric_name]
    seeds, sentences = a.shape[0], a.shape[1]
    swaps = rng.integers(2, size=(trials, sentences), dtype=bool).astype(np.float64)
    scores_a, scores_b = np.zeros(trials), np.zeros(trials)
    for k in range(seeds):
        # First's side of a trial: b's statistics, then a's where the coin kept them
        # (sacreBLEU's pos_sel @ a + neg_sel @ b, with one product instead of two).
        kept = swaps @ (a[k] - b[k])
        scores_a += corpus_scores(metric, b[k].sum(axis=0) + kept)
        scores_b += corpus_scores(metric, a[k].sum(axis=0) - kept)
    differences = np.abs(scores_a - scores_b) / seeds
    observed = abs(second.score(metric_name, metric) - first.score(metric_name, metric))
    return {"p": _p_value(differences >= observed - _TIE), "p_sacrebleu": _p_value(differences > observed)}


# Scores are sums of floating-point terms: a resample identical to the observed data can
# land a rounding error below it. Differences within this count as ties.
_TIE = 1e-9


def _p_value(extreme: np.ndarray) -> float:
    """(extreme + 1) / (trials + 1): never 0, and exact for a test that is (Phipson and
    Smyth 2010)."""
    return float((np.count_nonzero(extreme) + 1) / (len(extreme) + 1))


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the given order: the i-th smallest p times
    (m - i + 1), made non-decreasing along that order and capped at 1."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
