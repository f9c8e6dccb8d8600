"""Live metrics through the run's one relay actor: rows a train worker sends reach the
stage's MLflow run, in order, and the sending process never imports MLflow."""

from __future__ import annotations

import pytest

from pipeline.metrics_sink import RelayedSink
from pipeline.tracking import RunTracker


def test_rows_sent_from_another_process_are_logged_in_order_without_mlflow_there(tmp_path, local_ray):
    import ray

    tracker = RunTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "relay")
    tracker.start("relay", "name: relay\n", "nmt run")
    first, second = (tracker.open_stage(f"train/{name}", "k", {}) for name in ("a", "b"))
    relay = tracker.start_relay()

    @ray.remote(num_cpus=0)
    def worker(sink: RelayedSink, base: float) -> bool:  # as a train stage's rank 0
        import sys

        for step in range(0, 50, 10):
            sink([{"step": step, "train_loss": base - step / 10}])
        sink.drain()  # as the train loop does before its stage ends
        return "mlflow" in sys.modules

    imported = ray.get([worker.remote(RelayedSink(relay, first), 9.0), worker.remote(RelayedSink(relay, second), 5.0)])
    assert imported == [False, False]
    for run_id, base in ((first, 9.0), (second, 5.0)):
        history = tracker.client.get_metric_history(run_id, "train_loss")
        assert [(m.step, m.value) for m in history] == [(step, base - step / 10) for step in range(0, 50, 10)]
    ray.kill(relay)


def test_a_dead_relay_costs_a_warning_not_the_run(tmp_path, local_ray):
    import ray

    tracker = RunTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "relay")
    relay = tracker.start_relay()
    ray.kill(relay)
    sink = RelayedSink(relay, "run")
    sink([{"step": 0, "train_loss": 1.0}])  # does not raise
    with pytest.warns(UserWarning, match="1 live metric call.s. to run run not confirmed"):
        sink.drain(timeout=20)
    with pytest.warns(UserWarning, match="live metrics may be missing their last rows"):
        tracker.flush_relay(relay, timeout=20)
