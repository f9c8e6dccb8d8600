"""A tune artifact's choice as a record, written by the tune stage and read by the
train stage and the report: torch- and Ray-free."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.records import FieldAccess, load, to_json

CHOICE_FILE = "choice.json"


@dataclass(kw_only=True)
class TuneChoice(FieldAccess):
    """The learning rate a tune stage chose, and every rate it tried."""

    lr: float  # the chosen rate
    metric: str  # what chose it
    budget: float  # the FLOPs each trial trained for
    best_lr: float  # the rate of the lowest loss (lr differs with prefer_lower_within)
    prefer_lower_within: float | None
    extensions: int  # how often the grid was extended past an edge
    at_edge: str | None  # "lowest" or "highest" when the best rate is an end of the grid
    trials: list[dict]  # one row per rate tried: its rate, best validation loss, updates

    def to_json(self) -> dict:
        return to_json(self)


def read_choice(artifact: Path) -> TuneChoice:
    path = Path(artifact) / CHOICE_FILE
    return load(TuneChoice, json.loads(path.read_text()), str(path))


def grid_edge(rate: float, tried: list[float]) -> str | None:
    """"lowest" or "highest" when ``rate`` is that end of the sorted rates ``tried``: the
    best rate may lie beyond them."""
    if rate == tried[0]:
        return "lowest"
    return "highest" if rate == tried[-1] else None
