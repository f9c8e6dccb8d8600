"""Rank 0's logged rows, sent to the stage's live metrics from a thread of their own."""

from __future__ import annotations

import queue
import threading
import warnings
from typing import Callable

_END = None  # what ``close`` puts on the queue


class LiveMetrics:
    """Takes the training loop's rows at once and hands them to ``sink`` (the stage's
    MLflow run, pipeline/metrics_sink.py) on a thread, in order. The loop never waits
    for MLflow: its first row imports MLflow and opens the store (1.4 s on a 2-core
    CPU), and a SQLite file another stage is writing can hold a row for seconds.
    ``close`` waits for the rows still queued, so a finished worker has logged them all."""

    def __init__(self, sink: Callable[[list[dict]], None]):
        self.sink = sink
        self.rows: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._send, name="live-metrics", daemon=True)
        self.thread.start()

    def __call__(self, rows: list[dict]) -> None:
        self.rows.put(rows)

    def _send(self) -> None:
        while (rows := self.rows.get()) is not _END:
            try:
                self.sink(rows)
            except Exception as error:  # the sink is best effort; training goes on
                warnings.warn(f"live metrics: {len(rows)} row(s) not logged: {error}")

    def close(self, timeout: float = 60.0) -> None:
        """Wait up to ``timeout`` seconds for the queued rows to be sent."""
        self.rows.put(_END)
        self.thread.join(timeout)
        if self.thread.is_alive():
            warnings.warn(f"live metrics: rows still unsent after {timeout:.0f} s; the run's curve may miss them")
