"""The decoder-only translator's counted FLOPs: one causal stack over source and target.

Counted as ``stages/shared/models/flops.py`` says. Torch-free: arithmetic over the model's
config and layer shapes."""

from __future__ import annotations

from stages.shared.models.matmul_flops import attention_layer

def forward_flops(model, src_len: int, tgt_len: int, source_logits: bool = True) -> int:
    """One teacher-forced forward pass over ``<src-tag> source <tgt-tag> target``;
    ``source_logits=False``: the source positions are not projected onto the vocabulary
    (an update after the reconstruction loss has ended, and decoding's prompt)."""
    c, vocab = model.config, model.output.out_features
    length = src_len + tgt_len + 1  # source tag, source, target tag, target minus its last token
    block = attention_layer(length, length, c.d_model) + 2 * 2 * length * c.d_model * c.ff_dim
    projected = length if source_logits else tgt_len  # the source tag and source are not projected without
    return c.layers * block + 2 * projected * c.d_model * vocab
