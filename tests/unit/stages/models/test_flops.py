"""Decoding FLOPs: the source's work once, the target's once per hypothesis."""

from __future__ import annotations

import pytest

from stages.models.flops import decoding_flops, forward_flops
from stages.models.build import build_model


@pytest.mark.parametrize("family", ["transformer", "decoder_only", "rnn"])
def test_greedy_decoding_costs_one_forward_pass_and_each_hypothesis_adds_the_target_part(family):
    model = build_model(family, "tiny", {}, 500, 500)
    greedy = decoding_flops(model, 12, 15, beam_size=1)
    if family == "decoder_only":
        # The prompt (source tag + 12 source tokens) is read, never projected onto the vocabulary.
        assert greedy == forward_flops(model, 12, 15) - 2 * 13 * model.config.d_model * 500
    else:
        assert greedy == forward_flops(model, 12, 15)
    target_part = forward_flops(model, 12, 15) - forward_flops(model, 12, 0)
    assert 0 < target_part < greedy
    assert decoding_flops(model, 12, 15, beam_size=4) == greedy + 3 * target_part
