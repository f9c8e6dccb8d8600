"""Learning-rate schedules, as functions of the optimizer step (1 for the first update).

``noam``: Vaswani et al. (2017), section 5.3,
lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times ``lr_scale``: a linear
warmup, then decay with the inverse square root of the step. For the RNN, d_model is
its hidden size. ``cosine``: linear warmup to ``lr``, then a half cosine down to
``min_lr`` at ``max_steps`` (the usual AdamW recipe). ``constant``: linear warmup to
``lr``, then ``lr`` (plain Adam, as the attention-RNN recipes train, e.g. nmtpytorch's).
"""

from __future__ import annotations

import math

from stages.train.config import TrainConfig


def learning_rate(step: int, config: TrainConfig, d_model: int) -> float:
    step = max(step, 1)
    if config.schedule == "noam":
        warmup = max(config.warmup_steps, 1)
        return config.lr_scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    if step <= config.warmup_steps:
        return config.lr * step / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1.0 + math.cos(math.pi * progress))
