"""The convolutional model's parameters, counted from its config
(stages/shared/models/parameter_layout.py). Its projections and convolutions are
weight-normalized: a direction (the weight's shape) and a gain per output unit."""

from __future__ import annotations

from stages.shared.models.convs2s.config import ConvS2SConfig
from stages.shared.models.parameter_layout import ParameterLayout, linear


def normalized_linear(inputs: int, outputs: int) -> int:
    return linear(inputs, outputs) + outputs  # + the gains


def normalized_convolution(channels: int, kernel_size: int) -> int:
    outputs = 2 * channels  # for the GLU
    return outputs * channels * kernel_size + outputs + outputs  # weight, bias, gains


def parameter_layout(c: ConvS2SConfig, src_vocab: int, tgt_vocab: int) -> ParameterLayout:
    E, H = c.embed_dim, c.hidden
    convolutions = normalized_convolution(H, c.kernel_size)
    encoder = normalized_linear(E, H) + c.encoder_layers * convolutions + normalized_linear(H, E)
    attention = normalized_linear(H, E) + normalized_linear(E, H)
    decoder = (normalized_linear(E, H) + c.decoder_layers * (convolutions + attention)
               + normalized_linear(H, c.out_embed_dim))
    return ParameterLayout(embedding=(src_vocab + tgt_vocab + 2 * c.max_positions) * E, encoder=encoder,
                           decoder=decoder, output=linear(c.out_embed_dim, tgt_vocab),
                           output_tied=c.out_embed_dim * tgt_vocab if c.share_embeddings else 0)
