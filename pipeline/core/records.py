"""Typed records of what a stage writes as JSON, read back with every field checked.

A stage's summary (the train stage's ``TrainSummary``, the evaluate stage's
``EvalSummary``) is a dataclass beside the code that writes it. ``to_json`` gives the
dict written to the artifact (its manifest's ``metrics``, the stage's own report file),
its keys in the fields' order; ``load`` reads one back and refuses, naming the artifact
and the field, a dict that lacks a field this code needs or holds one it does not know
(a field renamed on one side only), where a dict read by key would have given ``None``
and a ``-`` in the report.

The kinds of field, by how they are declared:

- no default: required, always written;
- ``optional()``: written only when it holds a value (a run that did not validate has
  no best loss), absent means ``None``;
- ``nested(prefix)``: another record's fields written flat into this one, each name
  prefixed (the evaluate stage's ``greedy_bleu`` is its greedy decode's ``bleu``);
  optional when its default is ``None``;
- ``keyed(prefix)``: a ``dict[str, value]`` written flat, one ``prefix + key`` each (a
  measurement per precision).

A field with a plain default is always written, and may be absent in artifacts written
before it existed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

RecordT = TypeVar("RecordT")

_OPTIONAL, _NESTED, _KEYED = "optional", "nested", "keyed"


class RecordError(ValueError):
    """A stored record that this code cannot read as written."""


def optional() -> Any:
    """A field written only when it holds a value."""
    return dataclasses.field(default=None, metadata={_OPTIONAL: True})


def nested(prefix: str, record_type: type, required: bool = False) -> Any:
    """A record's fields written flat under ``prefix``; absent (None) unless ``required``."""
    metadata = {_NESTED: (prefix, record_type)}
    return dataclasses.field(metadata=metadata) if required else dataclasses.field(default=None, metadata=metadata)


def keyed(prefix: str) -> Any:
    """A ``dict`` written flat, one ``prefix + key`` per entry."""
    return dataclasses.field(default_factory=dict, metadata={_KEYED: prefix})


def to_json(record: Any) -> dict:
    """The dict a record is written as: its fields in order, nested ones flattened."""
    written: dict = {}
    for spec in dataclasses.fields(record):
        value = getattr(record, spec.name)
        if _NESTED in spec.metadata:
            if value is not None:
                prefix = spec.metadata[_NESTED][0]
                written.update({prefix + name: item for name, item in to_json(value).items()})
        elif _KEYED in spec.metadata:
            written.update({spec.metadata[_KEYED] + key: item for key, item in value.items()})
        elif value is not None or not spec.metadata.get(_OPTIONAL):
            written[spec.name] = value
    return written


def load(record_type: type[RecordT], data: dict, source: str) -> RecordT:
    """``data`` as a ``record_type``; ``RecordError`` naming ``source`` (the artifact or
    file it came from) and the field when a field is missing or unknown."""
    values, claimed = _claim(record_type, data, f"{source}: {record_type.__name__}")
    unknown = [key for key in data if key not in claimed]
    if unknown:
        raise RecordError(f"{source}: {record_type.__name__} has no field {unknown[0]!r} (written by another "
                          "version, or renamed?)")
    return record_type(**values)


def _claim(record_type: type, data: dict, reader: str, prefix: str = "") -> tuple[dict, set[str]]:
    """The constructor arguments of ``record_type`` found in ``data`` under ``prefix``,
    and which keys of ``data`` they took; ``reader`` begins the error of a missing field."""
    values: dict = {}
    claimed: set[str] = set()
    for spec in dataclasses.fields(record_type):
        if _NESTED in spec.metadata:
            inner_prefix, inner_type = spec.metadata[_NESTED]
            start = prefix + inner_prefix
            inner_names = {inner.name for inner in dataclasses.fields(inner_type)}
            present = any(key.startswith(start) and key[len(start):] in inner_names for key in data)
            if present or spec.default is dataclasses.MISSING:
                inner_values, inner_keys = _claim(inner_type, data, reader, start)
                values[spec.name] = inner_type(**inner_values)
                claimed |= inner_keys
        elif _KEYED in spec.metadata:
            start = prefix + spec.metadata[_KEYED]
            values[spec.name] = {key[len(start):]: item for key, item in data.items() if key.startswith(start)}
            claimed |= {key for key in data if key.startswith(start)}
        elif prefix + spec.name in data:
            values[spec.name] = data[prefix + spec.name]
            claimed.add(prefix + spec.name)
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise RecordError(f"{reader} needs field {prefix + spec.name!r}, which is missing (written by another "
                              "version, or renamed?)")
    return values, claimed
