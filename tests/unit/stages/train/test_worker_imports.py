"""What a train stage's Ray processes import before the first update: each import there
is paid by every stage of a sweep (benchmarks/orchestration/stage_overhead.py). The metrics sink's
imports: tests/e2e/test_metrics_relay.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.trains  # processes that import DeepSpeed and Ray Train


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_deepspeed_is_imported_without_mlflow_which_stays_importable():
    code = ("import sys\n"
            "from stages.train.engine import import_deepspeed\n"
            "deepspeed = import_deepspeed()\n"
            "print(hasattr(deepspeed, 'initialize'), 'mlflow' in sys.modules)\n"
            "import mlflow\n"
            "print(hasattr(mlflow, 'MlflowClient'))")
    assert _run(code).splitlines()[-2:] == ["True False", "True"]


def test_the_stage_trainer_starts_no_dataset_manager_without_datasets():
    code = ("from ray.train import ScalingConfig\n"
            "from ray.train.v2._internal.callbacks.datasets import DatasetsCallback\n"
            "from stages.train.ray_trainer import StageTrainer\n"
            "trainer = StageTrainer(lambda config: None, scaling_config=ScalingConfig(num_workers=1))\n"
            "callbacks = trainer._create_default_callbacks()\n"
            "print(len(callbacks) > 2, any(isinstance(c, DatasetsCallback) for c in callbacks))")
    assert _run(code).splitlines()[-1] == "True False"
