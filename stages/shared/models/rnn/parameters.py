"""The attention RNN's parameters, counted from its config (stages/shared/models/parameter_layout.py)."""

from __future__ import annotations

from stages.shared.models.parameter_layout import ParameterLayout, linear
from stages.shared.models.rnn.config import RnnConfig


def recurrent_layer(cell: str, inputs: int, hidden: int) -> int:
    """One direction of one layer of torch's LSTM (4 gates) or GRU (3): input and
    recurrent weights, each with its bias."""
    gates = (4 if cell == "lstm" else 3) * hidden
    return gates * (inputs + hidden) + 2 * gates


def parameter_layout(c: RnnConfig, src_vocab: int, tgt_vocab: int) -> ParameterLayout:
    H, A, E, half = c.hidden, c.attentional_dim or c.hidden, c.embed_dim, c.hidden // 2
    encoder = sum(2 * recurrent_layer(c.cell, E if layer == 0 else H, half)  # two directions
                  for layer in range(c.encoder_layers))
    decoder = sum(recurrent_layer(c.cell, E + A if layer == 0 else H, H)  # input feeding: A wide
                  for layer in range(c.decoder_layers))
    attention = {"additive": linear(H, H, bias=False) + linear(H, H) + linear(H, 1, bias=False),
                 "general": linear(H, H, bias=False), "dot": 0}[c.attention]
    output = linear(A, tgt_vocab)
    return ParameterLayout(embedding=(src_vocab + tgt_vocab) * E, encoder=encoder + linear(H, H),  # the bridge
                           decoder=decoder + attention + linear(2 * H, A, bias=False), output=output,
                           output_tied=A * tgt_vocab if c.tie_embeddings else 0)
