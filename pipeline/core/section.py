"""The small core every config section shares: a frozen pydantic model that refuses
unknown keys (a typo is an error, not a silently ignored key), and the rule for
relative paths (they resolve against the config file's own directory, which
``load_config`` passes as the validation context's ``base_dir``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # Fields that say how the work is spread out, not what it produces (tests show the
    # output is the same for any value): left out of artifact keys, so that a cluster
    # of another size reuses the same artifacts.
    NOT_IN_KEY: ClassVar[frozenset[str]] = frozenset()


def key_exclusions(section: Section) -> dict:
    """What ``model_dump(exclude=...)`` leaves out of ``section``'s artifact key: its own
    ``NOT_IN_KEY`` fields and those of the sections inside it (a train stage's slice
    holds the train section)."""
    excluded: dict = {name: True for name in section.NOT_IN_KEY}
    for name in type(section).model_fields:
        value = getattr(section, name)
        nested = key_exclusions(value) if isinstance(value, Section) else {}
        if name not in excluded and nested:
            excluded[name] = nested
    return excluded


def resolve_path(value: str, info: ValidationInfo) -> str:
    """``value`` with ``~`` expanded, made absolute against the config file's directory."""
    base = (info.context or {}).get("base_dir")
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() or base is None else (Path(base) / path).resolve())
