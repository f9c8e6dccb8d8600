"""When the loop saves: a checkpoint every ``train.checkpoint_every`` updates (a
resumable one each ``train.resume_every`` updates, weights-only snapshots between),
one at the end of the run, and one at a preemption. What a checkpoint holds, and
where, is ``checkpointer.py``."""

from __future__ import annotations

from stages.train import checkpointer
from stages.train.config import TrainConfig
from stages.train.loop_state import LoopState
from stages.train.row_log import RowLog
from stages.train.validation import BestWeights


class Checkpoints:
    def __init__(self, state: LoopState, training: TrainConfig, every: int, session, run_dir: str, filesystem,
                 rows: RowLog, best: BestWeights):
        self.state, self.training, self.session = state, training, session
        self.every = every  # train.checkpoint_every, or its checkpoint_fraction of the run (plan.RunPlan)
        self.run_dir, self.filesystem = run_dir, filesystem  # where snapshots go, beside the checkpoints
        self.rows, self.best = rows, best

    def after_update(self) -> None:
        """On the schedule, unless the run stops here (its end saves)."""
        progress = self.state.progress
        if progress.step % self.every == 0 and not progress.stop_reason:
            if self._resumable_due():
                self.save()
            else:
                self.snapshot()

    def at_preemption(self) -> None:
        """A worker got SIGTERM: this update saved (unless it is already), marked off
        the schedule so that it is never averaged."""
        progress = self.state.progress
        if progress.last_checkpoint_step != progress.step:
            progress.preempted = True
            self.save()
            progress.preempted = False

    def save(self) -> None:
        """A resumable checkpoint: the engine's state, progress, curve and best weights."""
        with self.state.timed("checkpoints"):
            state = self.state
            state.progress.log_window = self.rows.saved()
            checkpointer.save(state.engine, state.rank, state.progress, state.curve.rows, self.best.weights,
                              self.session)

    def snapshot(self) -> None:
        with self.state.timed("checkpoints"):
            checkpointer.save_snapshot(self.state.engine, self.state.rank, self.state.progress, self.run_dir,
                                       self.filesystem, self.training.keep_checkpoints)

    def _resumable_due(self) -> bool:
        """Whether this update's checkpoint is a resumable one (``train.resume_every``
        updates or more after the last) rather than a weights-only snapshot."""
        every = self.training.resume_every
        return every is None or self.state.progress.step - max(self.state.progress.last_checkpoint_step, 0) >= every
