"""The Transformer's parameters, counted from its config (stages/shared/models/parameter_layout.py)."""

from __future__ import annotations

from stages.shared.models.parameter_layout import (
    ParameterLayout,
    attention,
    feed_forward,
    layer_norm,
    positions,
)
from stages.shared.models.transformer.config import TransformerConfig, check_vocabularies


def parameter_layout(c: TransformerConfig, src_vocab: int, tgt_vocab: int) -> ParameterLayout:
    check_vocabularies(c, src_vocab, tgt_vocab)
    d = c.d_model
    tables = src_vocab * d + (0 if c.share_embeddings else tgt_vocab * d)
    final_norm = layer_norm(d) if c.pre_norm else 0  # pre-LN closes each stack with one
    encoder_layer = attention(d) + feed_forward(d, c.ff_dim) + 2 * layer_norm(d)
    decoder_layer = 2 * attention(d) + feed_forward(d, c.ff_dim) + 3 * layer_norm(d)
    output = d * tgt_vocab  # no bias; the shared embedding where embeddings are shared
    return ParameterLayout(embedding=tables + positions(c.max_positions, d, c.learned_positions),
                           encoder=c.encoder_layers * encoder_layer + final_norm,
                           decoder=c.decoder_layers * decoder_layer + final_norm,
                           output=output, output_tied=output if c.share_embeddings else 0)
