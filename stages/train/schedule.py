"""Learning-rate schedules, as functions of the optimizer step (1 for the first update).

``noam``: Vaswani et al. (2017), section 5.3,
lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times ``lr_scale``: a linear
warmup, then decay with the inverse square root of the step. For the RNN, d_model is
its hidden size. ``cosine``: linear warmup to ``lr``, then a half cosine down to
``min_lr`` at the end of the budget (the usual AdamW recipe). ``constant``: linear
warmup to ``lr``, then ``lr`` (plain Adam, as the attention-RNN recipes train, e.g.
nmtpytorch's). ``wsd``: warmup-stable-decay (Hagele et al. 2024, "Scaling Laws and
Compute-Optimal Training Beyond Fixed Training Durations"): linear warmup to ``lr``,
``lr`` until the last ``decay_fraction`` of the budget, then down to ``min_lr`` at its
end, by ``1 - sqrt`` of the decay's progress (their best cooldown) or linearly. Until
its decay starts a wsd run does not depend on its budget, so a sweep of budgets can
share one stable phase and branch each budget's decay from it.

The cosine and wsd's decay end where the run does: at ``max_steps``, or, for a budget of counted
FLOPs or target tokens, when that budget is spent. A sweep over FLOPs budgets thus
decays every run fully within its own budget, without anyone working out its number of
updates beforehand (which depends on the batches' lengths).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from stages.train.config import TrainConfig
from stages.train.plan import RunPlan


class Spent(NamedTuple):
    """What the updates counted so far used, summed over the workers."""

    updates: int
    flops: float
    tokens: float


NOTHING_SPENT = Spent(0, 0.0, 0.0)


def learning_rate(step: int, config: TrainConfig, run: RunPlan, d_model: int, spent: Spent = NOTHING_SPENT) -> float:
    """The rate of update ``step``, up to the peak ``run.lr`` over ``run.warmup_steps``
    (what the run settled: plan.py); ``spent``: what the updates before it have used."""
    step, peak, warmup = max(step, 1), run.lr, run.warmup_steps
    if config.schedule == "noam":
        return config.lr_scale * d_model ** -0.5 * min(step ** -0.5, step * max(warmup, 1) ** -1.5)
    if step <= warmup:
        return peak * step / warmup
    if config.schedule == "constant":
        return peak
    if config.schedule == "wsd":
        progress = wsd_decay_progress(step, config, spent)
        if progress == 0.0:
            return peak  # exactly: a stable-phase segment stops where the rate first drops
        factor = 1.0 - (math.sqrt(progress) if config.decay_shape == "1-sqrt" else progress)
        return config.min_lr + (peak - config.min_lr) * factor
    progress = decay_progress(step, warmup, config, spent)
    return config.min_lr + 0.5 * (peak - config.min_lr) * (1.0 + math.cos(math.pi * progress))


def wsd_decay_progress(step: int, config: TrainConfig, spent: Spent) -> float:
    """How far wsd's decay has come at update ``step``: 0 until the budget's share
    through that update reaches ``1 - decay_fraction``, 1 at the budget's end."""
    start = 1.0 - config.decay_fraction
    return min(1.0, max(0.0, (budget_share(step, config, spent) - start) / config.decay_fraction))


def budget_share(step: int, config: TrainConfig, spent: Spent) -> float:
    """The share of the budget spent once update ``step`` is done, the furthest over the
    budgets that are set; FLOPs and tokens count update ``step`` (and any before it not
    yet counted in ``spent``) at the mean cost of the updates counted so far."""
    shares = [0.0]
    if config.max_steps is not None:
        shares.append(step / config.max_steps)
    for used, budget in ((spent.flops, config.max_train_flops), (spent.tokens, config.max_train_tokens)):
        if budget is not None and spent.updates > 0:
            shares.append((used + used / spent.updates * (step - spent.updates)) / budget)
    return max(shares)


def decay_progress(step: int, warmup: int, config: TrainConfig, spent: Spent) -> float:
    """How far the cosine has come, from 0 at the end of warmup to 1 at the end of the
    budget: the furthest over the budgets that are set.

    For FLOPs and tokens, the warmup and update ``step`` itself are taken at the mean
    cost of the updates counted so far, so that at a steady cost per update this is the
    fraction that counting updates against the budget's equivalent ``max_steps`` gives.
    """
    fractions = [0.0]
    if config.max_steps is not None:
        fractions.append((step - warmup) / max(1, config.max_steps - warmup))
    for used, budget in ((spent.flops, config.max_train_flops), (spent.tokens, config.max_train_tokens)):
        if budget is not None and spent.updates > 0:
            per_update = used / spent.updates
            through_step = used + per_update * (step - spent.updates)  # this update at the mean cost
            fractions.append((through_step - per_update * warmup) / max(budget - per_update * warmup, 1e-30))
    return min(1.0, max(fractions))
