"""Seed-aware resampling on synthetic systems with known answers: scores from the
sufficient statistics are sacreBLEU's, a duplicated seed adds nothing to the bootstrap,
the randomization test or the interval, a system is not significantly different from
itself, a shifted one is, and with one seed the numbers are sacreBLEU's own."""

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
    own_sentence_noise,
    paired_bootstrap,
    paired_randomization,
    resampled_scores,
    resampled_seed_scores,
    sacrebleu_interval,
    SeededSystem,
    seeded_system,
    sentence_statistics,
)
from stages.report.significance import confidence_intervals

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


def test_every_seed_duplicated_on_both_sides_leaves_the_bootstrap_and_randomization_as_they_were(references):
    # Built as arrays, so the duplicates are not collapsed: the procedures themselves must
    # give a copy of a seed no weight of its own.
    counts = bootstrap_counts(len(references), 1000, seed=7)
    outputs = {"a": [degraded(references, 0.2, 1), degraded(references, 0.25, 3)],
               "b": [degraded(references, 0.25, 2), degraded(references, 0.3, 4)]}
    once = {name: system(name, references, *seeds) for name, seeds in outputs.items()}
    twice = {name: SeededSystem(name, (1, 2, 3, 4), {metric: np.concatenate([stats, stats])
                                                      for metric, stats in once[name].statistics.items()})
             for name in outputs}
    for name, metric in metrics().items():
        one = paired_bootstrap(once["a"], once["b"], name, metric, counts)
        two = paired_bootstrap(twice["a"], twice["b"], name, metric, counts)
        assert two == pytest.approx(one)
        one = paired_randomization(once["a"], once["b"], name, metric, trials=2000, seed=3)
        two = paired_randomization(twice["a"], twice["b"], name, metric, trials=2000, seed=3)
        assert two == pytest.approx(one)  # one coin per sentence: exactly the same trials


def test_a_seed_given_twice_is_counted_once_and_the_interval_is_unchanged(references):
    a, b = degraded(references, 0.2, 1), degraded(references, 0.3, 2)
    counts = bootstrap_counts(len(references), 1000, seed=7)
    honest = seeded_system("a", [1, 2], [(a, references), (b, references)], metrics())
    padded = seeded_system("a", [1, 2, 3, 4], [(a, references), (b, references), (a, references), (b, references)],
                           metrics())
    assert padded.seeds == (1, 2) and padded.repeated == {3: 1, 4: 2}
    for name, found in confidence_intervals(padded, counts).items():
        expected = confidence_intervals(honest, counts)[name]
        assert found["sacrebleu"] == pytest.approx(expected["sacrebleu"])
        assert {key: found[key] for key in ("score", "low", "high", "df", "seeds")} == pytest.approx(
            {key: expected[key] for key in ("score", "low", "high", "df", "seeds")})


def test_seeds_that_disagree_widen_the_interval(references):
    good, poor = degraded(references, 0.1, 1), degraded(references, 0.5, 2)
    counts = bootstrap_counts(len(references), 500, seed=1)
    alone = confidence_intervals(system("a", references, good), counts)["BLEU"]
    together = confidence_intervals(system("a", references, good, poor), counts)["BLEU"]
    agreeing = confidence_intervals(system("a", references, good, degraded(references, 0.1, 3)), counts)["BLEU"]
    width = {name: found["high"] - found["low"] for name, found in
             (("alone", alone), ("together", together), ("agreeing", agreeing))}
    assert width["together"] > width["alone"] and width["together"] > width["agreeing"]
    assert not alone["seed_variance_measured"] and together["seed_variance_measured"]


def test_own_sentence_noise_is_what_the_seeds_separate_bootstraps_have_beyond_their_means(references):
    # Two seeds with independent errors on every sentence: the mean's bootstrap variance
    # is about half of each seed's, and the noise term is the rest, per seed, over K - 1.
    counts = bootstrap_counts(len(references), 1000, seed=5)
    noisy = system("n", references, degraded(references, 0.3, 1), degraded(references, 0.3, 2))
    per_seed = resampled_seed_scores(noisy, "BLEU", BLEU(), counts)
    each, together = np.var(per_seed, axis=0, ddof=1).mean(), np.var(per_seed.mean(axis=1), ddof=1)
    assert own_sentence_noise(per_seed) == pytest.approx(each - together)
    assert 0.25 * each < own_sentence_noise(per_seed) < 0.75 * each
    assert np.array_equal(per_seed.mean(axis=1), resampled_scores(noisy, "BLEU", BLEU(), counts))
    assert own_sentence_noise(per_seed[:, :1]) == 0.0


def test_a_system_against_a_copy_of_itself_is_not_significant(references):
    a = degraded(references, 0.2, 1)
    first, second = system("a", references, a, degraded(references, 0.2, 5)), \
        system("copy", references, a, degraded(references, 0.2, 5))
    counts = bootstrap_counts(len(references), 500, seed=2)
    for name, metric in metrics().items():
        assert paired_bootstrap(first, second, name, metric, counts)["p"] == 1.0
        assert paired_randomization(first, second, name, metric, trials=500, seed=2)["p"] == 1.0


def test_a_shifted_system_is_significant_and_its_delta_interval_holds_the_delta(references):
    counts = bootstrap_counts(len(references), 1000, seed=4)
    better = system("better", references, degraded(references, 0.1, 1), degraded(references, 0.1, 2))
    worse = system("worse", references, degraded(references, 0.4, 3), degraded(references, 0.4, 4))
    bootstrap = paired_bootstrap(worse, better, "BLEU", BLEU(), counts)
    assert bootstrap["delta"] > 10 and bootstrap["p"] < 0.01
    assert bootstrap["delta_low"] < bootstrap["delta"] < bootstrap["delta_high"]
    assert paired_randomization(worse, better, "chrF", CHRF(), trials=2000, seed=4)["p"] < 0.01


def test_holms_adjustment_matches_a_hand_computed_example():
    # Sorted: 0.01 x 4 = 0.04, 0.02 x 3 = 0.06, 0.03 x 2 = 0.06, 0.04 x 1 -> 0.06 (monotone).
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_systems_whose_seeds_or_test_sets_differ_are_refused_with_the_reason(references):
    a = degraded(references, 0.2, 1)
    with pytest.raises(ValueError, match="seed 2 was scored on other references than seed 1"):
        seeded_system("a", [1, 2], [(a, references), (a[:-1], references[:-1])], metrics())
    one, two = system("one", references, a), system("two", references, a, degraded(references, 0.3, 2))
    # Unequal seeds: the bootstrap compares the seeds' means; randomization has no seed
    # to swap with, and says so by giving none.
    assert paired_bootstrap(one, two, "BLEU", BLEU(), bootstrap_counts(len(references), 10, seed=1))["delta"] < 0
    assert paired_randomization(one, two, "BLEU", BLEU(), trials=10) is None
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
        ours = sacrebleu_interval(resampled_scores(a, name, metric, counts))
        assert a.score(name, metric) == pytest.approx(printed["score"], abs=5e-5)
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
