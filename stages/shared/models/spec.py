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

    # The stages' names: train/<name>, evaluate/<name>, and their folders' names, which
    # its size, budget and seed lengthen (a file name holds at most 255 bytes).
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=100)
    family: Literal[NAMES]  # a folder of stages/shared/models/, listed in families.py
    preset: str = "small"  # a named size of the family (its config.py): tiny, small, base, big, ...
    # Or several of the family's presets: the model is trained at each, each run named
    # after the model and size (transformer.w128), settings applying to every size. The
    # report draws each family's frontier across them (docs/comparing.md). Left out of
    # keys: every run is of one size, which its preset names.
    sizes: list[str] = Field(default=[], exclude=True)
    # With budgets, the budgets some sizes train at, where not every one: an IsoFLOP
    # study's window of sizes around each budget's optimum (Hoffmann et al. 2022,
    # approach 2), so that a small size need not train to the largest budget nor a large
    # one at the smallest. A size left out trains at every budget. Left out of keys.
    size_budgets: dict[str, list[float]] = Field(default={}, exclude=True)
    settings: dict[str, Any] = {}  # hyperparameters over the preset's (d_model, layers, dropout, ...)
    train: dict[str, Any] = {}  # train keys for this model only (lr, warmup_steps, ...)
    # Tune keys for this model only (say a longer trial, budget_fraction, for a family whose
    # short trials favour a rate its runs cannot take), over the experiment's tune section.
    # Left out of keys: a tune stage's key holds the tune section it ran with, merged.
    tune: dict[str, Any] = Field(default={}, exclude=True)
    # With the experiment's select section: this model's own candidate peak rates
    # (``select: {learning_rates: [...]}``) in place of select.learning_rates, for families
    # whose best rates lie apart. Left out of keys: each candidate's run holds its rate.
    select: dict[str, Any] = Field(default={}, exclude=True)
    # Set by the experiment's seeds and budgets, not in a config: the configured model
    # this run is one of (its name without the budget and seed suffixes). Left out
    # of keys and manifests: the run's name and train overrides already say it.
    run_of: str | None = Field(default=None, exclude=True)
    # Set by the experiment's branch_budgets, not in a config: the train stage whose final
    # checkpoint this run continues (TrainStageConfig.start_from, in its keys).
    start_from: str | None = Field(default=None, exclude=True)
    # Set by the experiment's branch_budgets, not in a config: whether the run is a
    # stable-phase segment that stops where its budget's decay begins.
    until_decay: bool = Field(default=False, exclude=True)
    # Set by the experiment's tune section: the tune stage whose chosen learning rate
    # this run trains with (TrainStageConfig.lr_from, in its keys).
    lr_from: str | None = Field(default=None, exclude=True)
    # Set by the experiment's select section, not in a config: the budgets a chosen
    # configuration trains at (those where it was chosen). null: every budget.
    budgets: list[float] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _preset_and_settings_exist(self) -> ModelSpec:
        if not self.sizes:
            if self.size_budgets:
                raise ValueError("size_budgets restricts the budgets of sizes: list the sizes")
            family(self.family).resolve(self.preset, self.settings)  # torch-free
            return self
        unknown = [size for size in self.size_budgets if size not in self.sizes]
        if unknown:
            raise ValueError(f"size_budgets names {unknown}, which are not among sizes {self.sizes}")
        if "preset" in self.model_fields_set:
            raise ValueError("name the preset or the sizes, not both: sizes are presets, one run each")
        if len(set(self.sizes)) != len(self.sizes):
            raise ValueError(f"sizes must be distinct; got {self.sizes}")
        presets = family(self.family).presets
        missing = [size for size in self.sizes if size not in presets]
        if missing:
            raise ValueError(f"sizes {missing} are not {self.family} presets; presets are: {', '.join(presets)}")
        resolved = [family(self.family).resolve(size, {}) for size in self.sizes]
        varying = sorted(key for key in self.settings
                         if len({getattr(config, key, None) for config in resolved}) > 1)
        if varying:
            raise ValueError(f"settings {varying} would make every size the same in what the sizes differ in; "
                             f"leave them to the presets {self.sizes}")
        for size in self.sizes:
            family(self.family).resolve(size, self.settings)
        return self

    def at_sizes(self) -> list[ModelSpec]:
        """One spec per size (named ``<name>.<size>``, with that preset), or this one."""
        return [self.model_copy(update={"name": f"{self.name}.{size}", "preset": size, "sizes": [], "size_budgets": {}})
                for size in self.sizes] or [self]
