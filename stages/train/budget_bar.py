"""Rank 0's progress bar, drawn on the driver by Ray."""

from __future__ import annotations

from pipeline.core.context import ray_progress
from stages.train.progress import TrainingProgress, budget_fraction


class BudgetBar:
    """Progress in per mille of the training budget, so a FLOPs or time budget gets a
    rate and an ETA just as a step budget does."""

    SCALE = 1000

    def __init__(self, desc: str, config, batches_per_epoch: int, enabled: bool):
        self.config, self.batches_per_epoch, self.shown = config, batches_per_epoch, 0
        self.bar = None
        if enabled:
            self.bar = ray_progress(total=self.SCALE, desc=f"{desc} (per mille of budget)", unit="‰")

    def show(self, progress: TrainingProgress) -> None:
        if self.bar is None:
            return
        done = int(self.SCALE * budget_fraction(self.config, progress, self.batches_per_epoch))
        if done > self.shown:
            self.bar.update(done - self.shown)
            self.shown = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
