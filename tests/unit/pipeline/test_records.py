"""Typed records (pipeline/core/records.py): written in field order, nested and keyed
fields flat, and read back only when every field is known and every required one there."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pipeline.core.records import RecordError, keyed, load, nested, optional, to_json


@dataclass(kw_only=True)
class Scores:
    bleu: float
    chrf: float | None = optional()


@dataclass(kw_only=True)
class Summary:
    steps: int
    best: float | None = optional()
    capability: str | None = None
    beam: Scores = nested("", Scores, required=True)
    probe_seconds: dict[str, float] = keyed("probe_seconds_")
    greedy: Scores | None = nested("greedy_", Scores)


def test_fields_are_written_in_order_with_nested_and_keyed_ones_flat():
    summary = Summary(steps=3, beam=Scores(bleu=1.0, chrf=2.0), probe_seconds={"bf16": 0.5, "fp32": 0.4},
                      greedy=Scores(bleu=0.5))
    assert list(to_json(summary).items()) == [
        ("steps", 3), ("capability", None), ("bleu", 1.0), ("chrf", 2.0), ("probe_seconds_bf16", 0.5),
        ("probe_seconds_fp32", 0.4), ("greedy_bleu", 0.5)]  # optional fields without a value left out
    assert load(Summary, to_json(summary), "here") == summary


def test_absent_optional_and_nested_fields_read_as_none():
    summary = load(Summary, {"steps": 1, "bleu": 3.0}, "here")
    assert (summary.best, summary.capability, summary.greedy, summary.probe_seconds) == (None, None, None, {})
    assert summary.beam == Scores(bleu=3.0)


@pytest.mark.parametrize("data, named", [
    ({"bleu": 3.0}, "'steps'"),  # a required field missing
    ({"steps": 1}, "'bleu'"),  # a required nested record's field missing
    ({"steps": 1, "bleu": 3.0, "bets": 1.0}, "'bets'"),  # an optional field renamed by its writer
    ({"steps": 1, "bleu": 3.0, "greedy_chrf": 1.0}, "'greedy_bleu'"),  # half a nested record
])
def test_a_missing_or_unknown_field_is_an_error_naming_the_source_and_the_field(data, named):
    with pytest.raises(RecordError, match=f"^artifact x/1: Summary .*{named}"):
        load(Summary, data, "artifact x/1")
