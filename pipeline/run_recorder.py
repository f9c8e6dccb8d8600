"""What ``nmt run`` records while the graph runs: one MLflow parent run with a nested
run per stage, and the rows of the results table printed at the end.

``run_pipeline`` calls the recorder's ``on_submit``, ``on_result`` and ``on_failure``
as stages are submitted and finish. A stage's nested run is opened when it is
submitted (so the MLflow UI shows it RUNNING and training can log to it live) and
closed with its metrics; a cache hit or a stage that never started gets its whole run
at once. Files a stage lists in ``mlflow_files`` are logged with its run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pipeline.core.artifacts import ArtifactStore
from pipeline.graph import PlannedStage
from pipeline.runner import StageResult, UpstreamFailed
from pipeline.metrics_sink import RelayedSink
from pipeline.tracking import RunTracker

log = logging.getLogger("nmt")


@dataclass(frozen=True)
class ResultRow:
    """One line of the table ``nmt run`` prints."""

    stage: str
    state: str  # cached, ran, failed, not run
    key: str
    size_bytes: int | None = None
    seconds: float | None = None


class RunRecorder:
    def __init__(self, tracker: RunTracker, store: ArtifactStore):
        self.tracker, self.store = tracker, store
        self.rows: list[ResultRow] = []
        self.open_runs: dict[str, str] = {}  # stage -> its nested MLflow run, opened at submission
        self.relay = None  # the MetricsRelay actor, started with the first train stage
        self.started = time.time()

    def on_submit(self, item: PlannedStage) -> RelayedSink | None:
        """Open the stage's MLflow run; a train stage also gets the sink its workers log
        their rows to as they train."""
        run_id = self.tracker.open_stage(item.stage.name, item.key, self._slice(item))
        self.open_runs[item.stage.name] = run_id
        if item.stage.group != "train":
            return None
        if self.relay is None:
            self.relay = self.tracker.start_relay()
        return RelayedSink(self.relay, run_id)

    def on_result(self, item: PlannedStage, result: StageResult) -> None:
        self._close(item, result)
        if result.cache_hit:
            log.info("%-9s cache hit (key %s)", item.stage.name, item.key)
            self.rows.append(ResultRow(item.stage.name, "cached", item.key, result.size_bytes))
        else:
            seconds = result.ended - result.started
            log.info("%-9s done in %.1fs (key %s)", item.stage.name, seconds, item.key)
            self.rows.append(ResultRow(item.stage.name, "ran", item.key, result.size_bytes, seconds))

    def on_failure(self, item: PlannedStage, error: BaseException) -> None:
        failed = StageResult(item.stage.name, item.key, False)  # its task's times are unknown here
        self._close(item, failed, "FAILED", str(error))
        state = "not run" if isinstance(error, UpstreamFailed) else "failed"
        self.rows.append(ResultRow(item.stage.name, state, item.key))

    def first_failed(self) -> str:
        return next(row.stage for row in self.rows if row.state == "failed")

    def finish(self, status: str) -> None:
        """Close the parent run; stages still open were interrupted and are marked KILLED."""
        if self.relay is not None:
            self.tracker.flush_relay(self.relay)
        for run_id in self.open_runs.values():
            self.tracker.abandon_stage(run_id)
        self.open_runs.clear()
        summary = {"seconds": time.time() - self.started}
        if status == "FINISHED":
            hits = sum(1 for row in self.rows if row.state == "cached")
            summary.update(cache_hits=hits, stages_run=len(self.rows) - hits)
        self.tracker.finish(status, summary)

    def _slice(self, item: PlannedStage) -> dict:
        return item.section.model_dump(mode="json")

    def _close(self, item: PlannedStage, result: StageResult, status: str = "FINISHED",
               error: str | None = None) -> None:
        name, config_slice = item.stage.name, self._slice(item)
        if name in self.open_runs:
            run_id = self.open_runs.pop(name)
            self.tracker.close_stage(run_id, name, item.key, config_slice, result, status, error)
        else:
            run_id = self.tracker.log_stage(name, item.key, config_slice, result, status, error)
        if status == "FINISHED" and item.stage.mlflow_files:
            self.tracker.log_files(run_id, self.store.read_files(name, item.key, item.stage.mlflow_files))
