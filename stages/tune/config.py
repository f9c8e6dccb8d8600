"""The tune stage's config: the learning rates to try and the budget of each trial,
and the slice a tune stage is keyed on (one model size, the train section, this)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from pipeline.core.section import Section
from stages.shared.models.spec import ModelSpec
from stages.train.config import TrainConfig


class TuneConfig(Section):
    """Each model's peak learning rate (each size's), chosen by Ray Tune on validation
    loss: one trial per rate, each trained as the train stage trains, with ASHA stopping
    the weak ones early. The train runs then use the chosen rate."""

    # The rates to try: a grid, best log-spaced (1e-3, 2e-3, 4e-3, ...); at least two.
    learning_rates: list[float]
    # Counted training FLOPs of each trial (its train.max_train_flops): the budget the
    # rate is chosen at.
    budget: float = Field(gt=0)
    # Choose each size's rate at every budget it trains at, not once for all: each
    # budget's trials train to this fraction of the runs' budget, at least ``budget`` and
    # at most the runs' own, one tune stage per size and trial budget
    # (tune/<model>.<size>.<trial budget>; budgets whose trials coincide share it). A
    # rate chosen at one budget for runs 20x longer diverged or trained 0.3-0.9 nats worse
    # (docs/comparing.md). null: every budget's runs use the rate chosen at ``budget``.
    budget_fraction: float | None = Field(default=None, gt=0, le=1)
    # Each tune stage's own trial budget is its ``budget``, in its key: the fraction that
    # chose it is not (a stage of the same trial budget is the same stage either way).
    NOT_IN_KEY: ClassVar[frozenset[str]] = frozenset({"budget_fraction"})
    # ASHA (Li et al. 2020): every trial gets this many validations before it can be
    # stopped, and at each rung after it 1/reduction_factor of the trials go on.
    grace_validations: int = Field(default=2, gt=0)
    reduction_factor: int = Field(default=3, ge=2)  # ASHA's: 1/this of the trials at a rung go on
    # Where the best rate is the lowest or highest tried, try the next rate beyond it (at
    # the grid's ratio there) and choose again, at most this many times; 0: never.
    max_extensions: int = Field(default=2, ge=0)
    # Among the rates whose trial came within this many nats of the best validation loss,
    # choose the lowest (as Breiman's one-standard-error rule prefers the simpler model, with
    # a fixed margin): trials shorter than their runs favour a rate the runs cannot take. Measured
    # (benchmarks/reports/2026-11-29_gru_rates_at_1e12_xeon_amx.md): the GRU w24 and w32,
    # tuned at 2.5e11 for runs of 1e12, chose 3.2e-2 by 0.009 and 0.012 nats over 1.6e-2;
    # at 1e12, 3.2e-2 stalled or diverged and 1.6e-2 trained best. null: the best, always.
    prefer_lower_within: float | None = Field(default=None, ge=0)

    @field_validator("learning_rates")
    @classmethod
    def _a_grid_to_choose_from(cls, value: list[float]) -> list[float]:
        if len(set(value)) < 2:
            raise ValueError(f"needs at least two distinct rates to choose among; got {value}")
        if any(rate <= 0 for rate in value):
            raise ValueError(f"rates must be above 0; got {value}")
        return sorted(value)


class TuneStageConfig(Section):
    """A tune stage's slice: one model size, the train section it trains with, the grid."""

    model: ModelSpec
    train: TrainConfig
    tune: TuneConfig
