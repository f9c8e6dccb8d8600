"""The Transformer's counted FLOPs: encoder, decoder with cross-attention, output projection.

Counted as ``stages/shared/models/flops.py`` says. Torch-free: arithmetic over the model's
config and layer shapes."""

from __future__ import annotations

from stages.shared.models.matmul_flops import attention_layer

def forward_flops(model, src_len: int, tgt_len: int, source_logits: bool = True) -> int:
    """One teacher-forced forward pass (``source_logits``: the encoder-decoder never
    predicts its source)."""
    c, vocab = model.config, model.output.out_features
    d, S, T = c.d_model, src_len, tgt_len
    encoder = c.encoder_layers * (attention_layer(S, S, d) + 2 * 2 * S * d * c.ff_dim)
    cross = 2 * T * d * d * 2 + 2 * S * d * d * 2 + 2 * 2 * T * S * d
    decoder = c.decoder_layers * (attention_layer(T, T, d) + cross + 2 * 2 * T * d * c.ff_dim)
    return encoder + decoder + 2 * T * d * vocab
