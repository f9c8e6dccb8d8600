"""MLflow tracking pieces that training workers use from other processes and directories."""

from __future__ import annotations

import pytest

from pipeline.metrics_sink import MetricsSink
from pipeline.tracking import RunTracker, absolute_tracking_uri


def test_a_relative_sqlite_uri_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_tracking_uri("sqlite:///runs/mlflow.db") == f"sqlite:///{tmp_path}/runs/mlflow.db"
    assert absolute_tracking_uri(f"sqlite:///{tmp_path}/x.db") == f"sqlite:///{tmp_path}/x.db"
    assert absolute_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_a_sqlite_store_keeps_the_artifacts_beside_its_database_not_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    tracker = RunTracker(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}", "beside")
    tracker.client.log_text(tracker.start("beside", "name: beside\n", "nmt run"), "x", "x.txt")
    assert len(list((tmp_path / "store" / "mlruns").rglob("resolved_config.yaml"))) == 1
    assert not (tmp_path / "mlruns").exists()
    # A relative URI, as nmt's default (./mlflow.db): where MLflow put them before.
    assert RunTracker("sqlite:///mlflow.db", "here").client.get_experiment_by_name("here").artifact_location == (
        (tmp_path / "mlruns").as_uri())


def test_a_metrics_sink_logs_rows_on_the_step_axis_of_an_open_stage_run(tmp_path):
    tracker = RunTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sink")
    tracker.start("sink", "name: sink\n", "nmt run")
    run_id = tracker.open_stage("train/t", "k", {"max_steps": 2})
    sink = MetricsSink(tracker.tracking_uri, run_id)
    sink([{"step": 1, "train_loss": 2.0}, {"step": 2, "train_loss": 1.5, "valid_loss": 1.7}])
    history = tracker.client.get_metric_history(run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(1, 2.0), (2, 1.5)]
    assert tracker.client.get_run(run_id).info.status == "RUNNING"  # until the stage ends


def test_a_restarted_worker_s_sink_logs_each_step_once(tmp_path):
    """Ray Train restarts a worker group from the checkpoint at step 30 after 50 steps
    were logged: a sink made afresh for the run skips steps 31-50."""
    tracker = RunTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sink")
    tracker.start("sink", "name: sink\n", "nmt run")
    run_id = tracker.open_stage("train/t", "k", {})
    first = MetricsSink(tracker.tracking_uri, run_id)
    first([{"step": step, "train_loss": 10.0 - step / 10} for step in range(0, 51, 10)])
    restarted = MetricsSink(tracker.tracking_uri, run_id)
    restarted([{"step": step, "train_loss": 99.0} for step in (40, 50)])
    restarted([{"step": step, "train_loss": 4.0, "valid_loss": 4.5} for step in (60, 70)])
    history = tracker.client.get_metric_history(run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(0, 10.0), (10, 9.0), (20, 8.0), (30, 7.0), (40, 6.0),
                                                    (50, 5.0), (60, 4.0), (70, 4.0)]
    assert [m.step for m in tracker.client.get_metric_history(run_id, "valid_loss")] == [60, 70]


def test_a_stage_run_again_after_an_unfinished_attempt_is_linked_to_it(tmp_path):
    tracker = RunTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "resume")
    tracker.start("first", "name: resume\n", "nmt run")
    killed = tracker.open_stage("train/t", "k1", {})
    tracker.abandon_stage(killed)
    other_key = tracker.open_stage("train/t", "k2", {})
    tracker.start("second", "name: resume\n", "nmt run")
    resumed = tracker.open_stage("train/t", "k1", {})
    tags = tracker.client.get_run(resumed).data.tags
    assert tags["nmt.earlier_attempt"] == killed
    assert "nmt.earlier_attempt" not in tracker.client.get_run(other_key).data.tags
    hit = tracker.open_stage("train/t", "k1", {}, cache_hit=True)
    assert "nmt.earlier_attempt" not in tracker.client.get_run(hit).data.tags


def test_a_locked_database_is_tried_again_and_any_other_error_is_raised_at_once(monkeypatch):
    from mlflow.exceptions import MlflowException

    from pipeline import tracking

    monkeypatch.setattr(tracking.time, "sleep", lambda seconds: None)
    calls = []

    def locked_twice(run_id, status):
        calls.append((run_id, status))
        if len(calls) < 3:
            raise MlflowException("(sqlite3.OperationalError) database is locked")
        return "closed"

    assert tracking.while_locked(locked_twice, "r1", status="KILLED") == "closed" and len(calls) == 3

    def refused(run_id, status):
        calls.append(run_id)
        raise MlflowException("RESOURCE_DOES_NOT_EXIST: run r2")

    calls.clear()
    with pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        tracking.while_locked(refused, "r2", status="KILLED")
    assert calls == ["r2"]

    def always_locked(run_id, status):
        raise MlflowException("database is locked")

    with pytest.raises(MlflowException, match="locked"):
        tracking.while_locked(always_locked, "r3", status="KILLED", attempts=3)
