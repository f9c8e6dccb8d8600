"""The attention RNN's counted FLOPs: gate products of both recurrences, attention, output.

Counted as ``stages/shared/models/flops.py`` says. Torch-free: arithmetic over the model's
config and layer shapes."""

from __future__ import annotations


def recurrent_flops(model, src_len: int, tgt_len: int) -> int:
    """The gate products of the encoder and decoder recurrences alone."""
    c = model.config
    H, A, half, gates = c.hidden, c.attentional_dim or c.hidden, c.hidden // 2, 4 if c.cell == "lstm" else 3
    encoder = sum(2 * src_len * 2 * ((c.embed_dim if layer == 0 else H) + half) * gates * half  # two directions
                  for layer in range(c.encoder_layers))
    decoder = sum(2 * tgt_len * ((c.embed_dim + A if layer == 0 else H) + H) * gates * H  # input feeding: A wide
                  for layer in range(c.decoder_layers))
    return encoder + decoder


def forward_flops(model, src_len: int, tgt_len: int, source_logits: bool = True) -> int:
    """One teacher-forced forward pass (``source_logits``: the RNN never predicts its source)."""
    c, vocab = model.config, model.output.out_features
    H, A, S, T = c.hidden, c.attentional_dim or c.hidden, src_len, tgt_len
    bridge = c.encoder_layers * 2 * H * H * (2 if c.cell == "lstm" else 1)
    precompute = 0 if c.attention == "dot" else 2 * S * H * H
    per_step = 2 * S * H  # scores (dot, general) or v^T tanh(...) (additive)
    if c.attention == "additive":
        per_step += 2 * H * H  # query projection
    per_step += 2 * S * H + 2 * 2 * H * A + 2 * A * vocab  # weighted sum, combine, output
    return recurrent_flops(model, S, T) + bridge + precompute + T * per_step
