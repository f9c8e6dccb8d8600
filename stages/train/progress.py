"""Where a training run is: saved in every checkpoint, so a resumed run continues the
same data order, budgets and early-stopping count; and the budget check itself."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from stages.train.batching import BatchPosition
from stages.train.config import TrainConfig


# Why a stable-phase segment stopped: its budget's decay begins with the next update.
STABLE_PHASE_END = "stable_phase_end"


@dataclass
class TrainingProgress:
    step: int = 0  # optimizer updates
    micro_batches: int = 0  # batches this worker has trained (its dropout seeds follow it)
    epoch: int = 0
    step_in_epoch: int = 0
    train_tokens: int = 0  # target tokens, all workers
    train_src_tokens: int = 0
    train_flops: float = 0.0  # counted (stages/shared/models/flops.py), all workers
    seconds: float = 0.0  # wall time spent training, across restarts
    best_valid_loss: float = math.inf
    best_valid_bleu: float | None = None
    best_step: int = 0  # of the best ``best_metric``
    validations_without_improvement: int = 0  # of ``best_metric``
    last_checkpoint_step: int = -1
    last_valid_step: int = -1
    last_bleu_step: int = -1
    stop_reason: str = ""
    restarts: int = 0
    # Where this run continued another train stage's checkpoint (budgets branched from
    # one stable phase): {"stage", "step", "train_flops", "seconds"} at that point; {}: none.
    continued: dict = field(default_factory=dict)
    skipped_updates: int = 0  # fp16: updates DeepSpeed skipped because gradients overflowed
    # A checkpoint written on SIGTERM (preemption.py), off the schedule: resumed from,
    # never averaged into the final model.
    preempted: bool = False
    # Sums since the last logged row, over all workers ({} when none): a checkpoint taken
    # between two rows (on SIGTERM, or where checkpoint_every is no multiple of log_every)
    # hands them to the run that resumes from it, whose next row then covers the same
    # updates as an uninterrupted run's.
    log_window: dict = field(default_factory=dict)
    # The latest attempt's device, resolved precision and peak FLOP/s (worker_device.py).
    hardware: dict = field(default_factory=dict)
    # Wall seconds of the run in each part of the loop that is not an update ("data",
    # "validation", "checkpoints", "logging": loop.py's _timed), across restarts; the
    # rest of ``seconds`` is the updates themselves (forward, backward, optimizer).
    time_spent: dict = field(default_factory=dict)
    # Their sum at the last update: ``seconds`` ends there, the final validation and
    # checkpoint come after it.
    time_spent_in_seconds: float = 0.0
    # How the engine that wrote the checkpoint held its states (checkpointer.ENGINE_LAYOUT);
    # 1 for checkpoints written before it was recorded.
    engine_layout: int = 1

    @property
    def position(self) -> BatchPosition:
        return BatchPosition(self.epoch, self.step_in_epoch)

    def to_json(self) -> dict:
        data = asdict(self)
        data["best_valid_loss"] = None if math.isinf(self.best_valid_loss) else self.best_valid_loss
        return data

    @classmethod
    def from_json(cls, data: dict) -> TrainingProgress:
        data = dict(data)
        if data.get("best_valid_loss") is None:
            data["best_valid_loss"] = math.inf
        return cls(**data)


def budget_reached(config: TrainConfig, progress: TrainingProgress) -> str:
    """The name of the first budget ``progress`` has used up, or ''. Called after an
    update with the numbers summed over all workers, so every worker agrees."""
    if config.max_steps is not None and progress.step >= config.max_steps:
        return "max_steps"
    if config.max_train_tokens is not None and progress.train_tokens >= config.max_train_tokens:
        return "max_train_tokens"
    if config.max_train_flops is not None and progress.train_flops >= config.max_train_flops:
        return "max_train_flops"
    if config.max_wall_time is not None and progress.seconds >= config.max_wall_time:
        return "max_wall_time"
    if (config.early_stopping_patience is not None
            and progress.validations_without_improvement >= config.early_stopping_patience):
        return "early_stopping"
    return ""


def budget_fraction(config: TrainConfig, progress: TrainingProgress, batches_per_epoch: int) -> float:
    """How much of the budget is used, 0 to 1: the largest fraction over the budgets set
    (the one that will stop the run first, if rates hold). Drives the progress bar."""
    fractions = [0.0]
    if config.max_steps is not None:
        fractions.append(progress.step / config.max_steps)
    if config.max_epochs is not None:
        fractions.append((progress.epoch + progress.step_in_epoch / max(batches_per_epoch, 1)) / config.max_epochs)
    if config.max_train_tokens is not None:
        fractions.append(progress.train_tokens / config.max_train_tokens)
    if config.max_train_flops is not None:
        fractions.append(progress.train_flops / config.max_train_flops)
    if config.max_wall_time is not None:
        fractions.append(progress.seconds / config.max_wall_time)
    return min(1.0, max(fractions))
