"""benchmarks/statistics/verdict_calibration.py: its simulated studies are what the report reads,
and each case's seeds behave as the case says."""

from __future__ import annotations

from statistics import fmean

import numpy as np
import pytest

from benchmarks.statistics import verdict_calibration as calibration
from benchmarks.statistics.verdict_calibration import CASES, Case, Family, World, primary_row, study
from stages.shared import gate
from stages.report.comparison import compare_systems
from stages.report.records import RunRecord
from stages.report.resampling import corpus_scores


@pytest.fixture(scope="module")
def world() -> World:
    return World(seed=3)


def qualities(world: World, case: Case, delta: float = 0.0) -> dict[str, float]:
    return {"a": world.quality_for(world.baseline_bleu, case.a),
            "b": world.quality_for(world.baseline_bleu + delta, case.b)}


def test_a_recipe_s_quality_gives_the_expected_bleu_asked_for_collapses_included(world):
    steady, collapsing = Family(), Family(collapse=1 / 3)
    for family in (steady, collapsing):
        quality = world.quality_for(world.baseline_bleu + 2.0, family)
        assert world.expected_bleu(quality, family) == pytest.approx(world.baseline_bleu + 2.0, abs=1e-3)
    # Equal expectations: the collapsing recipe's steady seeds must sit higher.
    assert world.quality_for(world.baseline_bleu, collapsing) > world.quality_for(world.baseline_bleu, steady)


def test_the_simulated_scores_average_to_the_expected_bleu(world):
    """The expectation the null and the coverage are measured against is what the
    simulated seeds score on average, within a few tenths of a BLEU point."""
    case = Case("collapsing", Family(), Family(collapse=1 / 3))
    chosen = qualities(world, case)
    rng = np.random.default_rng(5)
    scores = {"a": [], "b": []}
    for _ in range(60):
        sentences = world.simulator.test_set()
        for name, family in (("a", case.a), ("b", case.b)):
            statistics, _, _ = calibration.seed_statistics(world, chosen[name], family, sentences, rng)
            scores[name] += list(corpus_scores(calibration.METRIC, statistics.sum(axis=1)))
    assert fmean(scores["a"]) == pytest.approx(world.baseline_bleu, abs=0.4)
    assert fmean(scores["b"]) == pytest.approx(world.baseline_bleu, abs=0.6)
    assert np.std(scores["b"]) > 2 * np.std(scores["a"])  # the collapses are in the seeds


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_case_s_studies_are_records_the_report_compares(world, case):
    records, systems = study(world, case, qualities(world, case), np.random.default_rng(1))
    assert all(isinstance(record, RunRecord) for record in records)
    comparison = compare_systems(records, systems, randomization_trials=0)
    labels = {group["label"] for group in comparison.groups}
    assert labels == set(systems)
    row = primary_row(comparison)
    withheld = {entry["label"] for entry in comparison.withheld}
    if withheld:  # only the gate withholds
        assert row is None and all(label.startswith("b_") for label in withheld)
    else:
        # One primary comparison: each family's best size, a against b.
        assert row is not None and {row["a"][0], row["b"][0]} == {"a", "b"}
        assert row["family_size"] == 1 and row["significant"] in (True, False)


def test_the_best_size_is_the_one_whose_seeds_had_the_lower_validation_loss(world):
    case = next(case for case in CASES if case.a.sizes == 2)
    records, systems = study(world, case, qualities(world, case), np.random.default_rng(2))
    comparison = compare_systems(records, systems, randomization_trials=0)
    row = primary_row(comparison)
    losses = {group["label"]: group["valid_loss"]["mean"] for group in comparison.groups}
    for chosen in (row["a"], row["b"]):
        family = chosen[0]
        assert losses[chosen] == min(loss for label, loss in losses.items() if label.startswith(family))


def test_a_gate_failing_collapse_withholds_its_family_and_a_soft_one_does_not(world):
    rng = np.random.default_rng(0)
    failing = Case("fails", Family(), Family(collapse=1.0, collapse_fails_gate=True))
    records, systems = study(world, failing, qualities(world, failing), rng)
    assert {record["translates"] for record in records if record["family"] == "b"} == {gate.DOES_NOT}
    assert primary_row(compare_systems(records, systems, randomization_trials=0)) is None
    soft = Case("soft", Family(), Family(collapse=1.0))
    records, systems = study(world, soft, qualities(world, soft), rng)
    assert primary_row(compare_systems(records, systems, randomization_trials=0)) is not None


def test_seed_lengths_vary_only_where_the_case_says(world):
    rng = np.random.default_rng(4)
    sentences = world.simulator.test_set()
    fixed, _, _ = calibration.seed_statistics(world, -0.3, Family(), sentences, rng)
    varied, _, _ = calibration.seed_statistics(world, -0.3, Family(length_sd=0.1), sentences, rng)
    ratio = lambda statistics: statistics[..., 0].sum(axis=1) / statistics[..., 1].sum(axis=1)  # noqa: E731
    assert np.ptp(ratio(fixed)) < 0.02 and np.ptp(ratio(varied)) > 0.05
