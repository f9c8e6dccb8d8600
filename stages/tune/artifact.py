"""The reader of a tune artifact's choice, for the train stage and the report:
torch- and Ray-free."""

from __future__ import annotations

import json
from pathlib import Path

CHOICE_FILE = "choice.json"  # {"lr": the chosen rate, "trials": one row per rate tried}


def read_choice(artifact: Path) -> dict:
    return json.loads((Path(artifact) / CHOICE_FILE).read_text())


def grid_edge(rate: float, tried: list[float]) -> str | None:
    """"lowest" or "highest" when ``rate`` is that end of the sorted rates ``tried``: the
    best rate may lie beyond them."""
    if rate == tried[0]:
        return "lowest"
    return "highest" if rate == tried[-1] else None
