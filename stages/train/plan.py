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
from dataclasses import dataclass

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


@dataclass(frozen=True)
class RunPlan:
    """What a run settles before its first update that its config leaves open: the peak
    learning rate (``train.lr``, or the rate its tune stage chose), and in updates of
    this run what the config may give as fractions of it. The config itself is passed
    on as it was validated; the schedule, the checkpoints and the loop read these."""

    lr: float
    warmup_steps: int
    checkpoint_every: int
    ae_steps: int | None  # a decoder-only model's, where it sets ae_fraction
    updates: int | None  # planned from the budget; None: only wall time (or early stopping) ends it


def plan_run(config: TrainStageConfig, lr: float, updates: int | None) -> RunPlan:
    """Each fraction of the run in updates (warmup at least 1, checkpoint interval at
    least 1, ``ae_steps``), else the config's own counts."""
    training, settings = config.train, config.model.settings

    def share(fraction: float | None, count: int | None) -> int | None:
        return count if fraction is None else max(1, round(fraction * updates))

    return RunPlan(lr=lr, warmup_steps=share(training.warmup_fraction, training.warmup_steps),
                   checkpoint_every=share(training.checkpoint_fraction, training.checkpoint_every),
                   ae_steps=share(settings.get("ae_fraction"), settings.get("ae_steps")), updates=updates)


def as_configured(training: TrainConfig) -> RunPlan:
    """The plan of a run whose config gives counts, not fractions: its own rate, warmup
    and checkpoint interval (benchmarks and tests that build an engine themselves)."""
    if training.warmup_fraction is not None or training.checkpoint_fraction is not None:
        raise ValueError("a run with train.warmup_fraction or train.checkpoint_fraction is planned from its data "
                         "(plan_run)")
    return RunPlan(lr=training.lr, warmup_steps=training.warmup_steps, checkpoint_every=training.checkpoint_every,
                   ae_steps=None, updates=None)


def apply_settings(model, run: RunPlan) -> None:
    """Give a model whose loss ends after ``ae_fraction`` of the run the ``ae_steps`` it
    comes to (its loss reads ``model.config``): one model is built, not one to plan with
    and one to train."""
    config = getattr(model, "config", None)
    if getattr(config, "ae_fraction", None) is not None:
        model.config = dataclasses.replace(config, ae_steps=run.ae_steps, ae_fraction=None)


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

