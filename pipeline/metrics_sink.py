"""The live metrics of a running stage: rows logged to its MLflow run as they come.

Its own module, apart from ``pipeline.tracking``, because Ray unpickles the sink in
every process a train stage hands it to (Ray Train's controller, each worker) before
training starts: MLflow is imported where rows are logged, not where the sink is
unpickled. Importing it with the sink cost each of those processes 0.8 s on a 2-core
CPU, on the way to the stage's first update (benchmarks/stage_overhead.py).
"""

from __future__ import annotations

import time
import warnings

MAX_METRICS_PER_BATCH = 1000  # MLflow's limit on one log_batch call


class MetricsSink:
    """Rows with a ``step`` logged to one MLflow run as they come, from any process (a
    training worker's rank 0). Picklable; best effort: a store that stays unreachable
    costs the live curve a few points, never the training run.

    One value per metric and step: a worker group that Ray Train restarts from a
    checkpoint trains the steps after it again, and its new sink (a fresh process)
    learns from the run's history which steps are logged already and skips them, so
    the curve keeps the values first logged."""

    ATTEMPTS = 3

    def __init__(self, tracking_uri: str, run_id: str):
        self.tracking_uri, self.run_id = tracking_uri, run_id
        self._client = None
        self._last_step: dict[str, int] = {}  # per metric, the last step the run holds

    def __getstate__(self) -> dict:
        return {"tracking_uri": self.tracking_uri, "run_id": self.run_id, "_client": None, "_last_step": {}}

    def __call__(self, rows: list[dict]) -> None:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(self.tracking_uri)
        for attempt in range(self.ATTEMPTS):
            try:
                metrics = self._new(series_metrics(rows))
                for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
                    self._client.log_batch(self.run_id, metrics=metrics[start:start + MAX_METRICS_PER_BATCH])
                for metric in metrics:
                    self._last_step[metric.key] = max(self._last_step[metric.key], metric.step)
                return
            except Exception as error:  # a locked SQLite file, a restarting server
                if attempt == self.ATTEMPTS - 1:
                    warnings.warn(f"MLflow: {len(rows)} metric row(s) not logged to run {self.run_id}: {error}")
                else:
                    time.sleep(0.5 * (attempt + 1))

    def _new(self, metrics: list) -> list:
        """The metrics at steps past what the run holds of each (read once per metric)."""
        for name in {metric.key for metric in metrics} - set(self._last_step):
            history = self._client.get_metric_history(self.run_id, name)
            self._last_step[name] = max((metric.step for metric in history), default=-1)
        return [metric for metric in metrics if metric.step > self._last_step[metric.key]]


def series_metrics(rows: list[dict]) -> list:
    """Rows with a ``step`` as MLflow metrics on the step axis."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(name, float(value), now, int(row["step"]))
            for row in rows for name, value in row.items() if name != "step" and isinstance(value, (int, float))]
