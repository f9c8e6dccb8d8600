"""The training bar (stages/train/budget_bar.py): updates out of those the budget allows,
updates and tokens a second, as the line a log file gets."""

from __future__ import annotations

from stages.train.budget_bar import BudgetBar
from stages.train.config import TrainConfig
from stages.train.progress import TrainingProgress


def test_a_flops_budget_s_bar_counts_updates_out_of_an_estimated_total_with_tokens_a_second(monkeypatch, capsys):
    monkeypatch.setenv("NMT_PROGRESS", "lines")
    monkeypatch.setenv("NMT_PROGRESS_SECONDS", "0")
    bar = BudgetBar("train t", TrainConfig(max_train_flops=1e12), 100, enabled=True)
    # A quarter of the FLOPs budget after 50 updates: 200 updates in all, about.
    bar.show(TrainingProgress(step=50, train_flops=2.5e11, train_tokens=40_000, seconds=10.0))
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("train t (4,000 tokens/s): 50/200 update (25%)") and "update/s" in line and "ETA" in line
    bar.show(TrainingProgress(step=200, train_flops=1e12, train_tokens=160_000, seconds=40.0))
    bar.close()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "200/200 update (100%)" in last and "done in" in last
