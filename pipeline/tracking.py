"""MLflow records: one parent run per ``nmt run``, one nested run per stage.

Only the driver talks to MLflow; stages return their metrics and the driver logs
them when each stage's task finishes. That keeps the default SQLite store safe
(one writer) and keeps MLflow out of the stages. The client API is used with
explicit start and end times, so a nested run shows when its stage really ran.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
MAX_METRICS_PER_BATCH = 1000  # MLflow's limit on one log_batch call


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


class RunTracker:
    def __init__(self, tracking_uri: str, experiment: str):
        self.client = MlflowClient(tracking_uri)
        existing = self.client.get_experiment_by_name(experiment)
        self.experiment_id = existing.experiment_id if existing else self.client.create_experiment(experiment)
        self.parent_id: str | None = None

    def start(self, run_name: str, config_yaml: str, command: str) -> str:
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={"nmt.command": command[:5000]})
        self.parent_id = run.info.run_id
        self.client.log_text(self.parent_id, config_yaml, "resolved_config.yaml")
        return self.parent_id

    def log_stage(self, stage: str, key: str, config_slice: dict, result, status: str = "FINISHED",
                  error: str | None = None) -> str:
        started = int((result.started or time.time()) * 1000)
        tags = {"mlflow.parentRunId": self.parent_id, "nmt.stage": stage, "nmt.artifact_key": key,
                "nmt.cache_hit": str(result.cache_hit).lower()}
        run = self.client.create_run(self.experiment_id, start_time=started, run_name=stage, tags=tags)
        run_id = run.info.run_id
        params = {"artifact_key": key, **flatten(config_slice)}
        now = int(time.time() * 1000)
        metrics = {**result.metrics, "cache_hit": float(result.cache_hit), "artifact_bytes": result.size_bytes}
        if not result.cache_hit and result.ended:
            metrics["seconds"] = result.ended - result.started
        self.client.log_batch(
            run_id,
            metrics=[Metric(name, float(value), now, 0) for name, value in metrics.items()
                     if isinstance(value, (int, float))],
            params=[Param(name, value[:MAX_PARAM_CHARS]) for name, value in params.items()],
            tags=[RunTag("nmt.error", error[:5000])] if error else [],
        )
        self._log_series(run_id, result.series)
        report = {"stage": stage, "artifact_key": key, "cache_hit": result.cache_hit, "status": status,
                  "metrics": result.metrics, "config": config_slice, **({"error": error} if error else {})}
        self.client.log_text(run_id, json.dumps(report, indent=2), "stage_report.json")
        ended = int((result.ended or time.time()) * 1000)
        self.client.set_terminated(run_id, status=status, end_time=ended)
        return run_id

    def _log_series(self, run_id: str, rows: list[dict]) -> None:
        """Rows with a ``step`` become metric histories (MLflow's step axis)."""
        metrics = [Metric(name, float(value), int(row.get("time", time.time()) * 1000), int(row["step"]))
                   for row in rows for name, value in row.items()
                   if name != "step" and isinstance(value, (int, float))]
        for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=metrics[start:start + MAX_METRICS_PER_BATCH])

    def finish(self, status: str, summary: dict) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.parent_id, metrics=[Metric(name, float(value), now, 0)
                                                        for name, value in summary.items()])
        self.client.set_terminated(self.parent_id, status=status)
