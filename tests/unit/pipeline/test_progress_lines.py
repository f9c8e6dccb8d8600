"""Progress as lines where no terminal draws bars (pipeline/core/progress_lines.py)."""

from __future__ import annotations

import pytest

from pipeline.core.progress_lines import (
    PROGRESS_ENV,
    PROGRESS_LINE,
    LineProgress,
    choose_progress_style,
    lines_wanted,
    progress_line,
)


def test_a_line_gives_count_share_rate_over_the_whole_time_and_eta():
    bar = LineProgress(total=3000, desc="clean train", unit="pairs")
    bar.n = 1200
    assert bar.line(elapsed=2.0) == "clean train: 1,200/3,000 pairs (40%), 600.0 pairs/s, ETA 3s"
    bar.n, bar.closed = 3000, True
    assert bar.line(elapsed=125.0) == "clean train: 3,000/3,000 pairs (100%), 24.0 pairs/s, done in 2m05s"


@pytest.mark.parametrize("n, total, elapsed, closed", [
    (268, 3226, 30.0, False), (3226, 3226, 351.0, True), (1014, 1014, 0.2, True), (5, None, 3.0, False),
    (0, 10, 0.0, False)])
def test_every_progress_line_is_told_apart_by_its_pattern(n, total, elapsed, closed):
    line = progress_line("train rnn.w24 (8,639 tokens/s)", n, total, "update", elapsed, closed)
    assert PROGRESS_LINE.search(line), line


@pytest.mark.parametrize("line", ["error: 1", "INFO     train/rnn done in 3.0s (key 77128b)", "stage: 12 items"])
def test_other_lines_are_not_progress_lines(line):
    assert not PROGRESS_LINE.search(line)


def test_lines_are_written_every_interval_and_once_on_close(monkeypatch, capsys):
    monkeypatch.setenv("NMT_PROGRESS_SECONDS", "3600")
    bar = LineProgress(total=10, desc="tokenize", unit="pairs")
    for _ in range(10):
        bar.update()
    assert capsys.readouterr().err == ""  # within the interval: nothing yet
    bar.close()
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tokenize: 10/10 pairs (100%)") and "done in" in lines[0]


def test_the_driver_asks_for_lines_unless_told_or_on_a_terminal(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert choose_progress_style() == "lines" and lines_wanted()  # pytest's stderr is not a terminal
    monkeypatch.setenv(PROGRESS_ENV, "bars")
    assert choose_progress_style() == "bars" and not lines_wanted()
