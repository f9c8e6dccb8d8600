"""A select artifact's choice as a record, written by the select stage and read by the
orchestration (the next round's candidates, the runs that confirm the choice) and the
report: torch- and Ray-free."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.records import FieldAccess, load, to_json

CHOICE_FILE = "choice.json"


@dataclass(kw_only=True)
class CandidateScore(FieldAccess):
    """One candidate (a size at a peak rate) at one budget, over the selection seeds."""

    size: str
    lr: float
    valid_loss: float | None  # the mean over the seeds of each run's final validation loss
    valid_losses: list[float | None]  # each seed's, in the order of ``seeds``
    source_use: list[float | None]  # each seed's, nats per target token (validation split)
    translates: str  # the gate's verdict on source use over every seed (stages/shared/gate.py)
    why: str | None  # where a seed does not translate or is undecided: why


@dataclass(kw_only=True)
class BudgetChoice(FieldAccess):
    """At one budget: every candidate, and the one chosen (the lowest validation loss among
    those that translate); ``size`` and ``lr`` None where none translates."""

    budget: float
    size: str | None
    lr: float | None
    size_edge: str | None  # "smallest" or "largest": the chosen size is that end of the sizes tried
    rate_edge: str | None  # "lowest" or "highest": the chosen rate is that end of its size's rates
    candidates: list[CandidateScore]


@dataclass(kw_only=True)
class Candidate(FieldAccess):
    size: str
    lr: float


@dataclass(kw_only=True)
class SelectionChoice(FieldAccess):
    """A configured model's choice at each budget, made on the selection seeds, and the
    candidates the next round adds where a choice sits at an edge ([]: settled)."""

    model: str
    seeds: list[int]  # the selection seeds: they chose, and take part in no verdict
    metric: str  # what chose
    budgets: list[BudgetChoice]
    extend: list[Candidate]
    extensions_left: int  # rounds of extension that were still allowed when it chose

    def to_json(self) -> dict:
        return to_json(self)


def read_selection(artifact: Path) -> SelectionChoice:
    path = Path(artifact) / CHOICE_FILE
    return parse_selection(path.read_text(), str(path))


def parse_selection(text: str, source: str) -> SelectionChoice:
    return load(SelectionChoice, json.loads(text), source)
