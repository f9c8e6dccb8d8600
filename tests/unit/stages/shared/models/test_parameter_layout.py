"""Each family's parameters counted from its config (``parameters.py``) against the
parameters of the model built from it: every preset, and the settings that change
which modules exist or are shared."""

from __future__ import annotations

import pytest

from stages.shared.models.families import FAMILIES, family
from stages.shared.models.flops import cost_summary, forward_flops, parameter_counts, parameter_sides, six_nd

TAGS, PAD = (4, 5), 0
SETTINGS = {
    "transformer": [{}, {"share_embeddings": False}, {"learned_positions": True, "pre_norm": True}],
    "rnn": [{}, {"cell": "gru", "attention": "general"}, {"attention": "dot", "attentional_dim": 32, "tie_embeddings": False},
            {"embed_dim": 48, "attentional_dim": 48, "tie_embeddings": True}],
    "decoder_only": [{}, {"learned_positions": True}],
    "convs2s": [{}, {"share_embeddings": False, "out_embed_dim": 40}],
}
CASES = [pytest.param(record.name, preset, settings, id=f"{record.name}-{preset}-{index}")
         for record in FAMILIES for preset in record.presets for index, settings in enumerate(SETTINGS[record.name])]


def vocabularies(record, config) -> tuple[int, int]:
    """Two sizes, or one joint vocabulary where the model needs it (the decoder-only
    model; the Transformer when its embeddings are one table)."""
    joint = record.joint_vocabulary or (record.name == "transformer" and config.share_embeddings)
    return (120, 120) if joint else (120, 96)


@pytest.mark.parametrize("name, preset, settings", CASES)
def test_the_counted_parameters_are_the_built_models(name, preset, settings):
    record = family(name)
    config = record.resolve(preset, settings)
    src_vocab, tgt_vocab = vocabularies(record, config)
    model = record.build(config, src_vocab, tgt_vocab, TAGS, PAD)
    layout = record.parameter_layout(config, src_vocab, tgt_vocab)
    assert layout.counts() == parameter_counts(model)
    assert layout.sides() == parameter_sides(model)
    # nmt inspect's row, from the config alone, is the built model's
    cost = cost_summary(name, config, src_vocab, tgt_vocab, 13.4, 15.6)
    assert cost["forward_flops_per_tgt_token"] == forward_flops(model, 13, 16) / 16
    assert cost["six_nd_per_tgt_token"] == six_nd(model, 13, 16) / 16


def test_what_the_built_model_refuses_the_count_refuses_too():
    with pytest.raises(ValueError, match="hidden must be even"):
        family("rnn").resolve("tiny", {"hidden": 129})
    with pytest.raises(ValueError, match="tie_embeddings needs the attentional vector as wide as the embeddings"):
        family("rnn").resolve("tiny", {"tie_embeddings": True})  # hidden 128 wide, embeddings 64
    transformer = family("transformer").resolve("tiny", {})
    with pytest.raises(ValueError, match="share_embeddings needs a joint vocabulary"):
        cost_summary("transformer", transformer, 120, 96, 10, 10)
    with pytest.raises(ValueError, match="decoder_only family needs a joint vocabulary"):
        cost_summary("decoder_only", family("decoder_only").resolve("tiny", {}), 120, 96, 10, 10)
