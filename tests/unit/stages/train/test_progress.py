"""Training budgets, the progress bar that follows them, and progress's JSON round trip."""

from __future__ import annotations

import math

from stages.train.config import TrainConfig
from stages.train.progress import TrainingProgress, budget_fraction, budget_reached


def test_the_first_budget_reached_stops_training():
    config = TrainConfig(max_steps=100, max_train_tokens=5000, max_wall_time=60.0)
    assert budget_reached(config, TrainingProgress(step=99, train_tokens=4999, seconds=59.0)) == ""
    assert budget_reached(config, TrainingProgress(step=10, train_tokens=5000)) == "max_train_tokens"
    assert budget_reached(config, TrainingProgress(step=10, seconds=61.0)) == "max_wall_time"
    assert budget_reached(config, TrainingProgress(step=100)) == "max_steps"
    flops = TrainConfig(max_train_flops=1e12, early_stopping_patience=2)
    assert budget_reached(flops, TrainingProgress(train_flops=1e12)) == "max_train_flops"
    assert budget_reached(flops, TrainingProgress(validations_without_improvement=2)) == "early_stopping"


def test_the_progress_bar_follows_the_budget_closest_to_its_end():
    config = TrainConfig(max_train_flops=1e12, max_wall_time=100.0, max_epochs=4)
    assert budget_fraction(config, TrainingProgress(train_flops=2.5e11, seconds=10.0), 50) == 0.25
    assert budget_fraction(config, TrainingProgress(train_flops=1e11, seconds=60.0), 50) == 0.6
    assert budget_fraction(config, TrainingProgress(epoch=3, step_in_epoch=25), 50) == 0.875
    assert budget_fraction(config, TrainingProgress(seconds=500.0), 50) == 1.0


def test_progress_round_trips_through_json_with_no_validation_yet():
    progress = TrainingProgress(step=7, epoch=1, step_in_epoch=3, train_flops=1.5e9)
    restored = TrainingProgress.from_json(progress.to_json())
    assert restored == progress and math.isinf(restored.best_valid_loss)
