"""Ray Train's ``TorchTrainer`` as a train stage uses it: without the dataset manager."""

from __future__ import annotations

from ray.train.torch import TorchTrainer
from ray.train.v2._internal.callbacks.datasets import DatasetsCallback


class StageTrainer(TorchTrainer):
    """A ``TorchTrainer`` that starts no Ray Data ``DatasetManager`` actor when it is given
    no datasets. Ray Train starts one for every run; our workers read their shards of the
    tokenized Arrow files themselves (data.py) and never ask it for one. Its process
    started while the worker was importing torch: on a 2-core CPU it is one of six
    processes a train stage starts before its first update. (Ray 2.60: a private
    callback, held by tests/unit/stages/train/test_ray_trainer.py.)"""

    def _create_default_callbacks(self):
        callbacks = super()._create_default_callbacks()
        if self.datasets:
            return callbacks
        return [callback for callback in callbacks if not isinstance(callback, DatasetsCallback)]
