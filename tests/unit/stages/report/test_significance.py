"""The report's verdicts: Holm over every comparison, the seed-level test required with
several seeds, one seed said to measure the test set only, and the human-agreement
estimate read from Kocmi et al.'s table. (The resampling itself, and its match with
sacreBLEU's command line, is tested in test_resampling.py.)"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from stages.report.comparison_tables import findings, verdict
from stages.report.resampling import bootstrap_counts, seeded_system
from stages.report.significance import adjust, human_agreement, metrics, paired_tests

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
    assert human_agreement("BLEU", 2.34) == {"percent": pytest.approx(80.0), "bound": None}
    assert human_agreement("BLEU", -1.79)["percent"] == pytest.approx(75.0)  # the size of a delta, either sign
    between = human_agreement("chrF", (1.00 + 1.28) / 2)
    assert between["percent"] == pytest.approx(72.5) and between["bound"] is None
    assert human_agreement("BLEU", 0.1) == {"percent": 50.0, "bound": "at most"}
    assert human_agreement("BLEU", 9.0) == {"percent": 85.0, "bound": "at least"}
    assert human_agreement("chrF++", 3.5) == {"percent": 90.0, "bound": "at least"}


def test_one_seed_verdicts_say_they_measured_the_test_set_only(references):
    a = system("a", references, (0.2, 1))
    worse = system("worse", references, (0.6, 3))
    slightly = seeded_system("slightly", [1], [(degraded(references, 0.3, 4)[:4] + degraded(references, 0.2, 1)[4:],
                                                references)], metrics())
    rows = adjust(paired_tests([a, worse, slightly], bootstrap_counts(len(references), 300, seed=1),
                               randomization_trials=500))
    assert len(rows) == 9 and all(row["comparisons"] == 9 for row in rows)
    by_pair = {(row["a"], row["b"], row["metric"]): row for row in rows}
    clear = by_pair[("a", "worse", "BLEU")]
    assert clear["significant"] and "p_seeds" not in clear
    assert verdict(clear) == "significant on this test set (1 seed)"
    assert clear["agreement"] == {"percent": 85.0, "bound": "at least"}
    slight = by_pair[("a", "slightly", "chrF")]
    assert not slight["significant"] and verdict(slight) == "not significant"
    assert slight["delta_low"] <= slight["delta"] <= slight["delta_high"]


def test_with_few_seeds_the_seed_level_test_decides_and_says_how_small_its_p_can_be(references):
    # Three seeds each, far apart: the sentence level rejects; the seed level cannot
    # reject at 0.05 with 3 seeds a side (its smallest p is 0.1), so nothing is called
    # significant, and the verdict says it is the seeds that fall short.
    good = system("good", references, (0.1, 1), (0.1, 2), (0.1, 3))
    poor = system("poor", references, (0.5, 4), (0.5, 5), (0.5, 6))
    rows = adjust(paired_tests([good, poor], bootstrap_counts(len(references), 300, seed=2), randomization_trials=300))
    for row in rows:
        assert row["p_sentences_holm"] < 0.05
        assert row["p_seeds"] == pytest.approx(0.1) and row["p_seeds_smallest"] == pytest.approx(0.1)
        assert not row["significant"] and verdict(row) == "not significant across seeds"


def test_holm_counts_every_comparison_of_the_report():
    rows = [{"p_sentences": p, "seeds": 1} for p in (0.01, 0.02, 0.03, 0.04)]
    adjusted = adjust(rows)
    assert [row["p_sentences_holm"] for row in adjusted] == pytest.approx([0.04, 0.06, 0.06, 0.06])
    assert [row["significant"] for row in adjusted] == [True, False, False, False]
    # Alone, each of the last three would have passed: the correction is what stops them.
    assert all(adjust([row])[0]["significant"] for row in rows)


def test_the_findings_are_written_from_each_pairs_own_verdict(references):
    good = system("good", references, (0.1, 1), (0.1, 2), (0.1, 3))
    poor = system("poor", references, (0.5, 4), (0.5, 5), (0.5, 6))
    rows = adjust(paired_tests([good, poor], bootstrap_counts(len(references), 300, seed=2), randomization_trials=300))
    (sentence,) = findings({"tests": rows})
    assert sentence.startswith("good scored ") and " BLEU above poor [" in sentence
    assert "not shown across seeds" in sentence and "smallest possible p is 0.10" in sentence
    one = adjust(paired_tests([system("a", references, (0.1, 1)), system("b", references, (0.5, 2))],
                              bootstrap_counts(len(references), 300, seed=2), randomization_trials=300))
    assert "with one seed each (seed variation not measured)" in findings({"tests": one})[0]


def test_a_lead_is_given_with_its_own_interval_whichever_side_is_ahead():
    def row(delta: float, low: float, high: float) -> dict:
        return {"metric": "BLEU", "a": "a", "b": "b", "delta": delta, "delta_low": low, "delta_high": high,
                "significant": False, "seeds": 1, "p_sentences_holm": 0.47}
    # a ahead by 0.13 (b - a = -0.13, interval [-0.50, +0.18]): a's lead is in [-0.18, +0.50].
    assert findings({"tests": [row(-0.13, -0.50, 0.18)]}) == [
        "a scored 0.13 BLEU above b [-0.18, +0.50]: not significant (Holm p 0.470)."]
    assert findings({"tests": [row(0.13, -0.18, 0.50)]}) == [
        "b scored 0.13 BLEU above a [-0.18, +0.50]: not significant (Holm p 0.470)."]
    assert findings({"tests": [row(-1.71, -2.30, -1.17)]})[0].startswith("a scored 1.71 BLEU above b [1.17, 2.30]")
