"""Seed-aware resampling on synthetic systems with known answers: scores from the
sufficient statistics are sacreBLEU's, a duplicated seed adds nothing, disagreeing seeds
widen the interval, a system is not significantly different from itself, a shifted one
is, and with one seed the numbers are sacreBLEU's own."""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from stages.report.resampling import (
    bootstrap_counts,
    corpus_scores,
    holm,
    interval,
    paired_bootstrap,
    paired_randomization,
    seed_permutation_test,
    seeded_system,
    sentence_statistics,
)

SAMPLE = Path(__file__).parents[3] / "data" / "multi30k"
CLI_METRICS = {"BLEU": ["-m", "bleu"], "chrF": ["-m", "chrf"], "chrF++": ["-m", "chrf", "--chrf-word-order", "2"]}


def metrics() -> dict:
    return {"BLEU": BLEU(), "chrF": CHRF(), "chrF++": CHRF(word_order=2)}


def read(name: str, count: int = 300) -> list[str]:
    with gzip.open(SAMPLE / name, "rt", encoding="utf-8") as lines:
        return lines.read().splitlines()[:count]


def degraded(references: list[str], rate: float, seed: int) -> list[str]:
    """Each reference with about ``rate`` of its words dropped: a system of some quality."""
    generator = random.Random(seed)
    return [" ".join(word for word in line.split() if generator.random() > rate) or line for line in references]


@pytest.fixture(scope="module")
def references() -> list[str]:
    return read("test_2016_flickr.de.gz")


def system(name, references, *seed_outputs):
    return seeded_system(name, list(range(1, len(seed_outputs) + 1)), [(out, references) for out in seed_outputs],
                         metrics())


@pytest.mark.parametrize("metric_name", ["BLEU", "chrF", "chrF++"])
def test_corpus_scores_from_the_sentence_statistics_are_sacrebleus(references, metric_name):
    metric = metrics()[metric_name]
    sources = read("test_2016_flickr.en.gz")  # English against German: many orders match nothing
    for hypotheses in (degraded(references, 0.3, 1), sources, [""] * len(references), references):
        statistics = sentence_statistics(metric, hypotheses, references)
        expected = metrics()[metric_name].corpus_score(hypotheses, [references]).score
        assert float(corpus_scores(metric, statistics.sum(axis=0))) == pytest.approx(expected, abs=1e-9)
    # Sentence by sentence as well: short lines reach the orders with no n-grams at all.
    for line, reference in zip(degraded(references, 0.5, 2)[:60], references[:60]):
        statistics = sentence_statistics(metric, [line], [reference])
        expected = metrics()[metric_name].corpus_score([line], [[reference]]).score
        assert float(corpus_scores(metric, statistics[0])) == pytest.approx(expected, abs=1e-9)


def test_a_system_duplicated_as_a_second_seed_has_the_one_seed_interval_and_p_values(references):
    a = degraded(references, 0.2, 1)
    b = degraded(references, 0.25, 2)
    counts = bootstrap_counts(len(references), 1000, seed=7)
    one_a, one_b = system("a", references, a), system("b", references, b)
    two_a, two_b = system("a", references, a, a), system("b", references, b, b)
    for name, metric in metrics().items():
        assert interval(two_a, name, metric, counts) == pytest.approx(interval(one_a, name, metric, counts))
        one = paired_bootstrap(one_a, one_b, name, metric, counts)
        two = paired_bootstrap(two_a, two_b, name, metric, counts)
        assert two["p"] == pytest.approx(one["p"]) and two["delta"] == pytest.approx(one["delta"])
    # Randomization draws a coin per seed, so a duplicate is two looks at the same swap
    # distribution: equal within Monte Carlo error, not exactly.
    one = paired_randomization(one_a, one_b, "BLEU", BLEU(), trials=4000, seed=3)["p"]
    two = paired_randomization(two_a, two_b, "BLEU", BLEU(), trials=4000, seed=3)["p"]
    assert two <= max(0.05, 3 * one) and one <= max(0.05, 3 * two)


def test_seeds_that_disagree_widen_the_interval(references):
    good, poor = degraded(references, 0.1, 1), degraded(references, 0.5, 2)
    counts = bootstrap_counts(len(references), 500, seed=1)
    alone = interval(system("a", references, good), "BLEU", BLEU(), counts)
    together = interval(system("a", references, good, poor), "BLEU", BLEU(), counts)
    agreeing = interval(system("a", references, good, degraded(references, 0.1, 3)), "BLEU", BLEU(), counts)
    assert together["ci"] > alone["ci"] and together["ci"] > agreeing["ci"]


def test_a_system_against_a_copy_of_itself_is_not_significant(references):
    a = degraded(references, 0.2, 1)
    first, second = system("a", references, a, degraded(references, 0.2, 5)), \
        system("copy", references, a, degraded(references, 0.2, 5))
    counts = bootstrap_counts(len(references), 500, seed=2)
    for name, metric in metrics().items():
        assert paired_bootstrap(first, second, name, metric, counts)["p"] == 1.0
        assert paired_randomization(first, second, name, metric, trials=500, seed=2)["p"] == 1.0
    assert seed_permutation_test([30.0, 31.0], [30.0, 31.0])["p"] == 1.0


def test_a_shifted_system_is_significant_and_its_delta_interval_holds_the_delta(references):
    counts = bootstrap_counts(len(references), 1000, seed=4)
    better = system("better", references, degraded(references, 0.1, 1), degraded(references, 0.1, 2))
    worse = system("worse", references, degraded(references, 0.4, 3), degraded(references, 0.4, 4))
    bootstrap = paired_bootstrap(worse, better, "BLEU", BLEU(), counts)
    assert bootstrap["delta"] > 10 and bootstrap["p"] < 0.01
    assert bootstrap["delta_low"] < bootstrap["delta"] < bootstrap["delta_high"]
    assert paired_randomization(worse, better, "chrF", CHRF(), trials=2000, seed=4)["p"] < 0.01


def test_the_seed_permutation_test_is_exact_and_says_how_small_its_p_can_be():
    clear = seed_permutation_test([10.0, 11.0, 12.0], [20.0, 21.0, 22.0])
    assert clear["splits"] == 20 and clear["p"] == pytest.approx(0.1) and clear["smallest_p"] == pytest.approx(0.1)
    four = seed_permutation_test([10.0, 11.0, 12.0, 13.0], [20.0, 21.0, 22.0, 23.0])
    assert four["p"] == pytest.approx(2 / 70) and four["smallest_p"] == pytest.approx(2 / 70)
    # One overlap: the observed split and its mirror are not alone any more.
    overlapping = seed_permutation_test([10.0, 11.0, 21.5], [20.0, 21.0, 22.0])
    assert overlapping["p"] > clear["p"]
    with pytest.raises(ValueError, match="at least one seed"):
        seed_permutation_test([], [1.0])


def test_holms_adjustment_matches_a_hand_computed_example():
    # Sorted: 0.01 x 4 = 0.04, 0.02 x 3 = 0.06, 0.03 x 2 = 0.06, 0.04 x 1 -> 0.06 (monotone).
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_systems_whose_seeds_or_test_sets_differ_are_refused_with_the_reason(references):
    a = degraded(references, 0.2, 1)
    with pytest.raises(ValueError, match="seed 2 was scored on other references than seed 1"):
        seeded_system("a", [1, 2], [(a, references), (a[:-1], references[:-1])], metrics())
    one, two = system("one", references, a), system("two", references, a, a)
    counts = bootstrap_counts(len(references), 10, seed=1)
    with pytest.raises(ValueError, match="one has 1 seeds and two 2"):
        paired_bootstrap(one, two, "BLEU", BLEU(), counts)
    shorter = system("shorter", references[:-1], a[:-1])
    with pytest.raises(ValueError, match="test sets of different sizes"):
        paired_randomization(one, shorter, "BLEU", BLEU(), trials=10)


def sacrebleu_cli(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "sacrebleu", *args, "-w", "4"], check=True, capture_output=True,
                          text=True, env={"SACREBLEU_SEED": "12345", "PATH": ""}).stdout


def test_with_one_seed_the_numbers_are_what_sacrebleus_command_line_prints(references, tmp_path):
    references = references[:200]
    paths = {name: tmp_path / f"{name}.txt" for name in ("ref", "a", "b")}
    outputs = {"ref": references, "a": degraded(references, 0.2, 1), "b": degraded(references, 0.3, 2)}
    for name, path in paths.items():
        path.write_text("\n".join(outputs[name]) + "\n", encoding="utf-8")
    a, b = system("a", references, outputs["a"]), system("b", references, outputs["b"])
    counts = bootstrap_counts(len(references), 1000)
    for name, flags in CLI_METRICS.items():
        metric = metrics()[name]
        printed = json.loads(sacrebleu_cli(str(paths["ref"]), "-i", str(paths["a"]), *flags, "--confidence",
                                           "-f", "json"))
        ours = interval(a, name, metric, counts)
        assert ours["score"] == pytest.approx(printed["score"], abs=5e-5)
        assert ours["mean"] == pytest.approx(printed["confidence_mean"], abs=5e-5)
        assert ours["ci"] == pytest.approx(printed["confidence_var"], abs=5e-5)
        for test, ours_p in (("bs", paired_bootstrap(a, b, name, metric, counts)["p_sacrebleu"]),
                             ("ar", paired_randomization(a, b, name, metric)["p_sacrebleu"])):
            printed = sacrebleu_cli(str(paths["ref"]), "-i", str(paths["a"]), str(paths["b"]), *flags,
                                    f"--paired-{test}", "-f", "text")
            assert round(ours_p, 4) == pytest.approx(float(re.search(r"\(p = ([0-9.]+)\)", printed).group(1)),
                                                     abs=1e-9), (name, test)


def test_the_two_sided_bootstrap_p_is_about_twice_sacrebleus(references):
    counts = bootstrap_counts(len(references), 2000, seed=9)
    a = system("a", references, degraded(references, 0.20, 1))
    b = system("b", references, degraded(references, 0.215, 2))
    result = paired_bootstrap(a, b, "chrF", CHRF(), counts)
    assert 0.02 < result["p_sacrebleu"] < 0.45
    assert result["p"] == pytest.approx(2 * result["p_sacrebleu"], rel=0.35)


def test_bootstrap_counts_are_sacrebleus_draws():
    counts = bootstrap_counts(50, 20, seed=12345)
    indices = np.random.default_rng(12345).choice(50, size=(20, 50), replace=True)
    for row, drawn in zip(counts, indices):
        assert np.array_equal(row, np.bincount(drawn, minlength=50))
