"""Learning-rate schedules: the paper's noam and linear-warmup cosine, over updates or a
budget of FLOPs or tokens."""

from __future__ import annotations

import pytest

from stages.train.config import TrainConfig
from stages.train.plan import RunPlan, as_configured
from stages.train.schedule import NOTHING_SPENT, Spent, decay_progress, learning_rate


def rate(step: int, config: TrainConfig, d_model: int, spent: Spent = NOTHING_SPENT) -> float:
    """The rate of a run that sets its rate and warmup as counts (no tuned rate, no fractions)."""
    return learning_rate(step, config, as_configured(config), d_model, spent)


def test_noam_schedule_peaks_at_warmup_with_the_papers_value():
    config = TrainConfig(max_steps=10, warmup_steps=4000)
    peak = 512 ** -0.5 * 4000 ** -0.5
    assert rate(4000, config, 512) == pytest.approx(peak)
    assert rate(2000, config, 512) == pytest.approx(peak / 2)  # linear warmup
    assert rate(16000, config, 512) == pytest.approx(peak / 2)  # inverse square root decay
    assert rate(0, config, 512) > 0  # the first update is step 1, never lr 0


def test_cosine_schedule_warms_up_then_decays_to_min_lr():
    config = TrainConfig(schedule="cosine", lr=1e-3, min_lr=1e-5, warmup_steps=10, max_steps=110)
    assert rate(5, config, 512) == pytest.approx(5e-4)
    assert rate(10, config, 512) == pytest.approx(1e-3)
    assert rate(60, config, 512) == pytest.approx((1e-3 + 1e-5) / 2)
    assert rate(110, config, 512) == pytest.approx(1e-5)


def test_the_peak_and_warmup_are_the_run_s_own_not_the_config_s():
    """A tuned rate (lr_from) and a warmup_fraction settle the run's peak and warmup
    (plan.RunPlan); the config keeps what the file said."""
    config = TrainConfig(schedule="cosine", lr=1e-3, min_lr=0.0, warmup_steps=10, max_steps=110)
    run = RunPlan(lr=3e-3, warmup_steps=20, checkpoint_every=10, ae_steps=None, updates=110)
    assert learning_rate(10, config, run, 512) == pytest.approx(1.5e-3)  # halfway up its own warmup
    assert learning_rate(20, config, run, 512) == pytest.approx(3e-3)  # its own peak
    assert learning_rate(65, config, run, 512) == pytest.approx(1.5e-3)  # halfway down from there


def test_constant_schedule_warms_up_then_holds_lr():
    config = TrainConfig(schedule="constant", lr=4e-4, warmup_steps=100, max_epochs=1)
    assert rate(50, config, 256) == pytest.approx(2e-4)
    assert rate(100, config, 256) == pytest.approx(4e-4)
    assert rate(100_000, config, 256) == pytest.approx(4e-4)


def _cosine(**budget) -> TrainConfig:
    return TrainConfig(schedule="cosine", lr=1e-3, min_lr=1e-5, warmup_steps=10, **budget)


@pytest.mark.parametrize("budget_key, spent_of", [
    ("max_train_flops", lambda updates, cost: Spent(updates, cost * updates, 0.0)),
    ("max_train_tokens", lambda updates, cost: Spent(updates, 0.0, cost * updates)),
])
def test_cosine_over_a_flops_or_tokens_budget_is_the_step_cosine_at_a_steady_cost(budget_key, spent_of):
    cost = 3.7e9  # per update
    by_steps, by_budget = _cosine(max_steps=110), _cosine(**{budget_key: 110 * cost})
    for step in range(11, 111):
        spent = spent_of(step - 1, cost)  # what the updates before ``step`` used
        assert rate(step, by_budget, 512, spent) == pytest.approx(rate(step, by_steps, 512))
    assert rate(110, by_budget, 512, spent_of(109, cost)) == pytest.approx(1e-5)
    assert rate(500, by_budget, 512, spent_of(499, cost)) == pytest.approx(1e-5)  # past it: min_lr


def test_cosine_follows_the_budget_spent_not_the_update_count():
    config = _cosine(max_train_flops=1e12)
    # The same update number, twice the cost per update: twice as far down the cosine.
    cheap = decay_progress(40, 10, config, Spent(39, 39 * 5e9, 0.0))
    dear = decay_progress(40, 10, config, Spent(39, 39 * 10e9, 0.0))
    assert cheap == pytest.approx((40 - 10) * 5e9 / (1e12 - 10 * 5e9))
    assert dear == pytest.approx((40 - 10) * 10e9 / (1e12 - 10 * 10e9))


def test_cosine_decays_by_whichever_budget_ends_first():
    config = _cosine(max_steps=1000, max_train_flops=1e12)
    spent = Spent(99, 99 * 1e10, 0.0)  # the FLOPs budget ends at update 100
    assert decay_progress(100, 10, config, spent) == pytest.approx(1.0)
    assert rate(100, config, 512, spent) == pytest.approx(1e-5)


def test_cosine_needs_a_budget_it_can_see_the_end_of():
    _cosine(max_train_flops=1e12)
    _cosine(max_train_tokens=10**6)
    with pytest.raises(ValueError, match="set max_steps, max_train_flops or max_train_tokens"):
        _cosine(max_wall_time=600)


def wsd(**settings) -> TrainConfig:
    return TrainConfig(**{"schedule": "wsd", "lr": 1e-3, "min_lr": 1e-5, "warmup_steps": 10, "max_steps": 100,
                          "decay_fraction": 0.2, **settings})


def test_wsd_warms_up_holds_the_exact_peak_then_decays_by_one_minus_sqrt_to_min_lr():
    config = wsd()
    assert rate(5, config, 512) == pytest.approx(5e-4)
    assert all(rate(step, config, 512) == 1e-3 for step in range(10, 81))  # exactly the peak
    assert rate(81, config, 512) < 1e-3
    progress = (90 / 100 - 0.8) / 0.2  # halfway through the decay
    assert rate(90, config, 512) == pytest.approx(1e-5 + (1e-3 - 1e-5) * (1 - progress ** 0.5))
    assert rate(100, config, 512) == pytest.approx(1e-5)


def test_wsd_linear_decay_and_a_flops_budget_decay_by_the_share_spent():
    linear = wsd(decay_shape="linear")
    assert rate(90, linear, 512) == pytest.approx(1e-5 + (1e-3 - 1e-5) * 0.5)
    # FLOPs: 85 updates of 1e9 each spent, the next at that mean cost: 86% of 1e11.
    flops = wsd(max_steps=None, max_train_flops=1e11)
    spent = Spent(85, 85e9, 0.0)
    assert rate(86, flops, 512, spent) == pytest.approx(1e-5 + (1e-3 - 1e-5) * (1 - 0.3 ** 0.5))
    # The stable phase does not depend on the budget: a larger budget holds the peak there.
    assert rate(86, wsd(max_steps=None, max_train_flops=2e11), 512, spent) == 1e-3


@pytest.mark.parametrize("settings, key", [({"decay_fraction": 0.0}, "decay_fraction"),
                                           ({"decay_fraction": 1.0}, "decay_fraction"),
                                           ({"max_steps": None, "max_wall_time": 60.0}, "wsd")])
def test_wsd_refuses_a_decay_fraction_outside_zero_one_and_a_budget_without_an_end(settings, key):
    with pytest.raises(ValueError, match=key):
        wsd(**settings)


def test_wsd_averages_only_checkpoints_of_its_decay():
    for window in (0.3, 0.2):  # at the decay's start the weights are the peak rate's
        with pytest.raises(ValueError, match=r"average_fraction \(.*\) must be below decay_fraction"):
            wsd(checkpoint_fraction=0.1, average_fraction=window, keep_checkpoints=5)
    wsd(checkpoint_fraction=0.1, average_fraction=0.15, keep_checkpoints=5)
