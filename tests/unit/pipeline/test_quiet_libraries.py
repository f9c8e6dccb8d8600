"""Library lines that say nothing to a user are silenced where they start: MLflow's and
Alembic's table creation on a new SQLite store, DeepSpeed's accelerator guess on a CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.trains  # processes that import MLflow and DeepSpeed


def run_python(code: str, tmp_path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr


def test_a_new_mlflow_store_starts_without_its_table_creation_lines(tmp_path):
    said = run_python("import logging; logging.basicConfig(level=logging.INFO)\n"
                      "from pipeline.tracking import RunTracker\n"
                      f"RunTracker('sqlite:///{tmp_path / 'mlflow.db'}', 'x')\n", tmp_path)
    assert "Creating initial MLflow database tables" not in said and "alembic" not in said, said


def test_deepspeed_on_a_cpu_does_not_guess_its_accelerator_aloud(tmp_path):
    said = run_python("import torch; assert not torch.cuda.is_available()\n"
                      "from stages.train.engine import import_deepspeed\n"
                      "import_deepspeed()\n"
                      "from deepspeed.accelerator import get_accelerator\n"
                      "print(get_accelerator().device_name())\n", tmp_path)
    assert said.strip().endswith("cpu") and "Setting accelerator to CPU" not in said, said
