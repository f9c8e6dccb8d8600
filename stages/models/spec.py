"""One model to train and compare, as a config names it: family, preset, settings.

Torch-free, so that loading a config does not import torch."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from pipeline.section import Section


class ModelSpec(Section):
    """One model to train and compare: a family, a named preset, and settings that
    override the preset's hyperparameters (see stages/models/presets.py).
    ``train`` overrides keys of the experiment's train section for this model only
    (e.g. a learning rate); budgets are best left shared."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    family: Literal["transformer", "rnn", "decoder_only"]
    preset: str = "small"
    settings: dict[str, Any] = {}
    train: dict[str, Any] = {}

    @model_validator(mode="after")
    def _preset_and_settings_exist(self) -> ModelSpec:
        from stages.models.presets import resolve_preset  # torch-free

        resolve_preset(self.family, self.preset, self.settings)
        return self
