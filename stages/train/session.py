"""What a training worker asks of whatever runs it: its rank, where a checkpoint goes,
and the checkpoint to restart from. Two runners, one worker (``bootstrap.train_worker``):

- ``RayTrainSession``: a worker of Ray Train's worker group. Ray Train persists each
  reported checkpoint to the run's storage, keeps the newest ``keep_checkpoints`` and
  restarts a crashed group from the newest registered one.
- ``InProcessSession``: the one CPU worker of ``train.in_process``, run in the train
  stage's own process (``in_process.py``). It persists a checkpoint itself, into the
  same layout under the same run directory (``checkpoint_<step>/``), so that everything
  after training (``checkpointer.complete_checkpoints``, averaging, resuming) cannot tell
  the two apart; a tuning trial's reports go to Ray Tune directly (``report_to_tune``).
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow.fs as pafs


class RayTrainSession:
    """A worker of Ray Train's worker group (``ray.train``'s context and reports)."""

    def rank_and_world(self) -> tuple[int, int]:
        import ray.train

        context = ray.train.get_context()
        return context.get_world_rank(), context.get_world_size()

    def report(self, metrics: dict, directory: str) -> None:
        import ray.train

        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))

    def handed_back(self):
        """The checkpoint Ray Train restarts this group from, if it registered one."""
        import ray.train

        return ray.train.get_checkpoint()


class InProcessSession:
    """The only worker (rank 0 of 1), persisting its own checkpoints under ``run_dir``
    on ``filesystem`` (a pyarrow filesystem: the local disk or an object store)."""

    def __init__(self, run_dir: str, filesystem: pafs.FileSystem, keep: int, zero_stage: int,
                 report_to_tune: Callable[[dict], Any] | None = None):
        self.run_dir, self.filesystem, self.keep, self.zero_stage = run_dir, filesystem, keep, zero_stage
        self.report_to_tune = report_to_tune

    def rank_and_world(self) -> tuple[int, int]:
        return 0, 1

    def report(self, metrics: dict, directory: str) -> None:
        """Copy the checkpoint in ``directory`` to ``run_dir``/checkpoint_<step>, then
        delete all but the newest ``keep`` resumable ones, as Ray Train's
        ``CheckpointConfig(num_to_keep=...)`` does."""
        from stages.train.checkpointer import complete_checkpoints, persist

        persist(directory, self.run_dir, f"checkpoint_{metrics['step']:09d}", self.filesystem)
        resumable = [c for c in complete_checkpoints(self.run_dir, 1, self.zero_stage, self.filesystem) if c.resumable]
        for old in resumable[:-self.keep]:  # snapshots have their own count (checkpointer.save_snapshot)
            self.filesystem.delete_dir(str(old.path))
        if self.report_to_tune is not None:
            self.report_to_tune(metrics)

    def handed_back(self):
        """Nothing beyond the run directory's listing, which the worker reads first."""
        return None
