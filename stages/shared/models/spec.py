"""One model to train and compare, as a config names it: family, preset, settings.

Torch-free, so that loading a config does not import torch."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from pipeline.core.section import Section
from stages.shared.models.families import NAMES, family


class ModelSpec(Section):
    """One model to train and compare: a family, a named preset, and settings that
    override the preset's hyperparameters (see the family's ``config.py`` under stages/shared/models/).
    ``train`` overrides keys of the experiment's train section for this model only
    (e.g. a learning rate); budgets are best left shared."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")  # the stages' names: train/<name>, evaluate/<name>
    family: Literal[NAMES]  # a folder of stages/shared/models/, listed in families.py
    preset: str = "small"  # a named size of the family (its config.py): tiny, small, base, big, ...
    settings: dict[str, Any] = {}  # hyperparameters over the preset's (d_model, layers, dropout, ...)
    train: dict[str, Any] = {}  # train keys for this model only (lr, warmup_steps, ...)
    # Set by the experiment's seeds and budgets, not in a config: the configured model
    # this run is one of (its name without the budget and seed suffixes). Left out
    # of keys and manifests: the run's name and train overrides already say it.
    run_of: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _preset_and_settings_exist(self) -> ModelSpec:
        family(self.family).resolve(self.preset, self.settings)  # torch-free
        return self
