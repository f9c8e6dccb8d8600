"""The names of a model's stages, built in one place. The graph creates
``train/<model>`` and ``evaluate/<model>``; the evaluate and report stages, ``nmt
report``, ``nmt translate`` and the benchmarks find them by the same names."""

from __future__ import annotations

TRAIN = "train"
EVALUATE = "evaluate"
TUNE = "tune"
SELECT = "select"


def train_stage(model: str) -> str:
    return f"{TRAIN}/{model}"


def tune_stage(model: str) -> str:
    return f"{TUNE}/{model}"


def select_stage(model: str) -> str:
    return f"{SELECT}/{model}"


def evaluate_stage(model: str) -> str:
    return f"{EVALUATE}/{model}"


def trained_model(stage: str) -> str | None:
    """The model a ``train/<model>`` stage trains; None for any other stage."""
    group, _, model = stage.partition("/")
    return model if group == TRAIN and model else None
