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

A field whose type is a record, or a list or dict of records, is written as a nested
object (the report's comparison: its tests, its groups) and loaded back as records,
checked alike; an error names the path to the field (``Comparison.tests[2]``).

``FieldAccess`` lets a record be read by field name as the dicts it replaces were
(``row["delta"]``, ``row.get("seed")``), for the code that reads records and plain dicts
alike; a name that is not a field is a ``KeyError``, where a dict gave ``None``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
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


class FieldAccess:
    """Reading a record by field name: ``record["bleu"]``, ``record.get("seed", 0)``
    (the default also for a field that holds None), ``record["bleu"] = 1.0``."""

    def __getitem__(self, name: str) -> Any:
        if name not in _names(type(self)):
            raise KeyError(f"{type(self).__name__} has no field {name!r}")
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        value = self[name]
        return default if value is None else value

    def __setitem__(self, name: str, value: Any) -> None:
        self[name]  # a field, or KeyError
        setattr(self, name, value)

    def update(self, values: dict | None = None, **more: Any) -> None:
        for name, value in {**(values or {}), **more}.items():
            self[name] = value


@functools.cache
def _names(record_type: type) -> frozenset[str]:
    return frozenset(spec.name for spec in dataclasses.fields(record_type))


def to_json(record: Any) -> dict:
    """The dict a record is written as: its fields in order, nested ones flattened,
    records inside its values written as objects."""
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
            written[spec.name] = _encode(value)
    return written


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, (list, tuple)):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in value.items()}
    return value


def load(record_type: type[RecordT], data: dict, source: str, path: str = "") -> RecordT:
    """``data`` as a ``record_type``; ``RecordError`` naming ``source`` (the artifact or
    file it came from) and the field when a field is missing or unknown. ``path``: where
    ``data`` sits in an enclosing record, for the error (``Comparison.tests[2]``)."""
    reader = f"{source}: {path or record_type.__name__}"
    if not isinstance(data, dict):
        raise RecordError(f"{reader} should be an object, not {type(data).__name__}")
    values, claimed = _claim(record_type, data, reader)
    unknown = [key for key in data if key not in claimed]
    if unknown:
        raise RecordError(f"{reader} has no field {unknown[0]!r} (written by another version, or renamed?)")
    hints = _hints(record_type)
    for name, value in values.items():
        values[name] = _decode(hints[name], value, source, f"{path or record_type.__name__}.{name}")
    return record_type(**values)


@functools.cache
def _hints(record_type: type) -> dict[str, Any]:
    return typing.get_type_hints(record_type)


def _decode(hint: Any, value: Any, source: str, path: str) -> Any:
    """``value`` read as ``hint`` says: records (also in lists, dicts and optionals)
    loaded and checked; anything else as it is."""
    if value is None:
        return None
    if dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else load(hint, value, source, path)
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [argument for argument in arguments if argument is not type(None)]
        return _decode(inner[0], value, source, path) if len(inner) == 1 else value
    if origin in (list, tuple) and arguments and isinstance(value, list):
        return [_decode(arguments[0], item, source, f"{path}[{index}]") for index, item in enumerate(value)]
    if origin is dict and len(arguments) == 2 and isinstance(value, dict):
        return {key: _decode(arguments[1], item, source, f"{path}[{key!r}]") for key, item in value.items()}
    return value


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
