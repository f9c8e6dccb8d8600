"""Learning-rate schedules, as functions of the optimizer step (1 for the first update).

``noam``: Vaswani et al. (2017), section 5.3,
lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times ``lr_scale``: a linear
warmup, then decay with the inverse square root of the step. For the RNN, d_model is
its hidden size. ``cosine``: linear warmup to ``lr``, then a half cosine down to
``min_lr`` at the end of the budget (the usual AdamW recipe). ``constant``: linear
warmup to ``lr``, then ``lr`` (plain Adam, as the attention-RNN recipes train, e.g.
nmtpytorch's).

The cosine ends where the run does: at ``max_steps``, or, for a budget of counted
FLOPs or target tokens, when that budget is spent. A sweep over FLOPs budgets thus
decays every run fully within its own budget, without anyone working out its number of
updates beforehand (which depends on the batches' lengths).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from stages.train.config import TrainConfig


class Spent(NamedTuple):
    """What the updates counted so far used, summed over the workers."""

    updates: int
    flops: float
    tokens: float


NOTHING_SPENT = Spent(0, 0.0, 0.0)


def learning_rate(step: int, config: TrainConfig, d_model: int, spent: Spent = NOTHING_SPENT) -> float:
    """The rate of update ``step``; ``spent``: what the updates before it have used."""
    step = max(step, 1)
    if config.schedule == "noam":
        warmup = max(config.warmup_steps, 1)
        return config.lr_scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    if step <= config.warmup_steps:
        return config.lr * step / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    progress = decay_progress(step, config, spent)
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1.0 + math.cos(math.pi * progress))


def decay_progress(step: int, config: TrainConfig, spent: Spent) -> float:
    """How far the cosine has come, from 0 at the end of warmup to 1 at the end of the
    budget: the furthest over the budgets that are set.

    For FLOPs and tokens, the warmup and update ``step`` itself are taken at the mean
    cost of the updates counted so far, so that at a steady cost per update this is the
    fraction that counting updates against the budget's equivalent ``max_steps`` gives.
    """
    warmup = config.warmup_steps
    fractions = [0.0]
    if config.max_steps is not None:
        fractions.append((step - warmup) / max(1, config.max_steps - warmup))
    for used, budget in ((spent.flops, config.max_train_flops), (spent.tokens, config.max_train_tokens)):
        if budget is not None and spent.updates > 0:
            per_update = used / spent.updates
            through_step = used + per_update * (step - spent.updates)  # this update at the mean cost
            fractions.append((through_step - per_update * warmup) / max(budget - per_update * warmup, 1e-30))
    return min(1.0, max(fractions))
