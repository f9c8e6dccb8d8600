"""The overrides (``--set``) of the last ``nmt run`` of each experiment, kept in its
artifact store (``.nmt-runs/<experiment>.json``), so that ``nmt translate``, ``export``,
``attention`` and ``serve`` with ``CONFIG --model NAME`` find a model that a run with
``--set`` trained without the user repeating them (``--set 'seeds=[1,2]'`` trains
``NAME.s1``, which the config as written does not have).

An override whose text holds a credential (an object store URI with keys) is not
recorded: the file would keep the secret.
"""

from __future__ import annotations

import json
import re
import time

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.object_store import redact

FOLDER = ".nmt-runs"


def _path(store: ArtifactStore, experiment: str) -> str:
    return f"{store.root}/{FOLDER}/{re.sub(r'[^A-Za-z0-9_.-]', '_', experiment)}.json"


def record(store: ArtifactStore, experiment: str, overrides: list[str]) -> None:
    """Keep ``overrides`` as the last run's of ``experiment`` (replacing the one before)."""
    kept = [override for override in overrides if redact(override) == override]
    data = {"experiment": experiment, "overrides": kept, "recorded": time.time()}
    path = _path(store, experiment)
    store.fs.create_dir(path.rpartition("/")[0], recursive=True)
    with store.fs.open_output_stream(path) as stream:
        stream.write(json.dumps(data, indent=1).encode())


def recorded(store: ArtifactStore, experiment: str) -> list[str]:
    """The overrides of the last ``nmt run`` of ``experiment`` in this store; [] if none
    was recorded (or the file cannot be read)."""
    try:
        with store.fs.open_input_stream(_path(store, experiment)) as stream:
            data = json.loads(stream.read())
    except (OSError, ValueError):  # none recorded, or a file cut off: as if none
        return []
    overrides = data.get("overrides") if isinstance(data, dict) else None
    return [str(item) for item in overrides] if isinstance(overrides, list) else []
