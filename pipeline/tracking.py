"""MLflow records: one parent run per ``nmt run``, one nested run per stage.

The driver opens each stage's nested run when it submits the stage and closes it
with the stage's metrics when the task finishes. A stage that reports while it runs
(training) gets a ``MetricsSink`` for its run through its context, a plain callable,
so MLflow stays out of the stages; SQLite serializes the few concurrent writers. The
client API is used with explicit start and end times, so a nested run shows when its
stage really ran.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path

import ray
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pipeline.metrics_sink import MetricsRelay

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else a SQLite database in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def flatten(data: dict, prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if not isinstance(value, str) else value
    return flat


def absolute_tracking_uri(uri: str) -> str:
    """A relative SQLite path made absolute: training workers run in other directories."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str(Path(uri[len(prefix):]).resolve())
    return uri


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment's artifacts go: for a SQLite store, ``mlruns/`` beside the
    database. MLflow's own default is ``./mlruns`` in the creating process's working
    directory: with ``--tracking-uri`` elsewhere, a job submitted to a cluster left them in
    the head's home, apart from its database. None (the server decides) for a server."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    return (Path(tracking_uri[len(prefix):]).parent / "mlruns").as_uri()


def while_locked(call, *args, attempts: int = 6, **kwargs):
    """``call``, tried again while SQLite says the database is locked. At Ctrl-C the driver
    closes its runs while the live-metrics relay may still be writing its last rows: on
    2 busy cores the relay held the lock past SQLite's 5 s wait, and the run ended with
    MLflow's traceback instead of saying what it kept."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except MlflowException as error:
            if "database is locked" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(0.5 * 2 ** attempt)


class RunTracker:
    def __init__(self, tracking_uri: str, experiment: str):
        # A new SQLite store logs its table creation and migrations at INFO (MLflow's and
        # Alembic's loggers): a dozen lines at the start of a first run, none for the user.
        for name in ("alembic", "mlflow.store.db.utils"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.tracking_uri = absolute_tracking_uri(tracking_uri)
        self.client = MlflowClient(self.tracking_uri)
        existing = self.client.get_experiment_by_name(experiment)
        self.experiment_id = existing.experiment_id if existing else self.client.create_experiment(
            experiment, artifact_location=artifact_location(self.tracking_uri))
        self.parent_id: str | None = None

    def start(self, run_name: str, config_yaml: str, command: str) -> str:
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={"nmt.command": command[:5000]})
        self.parent_id = run.info.run_id
        self.client.log_text(self.parent_id, config_yaml, "resolved_config.yaml")
        return self.parent_id

    def open_stage(self, stage: str, key: str, config_slice: dict, cache_hit: bool = False,
                   started: float | None = None) -> str:
        """The stage's nested run, RUNNING until ``close_stage``: a running stage shows
        in the MLflow UI, and its metrics can be logged while it runs."""
        tags = {"mlflow.parentRunId": self.parent_id, "nmt.stage": stage, "nmt.artifact_key": key,
                "nmt.cache_hit": str(cache_hit).lower()}
        earlier = None if cache_hit else self.unfinished_attempt(stage, key)
        if earlier is not None:
            tags["nmt.earlier_attempt"] = earlier  # the run this one resumes (train) or retries
        run = self.client.create_run(self.experiment_id, start_time=int((started or time.time()) * 1000),
                                     run_name=stage, tags=tags)
        params = {"artifact_key": key, **flatten(config_slice)}
        self.client.log_batch(run.info.run_id, params=[Param(name, value[:MAX_PARAM_CHARS])
                                                       for name, value in params.items()])
        return run.info.run_id

    def unfinished_attempt(self, stage: str, key: str) -> str | None:
        """The latest earlier run of ``stage`` at ``key`` that did not finish (killed,
        failed, or left running by a driver that died), if any."""
        found = self.client.search_runs(
            [self.experiment_id], order_by=["attributes.start_time DESC"], max_results=1,
            filter_string=(f"tags.`nmt.stage` = '{stage}' and tags.`nmt.artifact_key` = '{key}' "
                           "and attributes.status != 'FINISHED'"))
        return found[0].info.run_id if found else None

    def close_stage(self, run_id: str, stage: str, key: str, config_slice: dict, result, status: str = "FINISHED",
                    error: str | None = None) -> None:
        now = int(time.time() * 1000)
        metrics = {**result.metrics, "cache_hit": float(result.cache_hit), "artifact_bytes": result.size_bytes}
        if not result.cache_hit and result.ended:
            metrics["seconds"] = result.ended - result.started
        # Text results (the resolved precision, the device, where the peak came from) are tags.
        texts = {f"nmt.{name}": value for name, value in result.metrics.items() if isinstance(value, str)}
        # A stage submitted to run may end as a hit: another run committed it meanwhile.
        texts["nmt.cache_hit"] = str(result.cache_hit).lower()
        if error:
            texts["nmt.error"] = error
        self.client.log_batch(
            run_id,
            metrics=[Metric(name, float(value), now, 0) for name, value in metrics.items()
                     if isinstance(value, (int, float))],
            tags=[RunTag(name, value[:5000]) for name, value in texts.items()],
        )
        report = {"stage": stage, "artifact_key": key, "cache_hit": result.cache_hit, "status": status,
                  "metrics": result.metrics, "config": config_slice, **({"error": error} if error else {})}
        self.client.log_text(run_id, json.dumps(report, indent=2), "stage_report.json")
        self.client.set_terminated(run_id, status=status, end_time=int((result.ended or time.time()) * 1000))

    def log_stage(self, stage: str, key: str, config_slice: dict, result, status: str = "FINISHED",
                  error: str | None = None) -> str:
        """A stage's whole nested run at once (cache hits, stages that never started)."""
        run_id = self.open_stage(stage, key, config_slice, result.cache_hit, result.started or None)
        self.close_stage(run_id, stage, key, config_slice, result, status, error)
        return run_id

    def log_files(self, run_id: str, files: dict[str, bytes]) -> None:
        """Files (name -> contents) as artifacts of a run, e.g. a stage's hypotheses."""
        if not files:
            return
        with tempfile.TemporaryDirectory(prefix="nmt-mlflow-") as directory:
            for name, contents in files.items():
                (Path(directory) / name).parent.mkdir(parents=True, exist_ok=True)
                (Path(directory) / name).write_bytes(contents)
            self.client.log_artifacts(run_id, directory)

    def start_relay(self):
        """A ``MetricsRelay`` actor on this node (a SQLite store is a file here), for
        the rows of the stages that log as they run (``RelayedSink``)."""
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        return ray.remote(num_cpus=0)(MetricsRelay).options(scheduling_strategy=here).remote(self.tracking_uri)

    @staticmethod
    def flush_relay(relay, timeout: float = 60.0) -> None:
        """Wait until the relay has logged every row sent to it; best effort, as the rows are."""
        try:
            ray.get(relay.flush.remote(), timeout=timeout)
        except Exception as error:  # a relay that died or hangs costs the curves their last points
            warnings.warn(f"MLflow: live metrics may be missing their last rows: {error}")

    def abandon_stage(self, run_id: str) -> None:
        """A stage's run that the driver stopped waiting for (interrupted, crashed)."""
        while_locked(self.client.set_terminated, run_id, status="KILLED")

    def finish(self, status: str, summary: dict) -> None:
        now = int(time.time() * 1000)
        while_locked(self.client.log_batch, self.parent_id, metrics=[Metric(name, float(value), now, 0)
                                                                     for name, value in summary.items()])
        while_locked(self.client.set_terminated, self.parent_id, status=status)
