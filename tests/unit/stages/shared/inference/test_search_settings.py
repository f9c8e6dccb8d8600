"""Every search setting is finite and bounded, in configs, nmt translate and requests
alike: no setting can ask for a search that never ends."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stages.shared.inference.search import MAX_BEAM_SIZE, MAX_OUTPUT_TOKENS, SearchSettings, output_room


@pytest.mark.parametrize("field, value, message", [
    ("max_length_a", float("nan"), "finite number"),
    ("max_length_a", float("inf"), "finite number"),
    ("max_length_a", 1e30, "less than or equal to 10"),
    ("length_penalty", float("nan"), "finite number"),
    ("min_length", 1_000_000_000, f"less than or equal to {MAX_OUTPUT_TOKENS}"),
    ("max_length_b", 10_000, f"less than or equal to {MAX_OUTPUT_TOKENS}"),
    ("beam_size", 10_000, f"less than or equal to {MAX_BEAM_SIZE}"),
])
def test_a_setting_past_its_bound_is_refused_naming_it(field, value, message):
    with pytest.raises(ValidationError, match=message) as error:
        SearchSettings(**{field: value})
    assert error.value.errors()[0]["loc"] == (field,)


def test_the_output_limit_is_a_times_x_plus_b_within_the_model():
    search = SearchSettings(max_length_a=1.5, max_length_b=10)
    assert search.output_length_limit(20) == 40
    assert search.output_length_limit(20, model_limit=25) == 25
    # A model with 64 positions: the source and its two tags take theirs, never less than one is left.
    assert output_room(64, 20) == 42 and output_room(64, 80) == 1 and output_room(None, 10_000) is None


def test_a_min_length_no_output_can_pass_names_the_sentence_and_its_limit():
    search = SearchSettings(min_length=30, max_length_a=1.0, max_length_b=20)
    search.check_min_length([12, 11])  # 32 and 31 tokens allowed: fine
    with pytest.raises(ValueError, match=r"min_length \(30\) must be below .* sentence 1 \(29 tokens"):
        search.check_min_length([12, 9])
    with pytest.raises(ValueError, match=r"sentence 0 \(25 tokens"):
        search.check_min_length([12], model_limit_of=lambda length: 25)


def test_a_search_costs_the_beam_times_each_sentence_s_output_limit_within_the_model_s_positions():
    search = SearchSettings(beam_size=4, max_length_a=1.0, max_length_b=50)
    assert search.hypothesis_steps([10, 20]) == 4 * (10 + 50) + 4 * (20 + 50)
    # A model with 64 positions leaves 64 - 20 - 2 output tokens after a source of 20.
    assert search.hypothesis_steps([20], lambda length: 64 - length - 2) == 4 * 42
    assert search.hypothesis_steps([]) == 0
