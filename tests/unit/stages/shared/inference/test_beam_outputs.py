"""The beam search gives the outputs recorded in tests/data/beam_outputs.json: every
family, four settings (tests/beam_outputs.py). A change to the search that changes them
fails here; record again only where that is meant (``python -m tests.beam_outputs --record``)."""

from __future__ import annotations

import json

from tests.beam_outputs import RECORD, differences, outputs


def test_the_search_gives_the_recorded_outputs():
    recorded = json.loads(RECORD.read_text())
    assert len(recorded) == 16
    assert differences(outputs(), recorded) == []


def test_a_changed_token_or_score_is_a_difference():
    recorded = json.loads(RECORD.read_text())
    changed = json.loads(json.dumps(recorded))
    changed["rnn/greedy"][0][0][0][0] += 1
    changed["transformer/greedy"][1][0][1] += 0.01
    assert differences(changed, recorded) == ["rnn/greedy", "transformer/greedy"]
