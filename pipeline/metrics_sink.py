"""The live metrics of a running stage: rows logged to its MLflow run as they come.

A train stage's rank-0 worker calls a ``RelayedSink``, which hands the rows to the run's
one ``MetricsRelay`` actor and returns at once; the relay logs them with a
``MetricsSink``. So MLflow is imported once per ``nmt run``, in the relay, and never in
the processes a train stage starts: Ray Train's controller and every worker unpickle the
sink before training, and importing MLflow there, then opening its store at the first
row, cost each stage about 2 s of a 2-core CPU (benchmarks/orchestration/stage_overhead.py). The
relay runs on the driver's node, where a SQLite tracking file is, and is its one writer.
"""

from __future__ import annotations

import time
import warnings

MAX_METRICS_PER_BATCH = 1000  # MLflow's limit on one log_batch call


class MetricsSink:
    """Rows with a ``step`` logged to one MLflow run as they come (in the relay). Best
    effort: a store that stays unreachable costs the live curve a few points, never the
    training run.

    One value per metric and step: a worker group that Ray Train restarts from a
    checkpoint trains the steps after it again; the sink skips the steps the run holds
    already (learned from the run's history by a sink made afresh, as in a relay of a
    later ``nmt run``), so the curve keeps the values first logged."""

    ATTEMPTS = 3

    def __init__(self, tracking_uri: str, run_id: str):
        self.tracking_uri, self.run_id = tracking_uri, run_id
        self._client = None
        self._last_step: dict[str, int] = {}  # per metric, the last step the run holds

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


class MetricsRelay:
    """The Ray actor that logs every train stage's live rows of one ``nmt run``, each to
    its stage's MLflow run. A caller's rows arrive in the order it sent them."""

    def __init__(self, tracking_uri: str):
        self.tracking_uri = tracking_uri
        self.sinks: dict[str, MetricsSink] = {}

    def log(self, run_id: str, rows: list[dict]) -> None:
        if run_id not in self.sinks:
            self.sinks[run_id] = MetricsSink(self.tracking_uri, run_id)
        self.sinks[run_id](rows)

    def flush(self) -> bool:
        """Answers once every row sent before this call is logged (calls run in order)."""
        return True


class RelayedSink:
    """A stage's sink as its workers get it: rows to the relay, without waiting. Ray
    orders a caller's calls to an actor, not calls from different processes: ``drain``
    is how a worker makes sure its rows are logged before it says it is done, as a
    ``flush`` from the driver could overtake rows still in flight from a worker."""

    PRUNE_AT = 64  # calls kept before the ones already logged are let go

    def __init__(self, relay, run_id: str):
        self.relay, self.run_id = relay, run_id
        self._sent: list = []  # this process's calls, as Ray object refs, not yet known to be logged

    def __getstate__(self) -> dict:  # each process that unpickles the sink drains its own calls
        return {"relay": self.relay, "run_id": self.run_id}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["relay"], state["run_id"])

    def __call__(self, rows: list[dict]) -> None:
        import ray

        self._sent.append(self.relay.log.remote(self.run_id, rows))
        if len(self._sent) >= self.PRUNE_AT:
            self._sent = ray.wait(self._sent, num_returns=len(self._sent), timeout=0)[1]

    def drain(self, timeout: float = 60.0) -> None:
        """Return once every row this process sent is logged; best effort, as the rows are."""
        import ray

        sent, self._sent = self._sent, []
        try:
            ray.get(sent, timeout=timeout)
        except Exception as error:  # a relay that died or hangs costs the curve its last points
            warnings.warn(f"MLflow: {len(sent)} live metric call(s) to run {self.run_id} not confirmed: {error}")
