"""The report's verdicts: a t test with the seeds' and the test set's variance, Holm over
the declared primary comparisons only, one seed called untestable, prose from the
verdicts, and the human-agreement estimate read from Kocmi et al.'s table. (The
resampling itself, and its match with sacreBLEU's command line, is tested in
test_resampling.py; the tests' error rates are measured by
benchmarks/statistics/statistics_calibration.py.)"""

from __future__ import annotations

import dataclasses
import gzip
import random
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from stages.report import welch
from stages.report.comparison_records import Agreement, PairedTest
from stages.report.comparison_tables import findings
from stages.report.resampling import bootstrap_counts, seeded_system
from stages.report.significance import (
    EXPLORATORY,
    PRIMARY,
    SEEDS_AGREED,
    adjust,
    human_agreement,
    metrics,
    paired_tests,
    seeds_agreed,
    shown_p,
    verdict,
)
from tests.helpers import comparison_of, paired_test

SAMPLE = Path(__file__).parents[3] / "data" / "multi30k" / "test_2016_flickr.de.gz"


def degraded(references: list[str], rate: float, seed: int) -> list[str]:
    """Each reference with about ``rate`` of its words dropped: a system of some quality."""
    generator = random.Random(seed)
    return [" ".join(word for word in line.split() if generator.random() > rate) or line for line in references]


@pytest.fixture(scope="module")
def references() -> list[str]:
    return gzip.open(SAMPLE, "rt", encoding="utf-8").read().splitlines()[:200]


def system(name, references, *rates_and_seeds):
    return seeded_system(name, list(range(1, len(rates_and_seeds) + 1)),
                         [(degraded(references, rate, seed), references) for rate, seed in rates_and_seeds], metrics())


def test_human_agreement_reads_the_published_table_and_says_when_it_is_outside_it():
    assert human_agreement("BLEU", 2.34) == Agreement(percent=pytest.approx(80.0), bound=None)
    assert human_agreement("BLEU", -1.79)["percent"] == pytest.approx(75.0)  # the size of a delta, either sign
    between = human_agreement("chrF", (1.00 + 1.28) / 2)
    assert between["percent"] == pytest.approx(72.5) and between["bound"] is None
    assert human_agreement("BLEU", 0.1) == Agreement(percent=50.0, bound="at most")
    assert human_agreement("BLEU", 9.0) == Agreement(percent=85.0, bound="at least")
    assert human_agreement("chrF++", 3.5) == Agreement(percent=90.0, bound="at least")


def primary(first, second):
    return [(first, second, PRIMARY)]


def test_one_seed_is_untestable_and_its_p_is_the_test_sets_alone(references):
    a = system("a", references, (0.2, 1))
    worse = system("worse", references, (0.6, 3))
    rows = adjust(paired_tests(primary(a, worse), bootstrap_counts(len(references), 300, seed=1),
                               randomization_trials=500))
    assert [(row["metric"], row["role"]) for row in rows] == [("BLEU", "primary"), ("chrF", "secondary"),
                                                             ("chrF++", "secondary")]
    clear = rows[0]
    assert not clear["seed_variance_measured"] and clear["significant"] is None and clear["p_holm"] is None
    assert verdict(clear) == "untestable with 1 seed" and clear["family_size"] == 0
    assert clear["p"] < 1e-6  # the test set alone separates the two networks, with no Monte Carlo floor
    assert clear["agreement"] == Agreement(percent=85.0, bound="at least")
    assert clear["delta_low"] <= clear["delta"] <= clear["delta_high"]
    assert verdict(rows[1]) == "secondary"


def test_a_far_apart_pair_with_three_seeds_is_significant(references):
    good = system("good", references, (0.1, 1), (0.12, 2), (0.1, 3))
    poor = system("poor", references, (0.5, 4), (0.48, 5), (0.5, 6))
    (row, *_) = adjust(paired_tests(primary(poor, good), bootstrap_counts(len(references), 300, seed=2),
                                    randomization_trials=300))
    assert row["seed_variance_measured"] and row["seeds"] == [3, 3]
    assert row["significant"] and verdict(row) == "significant" and row["p_holm"] == row["p"] < 1e-3
    assert 2 <= row["df"] < 1000 and row["delta_low"] > 0


def test_the_delta_test_is_welchs_statistic_with_hsus_degrees_of_freedom_when_the_test_set_adds_nothing():
    first, second = np.array([20.1, 21.3, 19.8]), np.array([22.0, 23.5, 22.4, 21.9])
    ours = welch.delta_test(first, second, test_variance=0.0, own_noise=0.0, sentences=1000)
    scipys = stats.ttest_ind(second, first, equal_var=False)
    assert ours["delta"] == pytest.approx(second.mean() - first.mean()) and ours["df"] == pytest.approx(2.0)
    assert ours["p"] == pytest.approx(2 * stats.t.sf(abs(scipys.statistic), 2)) and ours["p"] > scipys.pvalue
    # The test set's variance widens it; the seeds' own sentence noise is not counted twice.
    wider = welch.delta_test(first, second, test_variance=0.5, own_noise=0.0, sentences=1000)
    same = welch.delta_test(first, second, test_variance=0.5, own_noise=0.5, sentences=1000)
    assert wider["standard_error"] > ours["standard_error"] and same["p"] == pytest.approx(ours["p"])
    # A test set that dominates the variance brings the degrees of freedom towards its N - 1.
    dominated = welch.delta_test(first, second, test_variance=50.0, own_noise=0.0, sentences=1000)
    assert dominated["df"] > 100
    assert welch.welch_satterthwaite([(1.0, 2.0), (1.0, 2.0)]) == pytest.approx(4.0)


def test_a_report_with_1200_rows_still_finds_a_20_bleu_gap(references):
    good = system("good", references, (0.05, 1), (0.06, 2), (0.05, 3))
    poor = system("poor", references, (0.45, 4), (0.46, 5), (0.45, 6))
    counts = bootstrap_counts(len(references), 300, seed=3)
    (gap, *_) = paired_tests(primary(poor, good), counts, randomization_trials=300)
    assert gap["delta"] > 20
    exploratory = [dataclasses.replace(gap, a=f"x{i}", b=f"y{i}", role=EXPLORATORY, p=0.5) for i in range(1200)]
    rows = adjust([gap, *exploratory])
    assert rows[0]["significant"] and rows[0]["family_size"] == 1
    assert all(row["significant"] is None and row["p_holm"] is None for row in rows[1:])


def test_holm_runs_over_the_testable_primary_rows_only():
    def row(p, role=PRIMARY, measured=True):
        return paired_test(p=p, role=role, seed_variance_measured=measured, seeds=[3, 3])
    rows = [row(p) for p in (0.01, 0.02, 0.03, 0.04)] + [row(0.001, EXPLORATORY), row(0.001, measured=False)]
    adjusted = adjust(rows)
    assert [r["p_holm"] for r in adjusted[:4]] == pytest.approx([0.04, 0.06, 0.06, 0.06])
    assert [r["significant"] for r in adjusted] == [True, False, False, False, None, None]
    assert all(r["family_size"] == 4 for r in adjusted)
    # Alone, each of the last three would have passed: the correction is what stops them.
    assert all(adjust([r])[0]["significant"] for r in rows[:4])


def test_the_findings_are_written_from_each_pairs_own_verdict(references):
    good = system("good", references, (0.1, 1), (0.1, 2), (0.1, 3))
    poor = system("poor", references, (0.5, 4), (0.5, 5), (0.5, 6))
    close = system("close", references, (0.11, 7), (0.1, 8), (0.09, 9))
    counts = bootstrap_counts(len(references), 300, seed=2)
    rows = adjust(paired_tests([(poor, good, PRIMARY), (good, close, PRIMARY), (poor, close, EXPLORATORY)], counts,
                               randomization_trials=300))
    sentences = findings(comparison_of(tests=rows))
    assert len(sentences) == 2  # the exploratory pair has no sentence
    assert sentences[0].startswith("good scored ") and " BLEU above poor [" in sentences[0]
    assert "(3/3 seeds): significant (Holm p " in sentences[0] and "over 2 primary comparisons" in sentences[0]
    assert "not significant" in sentences[1] and "would be detected 80% of the time" in sentences[1]
    one = adjust(paired_tests(primary(system("a", references, (0.1, 1)), system("b", references, (0.5, 2))),
                              counts, randomization_trials=300))
    said = findings(comparison_of(tests=one))[0]
    assert "untestable with 1 seed" in said and "the test set's variation alone gives p" in said
    assert "not significant" not in said and "cannot tell" not in said


def test_holm_leaves_out_rows_with_two_seeds_a_side_and_they_get_no_verdict_word():
    rows = [paired_test(p=1e-40, seeds=seeds) for seeds in ([2, 2], [2, 5], [3, 3])]
    adjusted = adjust(rows)
    assert [row["significant"] for row in adjusted] == [None, None, True]
    assert [row["family_size"] for row in adjusted] == [1, 1, 1]
    assert [verdict(row) for row in adjusted] == ["no verdict with 2 seeds (3 needed)"] * 2 + ["significant"]


def test_a_printed_p_is_floored_at_one_in_a_thousand():
    assert shown_p(5.06e-77) == "< 0.001" and shown_p(0.000999) == "< 0.001"
    assert shown_p(0.001) == "0.0010" and shown_p(0.0333) == "0.0333" and shown_p(None) == "-"


def test_seeds_that_agree_far_more_than_the_test_set_varies_are_said_to_with_what_it_assumes():
    agreeing = welch.delta_test(np.array([20.0, 20.02, 20.01]), np.array([22.0, 22.01, 22.02]), test_variance=0.5,
                                own_noise=0.0, sentences=1000)
    spread = welch.delta_test(np.array([19.0, 20.5, 21.0]), np.array([21.5, 22.0, 23.4]), test_variance=0.5,
                              own_noise=0.0, sentences=1000)
    assert agreeing["seed_share"] < SEEDS_AGREED < spread["seed_share"]
    # Agreeing seeds leave the degrees of freedom to the test set's: the p is tiny.
    assert agreeing["df"] > 100 and spread["df"] < 20
    one = welch.delta_test(np.array([20.0]), np.array([22.0]), test_variance=0.5, own_noise=0.0, sentences=1000)
    assert one["seed_share"] is None and not seeds_agreed(paired_test(seed_share=one["seed_share"]))

    def row(share: float) -> PairedTest:
        return paired_test(delta=2.0, delta_low=0.6, delta_high=3.4, significant=True, p_holm=1e-12, family_size=1,
                           detectable=1.5, seed_share=share)
    said = findings(comparison_of(tests=[row(agreeing["seed_share"])]))[0]
    assert "significant (Holm p < 0.001" in said
    assert "the seeds agreed" in said and "assumes the recipes' seeds spread no more than these 3/3 did" in said
    assert "the seeds agreed" not in findings(comparison_of(tests=[row(spread["seed_share"])]))[0]


def test_a_lead_is_given_with_its_own_interval_whichever_side_is_ahead():
    def row(delta: float, low: float, high: float) -> PairedTest:
        return paired_test(delta=delta, delta_low=low, delta_high=high, significant=False, p_holm=0.47,
                           family_size=1, detectable=2.5)
    said = findings(comparison_of(tests=[row(-0.13, -0.50, 0.18)]))[0]
    # a ahead by 0.13 (b - a = -0.13, interval [-0.50, +0.18]): a's lead is in [-0.18, +0.50].
    assert said.startswith("a scored 0.13 BLEU above b [-0.18, +0.50] (3/3 seeds): not significant (Holm p 0.4700")
    assert findings(comparison_of(tests=[row(0.13, -0.18, 0.50)]))[0].startswith(
        "b scored 0.13 BLEU above a [-0.18, +0.50]")
    assert findings(comparison_of(tests=[row(-1.71, -2.30, -1.17)]))[0].startswith(
        "a scored 1.71 BLEU above b [1.17, 2.30]")
