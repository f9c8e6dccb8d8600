"""The decoder-only translator's parameters, counted from its config
(stages/shared/models/parameter_layout.py): one stack, its output tied to the embedding."""

from __future__ import annotations

from stages.shared.models.decoder_only.config import DecoderOnlyConfig
from stages.shared.models.parameter_layout import (
    ParameterLayout,
    attention,
    feed_forward,
    layer_norm,
    positions,
)


def parameter_layout(c: DecoderOnlyConfig, src_vocab: int, tgt_vocab: int) -> ParameterLayout:
    d, vocab = c.d_model, src_vocab  # one joint vocabulary
    block = attention(d) + feed_forward(d, c.ff_dim) + 2 * layer_norm(d)
    return ParameterLayout(embedding=vocab * d + positions(c.max_positions, d, c.learned_positions), encoder=0,
                           decoder=c.layers * block + layer_norm(d), output=vocab * d, output_tied=vocab * d)
