"""The decoder's time per step and per row, measured from two forced searches, and what
it predicts for a request: deep searches go to the bulk lane, wide ones need not."""

from __future__ import annotations

import pytest

from pipeline.serving import decode_time
from stages.shared.inference.search import SearchSettings


def test_two_forced_searches_give_the_step_and_row_times_and_a_deep_search_costs_more(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(decode_time.time, "perf_counter", lambda: clock[0])
    seen = []

    def decode(sources, search):  # a stand-in decoder: 2 ms a step plus 0.01 ms a row, to the forced length
        assert search.min_length == search.max_length_b - 1 and search.max_length_a == 0
        seen.append((len(sources), search.beam_size))
        clock[0] += search.max_length_b * (2e-3 + 1e-5 * len(sources) * search.beam_size)

    found = decode_time.measure(decode)
    assert found.per_step_s == pytest.approx(2e-3) and found.per_row_s == pytest.approx(1e-5)
    assert seen == [(1, 1), (1, 1), (4, 8), (4, 8)]  # each decoded twice, the first to warm up
    # min_length forcing one sentence to 1,000 tokens at beam 1: 1,000 steps one after another.
    deep = decode_time.search_shape(SearchSettings(beam_size=1, max_length_b=1000, min_length=990), [12],
                                    lambda length: None)
    wide = decode_time.search_shape(SearchSettings(beam_size=4, max_length_b=20), [12] * 64, lambda length: None)
    assert deep == (1012, 1) and wide == (32, 256)
    assert found.seconds(*deep) > 0.3 > found.seconds(*wide)  # the deep one leaves the normal lane
