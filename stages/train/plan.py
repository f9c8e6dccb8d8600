"""A run's planned number of updates, and the shares of it that fractions name.

``train.warmup_fraction``, ``train.checkpoint_fraction`` and a decoder-only model's
``ae_fraction`` are shares of the run's updates, so that each budget of a sweep warms
up, checkpoints and ends its auxiliary loss at the same point of its own run. A budget
of FLOPs or tokens has no number of updates until the batches are known; here it is
planned from one epoch's batches, before training: the budget divided by the mean
FLOPs (or target tokens) of an update, as the loop counts them (every pair's
``training_flops``). The first budget to run out plans the run, as it will stop it.
The run itself still stops on what it counts, so its last update lands within a few
updates of the plan; ``average_fraction`` is taken from the updates actually made.
"""

from __future__ import annotations

import math

import numpy as np

from stages.train.batching import token_batches, worker_batches
from stages.train.config import TrainConfig, TrainStageConfig


def planned_updates(training: TrainConfig, src_lengths: np.ndarray, tgt_lengths: np.ndarray, world: int,
                    pair_flops) -> int | None:
    """The updates the first budget to run out allows, or None when only wall time (or
    early stopping) can end the run. ``pair_flops(src_len, tgt_len)``: one pair's
    counted training FLOPs."""
    batches = token_batches(src_lengths, tgt_lengths, training.max_tokens, training.seed, 0)
    per_epoch = max(1, len(worker_batches(batches, 0, world)) // training.gradient_accumulation)
    plans = []
    if training.max_steps is not None:
        plans.append(training.max_steps)
    if training.max_epochs is not None:
        plans.append(training.max_epochs * per_epoch)
    if training.max_train_tokens is not None:
        plans.append(training.max_train_tokens / (float(tgt_lengths.sum()) / per_epoch))
    if training.max_train_flops is not None:
        epoch_flops = sum(pair_flops(int(s), int(t)) for s, t in zip(src_lengths, tgt_lengths))
        plans.append(training.max_train_flops / (epoch_flops / per_epoch))
    return max(1, math.ceil(min(plans))) if plans else None


def resolve(config: TrainStageConfig, updates: int | None) -> TrainStageConfig:
    """The stage config with each fraction turned into updates of this run (warmup at
    least 1, checkpoint interval at least 1, ``ae_steps``), and the fractions cleared."""
    training, settings = config.train, dict(config.model.settings)
    changes = {}
    if training.warmup_fraction is not None:
        changes.update(warmup_steps=max(1, round(training.warmup_fraction * updates)), warmup_fraction=None)
    if training.checkpoint_fraction is not None:
        changes.update(checkpoint_every=max(1, round(training.checkpoint_fraction * updates)), checkpoint_fraction=None)
    if settings.get("ae_fraction") is not None:
        settings["ae_steps"] = max(1, round(settings.pop("ae_fraction") * updates))
    if not changes and settings == config.model.settings:
        return config
    return config.model_copy(update={"train": training.model_copy(update=changes),
                                     "model": config.model.model_copy(update={"settings": settings})})


def averaged(checkpoint_steps: list[int], training: TrainConfig) -> list[int]:
    """The steps of the checkpoints the final model averages: the last ``average_last``,
    or those of the run's last ``average_fraction`` of updates (at least the final one)."""
    if training.average_fraction is None:
        return checkpoint_steps[-training.average_last:]
    start = checkpoint_steps[-1] * (1 - training.average_fraction)
    return [step for step in checkpoint_steps if step >= start - 1e-9] or checkpoint_steps[-1:]


def needs_planning(config: TrainStageConfig) -> bool:
    return (config.train.warmup_fraction is not None or config.train.checkpoint_fraction is not None
            or config.model.settings.get("ae_fraction") is not None)

