"""The convolutional model's counted FLOPs: the convolutions, each decoder layer's
attention, the projections between embedding and convolution widths, the output.

Counted as ``stages/shared/models/flops.py`` says (a convolution of kernel k from c_in to c_out
channels over L positions is 2·L·k·c_in·c_out). Torch-free: arithmetic over the config
and the output layer's shape."""

from __future__ import annotations


def forward_flops(model, src_len: int, tgt_len: int, source_logits: bool = True) -> int:
    """One teacher-forced forward pass (``source_logits``: it never predicts its source)."""
    c, vocab = model.config, model.output.out_features
    E, H, k, S, T = c.embed_dim, c.hidden, c.kernel_size, src_len, tgt_len
    convolution = 2 * k * H * 2 * H  # per position: to 2 x hidden channels, halved by the GLU
    encoder = 2 * S * E * H + c.encoder_layers * S * convolution + 2 * S * H * E
    attention = 2 * T * H * E + 2 * 2 * T * S * E + 2 * T * E * H  # in-projection, scores and sum, out-projection
    decoder = 2 * T * E * H + c.decoder_layers * (T * convolution + attention) + 2 * T * H * c.out_embed_dim
    return encoder + decoder + 2 * T * c.out_embed_dim * vocab
