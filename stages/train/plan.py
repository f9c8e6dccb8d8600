"""A run's planned number of updates, and the shares of it that fractions name.

``train.warmup_fraction``, ``train.checkpoint_fraction`` and a decoder-only model's
``ae_fraction`` are shares of the run's updates, so that each budget of a sweep warms
up, checkpoints and ends its auxiliary loss at the same point of its own run. A budget
of FLOPs or tokens has no number of updates until the batches are known; here it is
planned from one epoch's batches, before training: the budget divided by the mean
FLOPs (or target tokens) of an update, as the loop counts them (every pair's
``training_flops``; a decoder-only model's updates cost less once its reconstruction
loss has ended and its source logits are no longer computed). The first budget to run
out plans the run, as it will stop it.
The run itself still stops on what it counts, so its last update lands within a few
updates of the plan; ``average_fraction`` is taken from the updates actually made.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from stages.shared.models.families import family_of
from stages.train.batching import token_batches, worker_batches
from stages.train.config import TrainConfig, TrainStageConfig


def planned_updates(training: TrainConfig, src_lengths: np.ndarray, tgt_lengths: np.ndarray, world: int,
                    pair_flops, source_logits: tuple[str, float] | None = None) -> int | None:
    """The updates the first budget to run out allows, or None when only wall time (or
    early stopping) can end the run. ``pair_flops(src_len, tgt_len, source_logits)``:
    one pair's counted training FLOPs. ``source_logits``: for a decoder-only model whose
    reconstruction loss ends, which updates project the source (and cost more):
    ``("steps", ae_steps)`` or ``("fraction", ae_fraction)``; None: every update costs
    the same."""
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
        pairs = list(zip(src_lengths.tolist(), tgt_lengths.tolist()))
        early = sum(pair_flops(s, t, True) for s, t in pairs) / per_epoch  # FLOPs of an update
        late = sum(pair_flops(s, t, False) for s, t in pairs) / per_epoch if source_logits else early
        plans.append(_updates_for_flops(training.max_train_flops, early, late, source_logits))
    return max(1, math.ceil(min(plans))) if plans else None


def _updates_for_flops(budget: float, early: float, late: float, source_logits: tuple[str, float] | None) -> float:
    """Updates until ``budget`` is spent when the first updates cost ``early`` each and
    the rest ``late``: all early; the first ``ae_steps``; or a share of the run."""
    if source_logits is None:
        return budget / early
    kind, value = source_logits
    if kind == "fraction":
        return budget / (value * early + (1 - value) * late)
    if value * early >= budget:  # the budget ends before the reconstruction loss does
        return budget / early
    return value + (budget - value * early) / late


def source_logit_schedule(model, settings: dict) -> tuple[str, float] | None:
    """Which updates of ``model`` project the source (its family's loss): None for a
    model that always or never does, else ``("fraction", share)`` (from the unresolved
    ``settings``) or ``("steps", updates)``, as its family record says."""
    schedule = family_of(model).source_loss_schedule
    return None if schedule is None else schedule(model, settings)


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


def apply_settings(model, spec) -> None:
    """Give a model built before ``resolve`` the ``ae_steps`` it resolved from its
    ``ae_fraction`` (its loss reads ``model.config``): one model is built, not one to
    plan with and one to train."""
    config = getattr(model, "config", None)
    if getattr(config, "ae_fraction", None) is not None and "ae_steps" in spec.settings:
        model.config = dataclasses.replace(config, ae_steps=spec.settings["ae_steps"], ae_fraction=None)


def averaged(checkpoint_steps: list[int], training: TrainConfig) -> list[int]:
    """The steps of the checkpoints the final model averages: the last ``average_last``,
    or those of the run's last ``average_fraction`` of updates (at least the final one)."""
    if training.average_fraction is None:
        return checkpoint_steps[-training.average_last:]
    start = checkpoint_steps[-1] * (1 - training.average_fraction)
    return [step for step in checkpoint_steps if step >= start - 1e-9] or checkpoint_steps[-1:]


def needs_planning(config: TrainStageConfig) -> bool:
    return (config.train.warmup_fraction is not None or config.train.checkpoint_fraction is not None
            or config.model.settings.get("ae_fraction") is not None or config.train.schedule == "wsd")


def check_warmup_before_decay(training: TrainConfig, updates: int | None) -> None:
    """A wsd run must reach its peak before its decay starts: refuse a budget too small
    for the warmup (with branched budgets, the smallest one), naming the keys."""
    if training.schedule != "wsd" or updates is None:
        return
    warmup = training.warmup_steps if training.warmup_fraction is None else training.warmup_fraction * updates
    decay_starts = (1 - training.decay_fraction) * updates
    if warmup >= decay_starts:
        budget = ", ".join(f"{name} {getattr(training, name):g}" for name in ("max_steps", "max_train_flops",
                                                                              "max_train_tokens")
                           if getattr(training, name) is not None)
        raise ValueError(f"the budget ({budget}) plans {updates} updates and its decay (train.decay_fraction "
                         f"{training.decay_fraction}) starts after update {decay_starts:.0f}, before the warmup "
                         f"ends (train.warmup_steps {warmup:.0f}): raise the budget or lower train.warmup_steps")

