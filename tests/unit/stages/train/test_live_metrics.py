"""Rank 0's rows reach the stage's MLflow run without the training loop waiting for them."""

from __future__ import annotations

import threading

import pytest

from stages.train.live_metrics import LiveMetrics


def test_rows_are_taken_at_once_and_sent_in_order_before_close_returns():
    sent, release = [], threading.Event()

    def slow_sink(rows):  # a store that holds every row until released
        release.wait(10)
        sent.extend(rows)

    live = LiveMetrics(slow_sink)
    for step in range(5):
        live([{"step": step, "train_loss": 5.0 - step}])  # returns while the sink is held
    assert sent == []
    release.set()
    live.close(timeout=10)
    assert [row["step"] for row in sent] == [0, 1, 2, 3, 4]


def test_a_failing_sink_warns_and_later_rows_still_go():
    sent = []

    def flaky_sink(rows):
        if rows[0]["step"] == 1:
            raise OSError("database is locked")
        sent.extend(rows)

    live = LiveMetrics(flaky_sink)
    with pytest.warns(UserWarning, match="1 row\\(s\\) not logged: database is locked"):
        for step in range(3):
            live([{"step": step}])
        live.close(timeout=10)
    assert [row["step"] for row in sent] == [0, 2]


def test_close_gives_up_after_its_timeout_with_a_warning():
    live = LiveMetrics(lambda rows: threading.Event().wait(5))
    live([{"step": 0}])
    with pytest.warns(UserWarning, match="still unsent after 0 s"):
        live.close(timeout=0.2)
