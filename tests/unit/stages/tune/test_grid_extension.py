"""Where the tune stage's best rate is at an edge of the rates tried, the next rate out
at the grid's own ratio there (the stage itself is run in tests/e2e/test_tune.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stages.tune import beyond, grid_edge  # grid_edge: stages/tune/artifact.py, the report's too
from stages.tune.config import TuneConfig


def test_an_edge_is_the_lowest_or_highest_rate_tried():
    rates = [2e-3, 4e-3, 8e-3, 1.6e-2]
    assert grid_edge(1.6e-2, rates) == "highest" and grid_edge(2e-3, rates) == "lowest"
    assert grid_edge(4e-3, rates) is None


def test_the_next_rate_out_keeps_the_grids_ratio_at_that_edge():
    assert beyond([2e-3, 4e-3, 8e-3, 1.6e-2], "highest") == pytest.approx(3.2e-2)
    assert beyond([1e-3, 3e-3, 30.0], "lowest") == pytest.approx(1e-3 / 3)
    # After one extension the grid's last step is the extension's own.
    assert beyond([1e-5, 2e-5, 4e-5], "highest") == pytest.approx(8e-5)


def test_extensions_default_to_two_and_cannot_be_negative():
    assert TuneConfig(learning_rates=[1e-3, 2e-3], budget=1e10).max_extensions == 2
    with pytest.raises(ValidationError, match="max_extensions"):
        TuneConfig(learning_rates=[1e-3, 2e-3], budget=1e10, max_extensions=-1)
