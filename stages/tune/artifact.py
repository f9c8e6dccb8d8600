"""The reader of a tune artifact's choice, for the train stage and the report:
torch- and Ray-free."""

from __future__ import annotations

import json
from pathlib import Path

CHOICE_FILE = "choice.json"  # {"lr": the chosen rate, "trials": one row per rate tried}


def read_choice(artifact: Path) -> dict:
    return json.loads((Path(artifact) / CHOICE_FILE).read_text())
