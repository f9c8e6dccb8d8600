"""The select stage's config: the seeds and peak rates every configured model's
candidates train with, and the slice one select stage is keyed on (one configured
model's candidate runs)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from pipeline.core.section import Section


class SelectConfig(Section):
    """Each family at its best at every budget, chosen on seeds that then take part in
    no comparison. Every configured model's ``sizes`` (presets of the family's width ladder,
    w3 ... w1024) are its candidate sizes; each size trains at each of ``learning_rates``
    on the selection ``seeds``, at every budget (branched where ``branch_budgets`` is
    set). At each budget, the candidate with the lowest validation loss among those whose
    every selection seed translates (the gate's source use, on the validation split) is
    chosen; a choice at an edge of the sizes or rates tried adds the next size or rate
    beyond it and chooses again. The chosen configurations then train on the
    experiment's ``seeds``, and only those runs are evaluated on the test set and
    compared (docs/comparing.md, "Select, then confirm")."""

    # The selection seeds: each candidate trains once per seed. They must differ from the
    # experiment's seeds, which confirm the choice.
    seeds: list[int] = Field(min_length=1)
    # The peak rates each size tries (the wsd schedule's peak), best log-spaced; a new
    # size added past an edge tries the rates its neighbour tried.
    learning_rates: list[float] = Field(min_length=1)
    # How many times the sizes and rates may be extended past an edge the choice sits on;
    # each extension is one more round of candidate runs. 0: never (the report says where
    # a choice sits at an edge).
    max_extensions: int = Field(default=2, ge=0)

    @field_validator("learning_rates")
    @classmethod
    def _rates(cls, value: list[float]) -> list[float]:
        if any(rate <= 0 for rate in value) or len(set(value)) != len(value):
            raise ValueError(f"rates must be distinct and above 0; got {value}")
        return sorted(value)

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"seeds must be distinct; got {value}")
        return value


class CandidateRun(Section):
    """One run of a candidate: its size and peak rate, the budget and selection seed it
    trained at, and the run (``train/<run>``)."""

    size: str
    lr: float
    budget: float
    seed: int
    run: str


class SelectStageConfig(Section):
    """A select stage's slice: one configured model and every candidate run trained for
    it so far, with what an extension may add."""

    model: str  # the configured model (models[].name)
    ladder: list[str]  # the family's width presets, narrowest first: where sizes extend to
    runs: list[CandidateRun]
    budgets: list[float]
    extensions_left: int = Field(ge=0)  # rounds of extension still allowed


WIDTH = re.compile(r"^w(\d+)$")


def width_ladder(presets: list[str]) -> list[str]:
    """A family's width presets (w3, w4, ..., w1024), narrowest first."""
    return sorted((name for name in presets if WIDTH.match(name)), key=lambda name: int(WIDTH.match(name)[1]))
