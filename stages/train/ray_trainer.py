"""Ray Train's ``TorchTrainer`` as a train stage uses it: workers that checkpoint on
SIGTERM, no dataset manager, and no controller left alive after ``fit``."""

from __future__ import annotations

import signal
import threading

from ray.train.torch import TorchTrainer
from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2._internal.execution.callback import WorkerGroupCallback

from stages.train import preemption


class PreemptionCallback(WorkerGroupCallback):
    """Installs preemption.py's SIGTERM handler in every worker of each worker group
    Ray Train starts. ``execute`` runs on a worker's main thread, the only one that may
    set a signal handler; the training function runs on another."""

    def after_worker_group_start(self, worker_group) -> None:
        worker_group.execute(preemption.install)


class StageTrainer(TorchTrainer):
    """A ``TorchTrainer`` whose workers checkpoint and stop on SIGTERM (preemption.py),
    and that starts no Ray Data ``DatasetManager`` actor when it is given
    no datasets. Ray Train starts one for every run; our workers read their shards of the
    tokenized Arrow files themselves (data.py) and never ask it for one. Its process
    started while the worker was importing torch: on a 2-core CPU it is one of six
    processes a train stage starts before its first update. (Ray 2.60's private
    callbacks: tests/unit/stages/train/test_worker_imports.py and
    tests/e2e/test_preemption.py hold what we rely on.)"""

    def fit(self):
        """``TorchTrainer.fit``, then the SIGINT handler it installs (on the main thread,
        where a stage task runs) put back. That handler's closure holds the run's
        controller actor, so the finished run's controller, a Ray worker process, lived
        on in every process that had run a train stage, until the process trained again
        or ended: one more process per train stage of a sweep, toward the count at which
        Ray's raylet warns that too many worker processes have been started."""
        previous = signal.getsignal(signal.SIGINT)
        try:
            return super().fit()
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)

    def _create_default_callbacks(self):
        callbacks = [*super()._create_default_callbacks(), PreemptionCallback()]
        if self.datasets:
            return callbacks
        return [callback for callback in callbacks if not isinstance(callback, DatasetsCallback)]
