"""configs/wmt14_frontier_gpu.yaml's dry run on CPUs: its own train, tune and evaluate
sections (warmup and checkpoints as fractions of each run, ASHA over its rate grid at
the runs' full budget, both seeds) run through ``nmt run`` to a report, at a tiny
scale: a slice of Multi30k in place of WMT14; its Transformer's two smallest sizes that
train at both of its two smallest budgets, widths and budgets scaled down; on the CPU.
The study's whole shape (every family, size and budget) is
tests/unit/pipeline/test_config.py's to check.

Cut for time: a tune stage costs about 40 s here whatever the model's size (Ray Tune's
trials), and the study's window gives ten of them at two budgets; two sizes give four.
Its grid is not extended (``max_extensions: 0``): at these widths its rates are all at
the low end, and every stage would add two trials."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config import load_config
from tests.helpers import REPO, slice_multi30k, small_config, write_config

pytestmark = pytest.mark.slow

GPU_STUDY = REPO / "configs" / "wmt14_frontier_gpu.yaml"
# The study's widths in order, each to a tiny one.
TINY_WIDTHS = {"w96": "w3", "w128": "w4", "w192": "w6", "w256": "w8", "w384": "w12", "w512": "w16",
               "w768": "w24", "w1024": "w32"}
TINY_SMALLEST_BUDGET = 3.0e8  # what the study's 1e15 becomes: tens of updates of 256 tokens for w4 and w6


def tiny_study(corpus: Path, directory: Path) -> Path:
    """The GPU study's config at a CPU's scale, written to ``directory``."""
    study = yaml.safe_load(GPU_STUDY.read_text())  # YAML 1.1 reads 1.0e15 as a string: float() below
    kept = sorted(float(budget) for budget in study["budgets"])[:2]
    scale = TINY_SMALLEST_BUDGET / kept[0]
    (transformer,) = [model for model in study["models"] if model["family"] == "transformer"]
    windows = {TINY_WIDTHS[size]: [float(budget) * scale for budget in budgets if float(budget) in kept]
               for size, budgets in transformer["size_budgets"].items()}
    at_both = [size for size, budgets in windows.items() if len(budgets) == len(kept)][:2]
    windows = {size: windows[size] for size in at_both}
    transformer.update(sizes=list(windows), size_budgets=windows)
    train = {**study["train"], "use_gpu": False, "gpus_per_worker": 1.0, "cpus_per_worker": 1, "in_process": True,
             "precision": "fp32", "max_tokens": 256, "valid_every": 4,
             "max_train_flops": float(study["train"]["max_train_flops"]) * scale}
    config = {**small_config(corpus), "name": "gpu_study_dry_run", "train": train,
              "tune": {**study["tune"], "budget": float(study["tune"]["budget"]) * scale, "max_extensions": 0},
              "budgets": [budget * scale for budget in kept], "seeds": study["seeds"], "models": [transformer],
              "evaluate": {**study["evaluate"], "device": "cpu", "shards": 1, "batch_size": 16, "max_length_b": 20}}
    return write_config(directory / "gpu_study_tiny.yaml", config)


def test_the_gpu_study_runs_to_its_report_at_a_tiny_scale(tmp_path, multi30k):
    corpus = slice_multi30k(multi30k, tmp_path / "corpus", {"train": 600, "val": 40, "test_2016_flickr": 30})
    config_path = tiny_study(corpus, tmp_path)
    config = load_config(config_path)
    runs = config.trained_models()
    assert len({run.train["max_train_flops"] for run in runs}) == 2 and {run.train["seed"] for run in runs} == {1, 2}
    env = {**os.environ, "NMT_ARTIFACT_ROOT": str(tmp_path / "artifacts"), "NMT_CACHE_DIR": str(tmp_path / "cache"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "NMT_PROGRESS_SECONDS": "3600"}
    done = subprocess.run([sys.executable, "-m", "pipeline", "run", str(config_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    artifacts = tmp_path / "artifacts"
    (report_dir,) = (artifacts / "report").iterdir()
    report = json.loads((report_dir / "report.json").read_text())
    reported = {row["name"] for row in report["models"]}
    assert reported == {run.name for run in runs}
    # Every run's rate came from trials as long as the run (budget_fraction 1.0).
    for run in runs:
        (tune_dir,) = (artifacts / run.lr_from).iterdir()
        choice = json.loads((tune_dir / "choice.json").read_text())
        assert choice["budget"] == pytest.approx(run.train["max_train_flops"]), run.name
