"""Laws of quality against compute (stages/report/scaling_laws.py): the saturating fit
recovers what generated its points, leave-one-out is what its docstring says, and
nothing is stated outside the FLOPs measured."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stages.report import scaling_laws

BUDGETS = np.geomspace(1e12, 5e13, 7)  # 1.7 decades


def test_the_saturating_fit_recovers_the_parameters_of_its_points():
    loss = 1.8 + 4.0e6 * BUDGETS ** -0.5
    law = scaling_laws.fit(BUDGETS, loss)
    assert (law.E, law.A, law.alpha) == pytest.approx((1.8, 4.0e6, 0.5), rel=1e-4)
    bleu = 38.0 - 3.0e5 * BUDGETS ** -0.4
    ceiling = scaling_laws.fit(BUDGETS, bleu, rising=True, bound=100)
    assert (ceiling.E, ceiling.A, ceiling.alpha, ceiling.sign) == pytest.approx((38.0, 3.0e5, 0.4, -1), rel=1e-4)
    assert ceiling(1e13) == pytest.approx(38.0 - 3.0e5 * 1e13 ** -0.4)


def test_the_bootstrap_resamples_seeds_within_budgets_and_without_seeds_gives_no_interval():
    rng = np.random.default_rng(7)
    flops = np.repeat(BUDGETS, 3)
    loss = (1.8 + 4.0e6 * flops ** -0.5) * (1 + 0.01 * rng.standard_normal(len(flops)))
    law = scaling_laws.fit(flops, loss)
    assert law.budgets == 7 and law.alpha == pytest.approx(0.5, abs=0.1) and not law.at_bound
    laws = scaling_laws.bootstrap(flops, loss, draws=200)
    # Every draw keeps every budget (they are not independent cases to draw).
    assert len(laws) == 200 and all(draw.budgets == 7 for draw in laws)
    low, high = scaling_laws.interval([draw.alpha for draw in laws])
    assert low < law.alpha < high and high - low < 0.5
    # One seed at every budget: the seeds' variation is unknown, so there is no interval.
    assert scaling_laws.bootstrap(BUDGETS, 1.8 + 4.0e6 * BUDGETS ** -0.5, draws=50) == []
    # One budget with three seeds lends its spread to the budgets with one.
    mixed_flops = np.concatenate([BUDGETS, BUDGETS[:1], BUDGETS[:1]])
    mixed = np.concatenate([loss[::3], loss[1:2], loss[2:3]])
    assert len(scaling_laws.bootstrap(mixed_flops, mixed, draws=50)) == 50
    assert scaling_laws.pooled_seed_deviation([np.array([1.0, 3.0]), np.array([5.0])]) == pytest.approx(math.sqrt(2))


def test_a_floor_the_data_do_not_determine_is_said_to_be_at_its_bound():
    # A pure power law: the best floor is 0, the bound, and says nothing about a floor.
    law = scaling_laws.fit(BUDGETS, 4.0e6 * BUDGETS ** -0.3, bound=0.0)
    assert law.at_bound and law.E == pytest.approx(0.0, abs=1e-3)
    assert not scaling_laws.fit(BUDGETS, 1.8 + 4.0e6 * BUDGETS ** -0.5).at_bound
    # BLEU rising as a power, no ceiling in sight: the ceiling sits at 100.
    ceiling = scaling_laws.fit(BUDGETS, 2e-5 * BUDGETS ** 0.45, rising=True, bound=100.0)
    assert ceiling.at_bound and ceiling.E == pytest.approx(100.0, abs=0.1)


def test_leave_one_out_refits_without_each_budget_beside_a_line_and_the_next_budget():
    rng = np.random.default_rng(3)
    loss = (2.0 + 1.0e5 * BUDGETS ** -0.35) * (1 + 0.002 * rng.standard_normal(len(BUDGETS)))
    result = scaling_laws.leave_one_budget_out(BUDGETS, loss)
    assert result.budgets == pytest.approx(list(BUDGETS)) and result.measured == pytest.approx(list(loss))
    third = np.arange(len(BUDGETS)) != 2
    assert result.predicted[2] == pytest.approx(float(scaling_laws.fit(BUDGETS[third], loss[third])(BUDGETS[2])))
    slope, intercept = np.polyfit(np.log(BUDGETS[third]), loss[third], 1)
    assert result.line[2] == pytest.approx(intercept + slope * np.log(BUDGETS[2]))
    assert result.naive == pytest.approx([*loss[1:], loss[-2]])
    assert result.mean_absolute_error == pytest.approx(np.mean(np.abs(np.subtract(result.predicted, loss))))
    assert result.predicts


def test_a_law_no_better_than_a_line_in_log_compute_does_not_predict():
    # Straight in log compute: the line predicts every left-out budget exactly, and the
    # saturating law cannot beat it.
    straight = 5.0 - 0.2 * np.log(BUDGETS / BUDGETS[0])
    result = scaling_laws.leave_one_budget_out(BUDGETS, straight)
    assert result.line_mean_absolute_error == pytest.approx(0.0, abs=1e-9) and not result.predicts
    # Falling, then rising again (a model that overfits at its largest budgets): no
    # monotone law predicts the ends, and each neighbour is closer than the law.
    overfitting = np.array([3.0, 2.5, 2.2, 2.1, 2.2, 2.5, 3.0])
    result = scaling_laws.leave_one_budget_out(BUDGETS, overfitting)
    assert not result.predicts and result.mean_absolute_error > 0.4 > 0.33 > result.naive_mean_absolute_error


def test_the_power_law_is_the_line_on_log_log_axes():
    bleu = 2e-5 * BUDGETS ** 0.45
    law = scaling_laws.fit(BUDGETS, bleu, rising=True, saturating=False)
    assert (law.E, law.A, law.alpha) == pytest.approx((0.0, 2e-5, -0.45), rel=1e-6)


def test_flops_for_a_value_and_crossovers_are_withheld_outside_the_measured_range():
    law = scaling_laws.fit(BUDGETS, 1.8 + 4.0e6 * BUDGETS ** -0.5)
    assert law.flops_for(3.0) == pytest.approx((4.0e6 / 1.2) ** 2, rel=1e-4)
    assert law.flops_for(2.0) is None and law.flops_for(1.0) is None  # beyond 5e13; below the floor
    # Equal at C where 1.8 + 4e6 C^-0.5 = 2.0 + 1e6 C^-0.5, i.e. C = (3e6 / 0.2)^2 = 2.25e14: not measured.
    other = scaling_laws.fit(BUDGETS, 2.0 + 1.0e6 * BUDGETS ** -0.5)
    assert scaling_laws.crossover(law, other) is None
    # Shifted to cross at C = (3e6 / 1.0)^2 = 9e12, inside 1e12 to 5e13.
    inside = scaling_laws.fit(BUDGETS, 2.8 + 1.0e6 * BUDGETS ** -0.5)
    assert scaling_laws.crossover(law, inside) == pytest.approx(9e12, rel=1e-3)


def test_too_few_budgets_are_refused():
    with pytest.raises(ValueError, match="a saturating law needs at least 3 budgets, got 2"):
        scaling_laws.fit([1e12, 1e12, 2e12], [3.0, 3.1, 2.5])
