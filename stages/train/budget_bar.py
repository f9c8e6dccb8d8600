"""Rank 0's progress bar, drawn on the driver by Ray."""

from __future__ import annotations

import time

from pipeline.core.context import ray_progress
from stages.train.progress import TrainingProgress, budget_fraction

# Seconds between two refreshes of the bar's tokens-a-second description.
RATE_EVERY = 5.0


class BudgetBar:
    """Progress in updates, with an ETA, and the target tokens a second in its
    description. The total is the updates the budget allows: exact for a step budget,
    and for a FLOPs, tokens, epoch or time budget estimated from the share of it spent so
    far (the largest share, the budget that ends the run first), so it settles within the
    first updates."""

    def __init__(self, desc: str, config, batches_per_epoch: int, enabled: bool):
        self.desc, self.config, self.batches_per_epoch = desc, config, batches_per_epoch
        self.bar, self.rate_shown = None, 0.0
        if enabled:
            self.bar = ray_progress(total=config.max_steps, desc=desc, unit="update")

    def show(self, progress: TrainingProgress) -> None:
        if self.bar is None:
            return
        spent = budget_fraction(self.config, progress, self.batches_per_epoch)
        if spent > 0:
            self.bar.total = max(progress.step, round(progress.step / spent))
        now = time.monotonic()
        if progress.seconds > 0 and now - self.rate_shown >= RATE_EVERY:
            self.rate_shown = now
            self.bar.set_description(f"{self.desc} ({progress.train_tokens / progress.seconds:,.0f} tokens/s)")
        if progress.step > self.bar.n:
            self.bar.update(progress.step - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
