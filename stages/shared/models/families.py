"""The model families the pipeline trains and compares: this list is the one place that
names them. A family is a folder of ``stages/shared/models/`` exporting its ``FAMILY`` record
(``family.py``); adding one is a folder and a line here (docs/models.md)."""

from __future__ import annotations

from stages.shared.models import convs2s, decoder_only, rnn, transformer
from stages.shared.models.family import ModelFamily

FAMILIES: tuple[ModelFamily, ...] = (
    transformer.FAMILY,
    rnn.FAMILY,
    decoder_only.FAMILY,
    convs2s.FAMILY,
)
NAMES = tuple(family.name for family in FAMILIES)


def family(name: str) -> ModelFamily:
    """The family called ``name``; ValueError names the families there are."""
    for candidate in FAMILIES:
        if candidate.name == name:
            return candidate
    raise ValueError(f"unknown model family {name!r}; families are: {', '.join(NAMES)}")


def family_of(model) -> ModelFamily:
    """A built model's family (every model class names its own: ``family = "..."``)."""
    return family(model.family)
