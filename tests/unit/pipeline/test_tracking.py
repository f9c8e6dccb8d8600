"""MLflow tracking pieces that training workers use from other processes and directories."""

from __future__ import annotations

import pickle

from pipeline.tracking import RunTracker, absolute_tracking_uri


def test_a_relative_sqlite_uri_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_tracking_uri("sqlite:///runs/mlflow.db") == f"sqlite:///{tmp_path}/runs/mlflow.db"
    assert absolute_tracking_uri(f"sqlite:///{tmp_path}/x.db") == f"sqlite:///{tmp_path}/x.db"
    assert absolute_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_a_pickled_metrics_sink_logs_rows_on_the_step_axis_of_an_open_stage_run(tmp_path):
    tracker = RunTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sink")
    tracker.start("sink", "name: sink\n", "nmt run")
    run_id = tracker.open_stage("train/t", "k", {"max_steps": 2})
    sink = pickle.loads(pickle.dumps(tracker.live_sink(run_id)))  # as a Ray Train worker gets it
    sink([{"step": 1, "train_loss": 2.0}, {"step": 2, "train_loss": 1.5, "valid_loss": 1.7}])
    history = tracker.client.get_metric_history(run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(1, 2.0), (2, 1.5)]
    assert tracker.client.get_run(run_id).info.status == "RUNNING"  # until the stage ends
