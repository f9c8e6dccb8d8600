"""Learning-rate schedules: the paper's noam and linear-warmup cosine."""

from __future__ import annotations

import pytest

from stages.train.config import TrainConfig
from stages.train.schedule import learning_rate


def test_noam_schedule_peaks_at_warmup_with_the_papers_value():
    config = TrainConfig(max_steps=10, warmup_steps=4000)
    peak = 512 ** -0.5 * 4000 ** -0.5
    assert learning_rate(4000, config, 512) == pytest.approx(peak)
    assert learning_rate(2000, config, 512) == pytest.approx(peak / 2)  # linear warmup
    assert learning_rate(16000, config, 512) == pytest.approx(peak / 2)  # inverse square root decay
    assert learning_rate(0, config, 512) > 0  # the first update is step 1, never lr 0


def test_cosine_schedule_warms_up_then_decays_to_min_lr():
    config = TrainConfig(schedule="cosine", lr=1e-3, min_lr=1e-5, warmup_steps=10, max_steps=110)
    assert learning_rate(5, config, 512) == pytest.approx(5e-4)
    assert learning_rate(10, config, 512) == pytest.approx(1e-3)
    assert learning_rate(60, config, 512) == pytest.approx((1e-3 + 1e-5) / 2)
    assert learning_rate(110, config, 512) == pytest.approx(1e-5)


def test_constant_schedule_warms_up_then_holds_lr():
    config = TrainConfig(schedule="constant", lr=4e-4, warmup_steps=100, max_epochs=1)
    assert learning_rate(50, config, 256) == pytest.approx(2e-4)
    assert learning_rate(100, config, 256) == pytest.approx(4e-4)
    assert learning_rate(100_000, config, 256) == pytest.approx(4e-4)
