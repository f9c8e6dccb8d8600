"""The rate the tune stage chooses among its trials (``stages.tune.choose``): the best,
or with ``tune.prefer_lower_within`` the lowest rate within that margin of the best."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stages.tune import choose
from stages.tune.config import TuneConfig

# The GRU w32's trials at 2.5e11 (benchmarks/reports/2026-11-29_gru_rates_at_1e12_xeon_amx.md).
W32_AT_2_5E11 = [{"lr": 8e-3, "best_valid_loss": 3.5589}, {"lr": 1.6e-2, "best_valid_loss": 3.2461},
                 {"lr": 3.2e-2, "best_valid_loss": 3.2340}, {"lr": 6.4e-2, "best_valid_loss": 4.4142}]


def test_without_a_margin_the_best_trial_s_rate_is_chosen():
    assert choose(W32_AT_2_5E11, None)["lr"] == 3.2e-2


def test_a_lower_rate_within_the_margin_is_chosen_over_the_best():
    assert choose(W32_AT_2_5E11, 0.02)["lr"] == 1.6e-2
    # 0.012 nats apart: a margin below it keeps the best.
    assert choose(W32_AT_2_5E11, 0.01)["lr"] == 3.2e-2
    # The lowest rate within the margin, not the next one down: 8e-3 is 0.325 nats off.
    assert choose(W32_AT_2_5E11, 0.4)["lr"] == 8e-3


def test_a_higher_rate_within_the_margin_is_never_chosen():
    rows = [{"lr": 1e-3, "best_valid_loss": 2.50}, {"lr": 2e-3, "best_valid_loss": 2.49},
            {"lr": 4e-3, "best_valid_loss": 2.495}]
    assert choose(rows, 0.02)["lr"] == 1e-3
    assert choose(rows[1:], 0.02)["lr"] == 2e-3  # the best is the lowest within the margin


def test_the_margin_cannot_be_negative():
    assert TuneConfig(learning_rates=[1e-3, 2e-3], budget=1e10).prefer_lower_within is None
    with pytest.raises(ValidationError, match="prefer_lower_within"):
        TuneConfig(learning_rates=[1e-3, 2e-3], budget=1e10, prefer_lower_within=-0.1)
